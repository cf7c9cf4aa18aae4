"""Zero-decimal currencies: the yen account's budgets and Insights money are whole yen."""

from __future__ import annotations

import re

from sandbox_helpers import Sandbox

MONEY = "spend,clicks,cpc,action_values,purchase_roas,account_currency"


async def test_yen_insights_money_is_whole_yen_on_the_budgets_scale(sandbox: Sandbox) -> None:
    reply = await sandbox.get(
        "/act_1004/insights",
        level="campaign",
        date_preset="yesterday",
        fields="campaign_name," + MONEY,
    )
    rows = {row["campaign_name"]: row for row in reply.body["data"]}
    prospecting = rows["[AUTO] Prospecting JP 1"]
    assert prospecting["account_currency"] == "JPY"
    assert re.fullmatch(r"\d+", prospecting["spend"])
    # a ¥30,000-a-day campaign spends tens of thousands of yen a day, not hundreds
    assert 15_000 < int(prospecting["spend"]) < 45_000
    cpc = int(prospecting["spend"]) / int(prospecting["clicks"])
    assert abs(float(prospecting["cpc"]) - cpc) < 1
    value = int(prospecting["action_values"][0]["value"])
    roas = float(prospecting["purchase_roas"][0]["value"])
    assert abs(value / int(prospecting["spend"]) - roas) < 0.001


async def test_cent_currencies_keep_two_decimals(sandbox: Sandbox) -> None:
    reply = await sandbox.get("/act_1002/insights", date_preset="yesterday", fields="spend")
    assert re.fullmatch(r"\d+\.\d\d", reply.body["data"][0]["spend"])
