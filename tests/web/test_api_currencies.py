"""A rule over ad accounts of different currencies must say what each amount means on each:
the API (422 with each amount's JSON path) and ``ruleengine rules validate --registered`` /
``rules apply`` refuse a bare amount, a per-currency amount without one of the accounts'
currencies, and an amount per currency on what is not money. A rule whose accounts share
one currency keeps its bare amounts.

The registered demo accounts: act_1001 USD, act_1002 EUR, act_1004 JPY.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import orjson
from web_helpers import AUTH, Client, rule_body

from ruleengine.settings import Settings
from ruleengine.store.db import Database
from test_cli import run

THREE = ["act_1001", "act_1002", "act_1004"]
ASK = (
    "the rule's accounts are in EUR, JPY and USD, where 20 is a different amount in each:"
    ' give this amount per currency, e.g. {"EUR": 20, "JPY": 20, "USD": 20} with each number'
    " in that currency's units"
)


def three_currencies() -> dict[str, Any]:
    """``cost_per_result > 20`` and a bounded raise over USD, EUR and JPY accounts."""
    body = rule_body("three currencies", ad_accounts=THREE)
    body["tasks"][0]["conditions"] = [
        {"metric": "impressions", "period": "today", "operator": ">", "value": 100},
        {"metric": "cost_per_result", "period": "last_7d", "operator": ">", "value": 20},
    ]
    body["tasks"][0]["action"] = {"type": "increase_budget", "percent": 10, "max_budget": 500}
    return body


async def errors_of(client: Client, body: dict[str, Any]) -> dict[str, str]:
    response = await client.post("/api/rules/validate", json=body, headers=AUTH)
    assert response.status == 422, await response.text()
    return {e["path"]: e["message"] for e in (await response.json())["errors"]}


async def test_a_bare_amount_over_three_currencies_is_refused_at_its_path(client: Client) -> None:
    errors = await errors_of(client, three_currencies())
    assert errors == {
        "tasks[0].conditions[1].value": ASK,
        "tasks[0].action.max_budget": ASK.replace("20", "500"),
    }
    saved = await client.post("/api/rules", json=three_currencies(), headers=AUTH)
    assert saved.status == 422
    assert (await client.get("/api/rules", headers=AUTH)).status == 200


async def test_per_currency_amounts_are_taken_and_a_missing_currency_is_named(
    client: Client,
) -> None:
    body = three_currencies()
    body["tasks"][0]["conditions"][1]["value"] = {"USD": 20, "EUR": 18, "JPY": 3000}
    body["tasks"][0]["action"]["max_budget"] = {"USD": 500, "JPY": 75000}
    errors = await errors_of(client, body)
    assert errors == {
        "tasks[0].action.max_budget": 'no amount for EUR, the currency of act_1002: add "EUR": …'
        " in EUR's own units"
    }
    body["tasks"][0]["action"]["max_budget"]["EUR"] = 450
    created = await client.post("/api/rules", json=body, headers=AUTH)
    assert created.status == 201, await created.text()
    stored = (await created.json())["definition"]["tasks"][0]
    assert stored["conditions"][1]["value"] == {"USD": 20, "EUR": 18, "JPY": 3000}
    assert stored["action"]["max_budget"] == {"USD": 500, "JPY": 75000, "EUR": 450}


async def test_amounts_per_currency_on_what_is_not_money_are_refused(client: Client) -> None:
    body = three_currencies()
    body["tasks"][0]["conditions"][0]["value"] = {"USD": 100}
    body["tasks"][0]["conditions"][1]["value"] = {"usd": 20}
    errors = await errors_of(client, body)
    assert errors["tasks[0].conditions[0].value"] == (
        "impressions is not an amount of money: give one value, not one per currency"
    )
    assert "'usd' is not a currency code" in errors["tasks[0].conditions[1].value"]


async def test_one_currency_keeps_its_bare_amounts(client: Client) -> None:
    body = three_currencies() | {"ad_accounts": ["act_1001", "act_1003"]}  # both in USD
    response = await client.post("/api/rules/validate", json=body, headers=AUTH)
    assert response.status == 200, await response.text()


async def test_the_cli_refuses_what_the_api_refuses(
    settings: Settings, db: Database, accounts: list[str], tmp_path: Path
) -> None:
    bare = tmp_path / "bare.json"
    bare.write_bytes(orjson.dumps(three_currencies()))

    def ruleengine(*args: str) -> subprocess.CompletedProcess[str]:
        return run(*args, settings=settings)

    offline = ruleengine("rules", "validate", str(bare))  # the currencies are not known there
    assert offline.returncode == 0, offline.stdout + offline.stderr
    for command in (["validate", "--registered"], ["apply"]):
        result = ruleengine("rules", *command, str(bare))
        assert result.returncode == 1, result.stdout + result.stderr
        assert f"{bare}: tasks[0].conditions[1].value: {ASK}" in result.stdout
        assert f"{bare}: tasks[0].action.max_budget: " in result.stdout
    body = three_currencies()
    body["tasks"][0]["conditions"][1]["value"] = {"USD": 20, "EUR": 18, "JPY": 3000}
    body["tasks"][0]["action"]["max_budget"] = {"USD": 500, "EUR": 450, "JPY": 75000}
    per_currency = tmp_path / "per-currency.json"
    per_currency.write_bytes(orjson.dumps(body))
    result = ruleengine("rules", "validate", "--registered", str(per_currency))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{per_currency}: ok (three currencies, 1 task(s))" in result.stdout
