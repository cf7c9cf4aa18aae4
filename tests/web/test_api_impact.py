"""A rule's impact through the API and the command: per task the counts, the effect or "not
enough data yet", the interval (docs/impact.md)."""

from __future__ import annotations

import asyncio
import sys
from datetime import UTC, datetime
from typing import Any

import orjson
from web_helpers import AUTH, Client

from flow import campaign_rule, dispatch, process_env, save_rule, work
from ruleengine.settings import Settings
from ruleengine.store.db import Database

#: Every campaign (about a dozen on act_1001): both groups of a 50 % holdout are never empty
#: but once in thousands of draws (the draw depends on the rule id, new each test).
ALWAYS = {"metric": "current_hour", "operator": ">=", "value": 0}


async def _cli(settings: Settings, *args: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "ruleengine", *args,
        env=process_env(settings),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await process.communicate()
    return process.returncode or 0, out.decode(), err.decode()


def _task(report: dict[str, Any]) -> dict[str, Any]:
    (task,) = report["tasks"]
    return dict(task)


async def test_a_half_held_out_rule_answers_counts_and_not_enough_data_yet(
    client: Client, web_settings: Settings, db: Database
) -> None:
    data = campaign_rule({"type": "pause"}, [ALWAYS], name="Half held", cooldown_minutes=60)
    data["tasks"][0]["holdout"] = {"percent": 50}
    rule = await save_rule(db, data)
    await dispatch(web_settings, db, now=datetime.now(UTC))
    await work(web_settings)

    reply = await client.get(f"/api/rules/{rule.id}/impact?days=7&window=24h", headers=AUTH)
    assert reply.status == 200, await reply.text()
    task = _task(await reply.json())
    counts = task["counts"]
    assert counts["acted"] > 0 and counts["held_out"] > 0
    assert (counts["acted_entities"], counts["held_out_entities"]) == (
        counts["acted"],
        counts["held_out"],
    )
    assert task["holdout_percent"] == 50 and task["measured"] is True
    assert task["enough_data"] is False and task["note"].startswith("not enough data yet")
    (usd,) = task["currencies"]  # act_1001 bills in dollars
    assert usd["currency"] == "USD" and usd["enough_data"] is False
    assert (usd["counts"]["acted_complete"], usd["counts"]["held_out_complete"]) == (0, 0)
    assert usd["counts"]["acted_entities"] == counts["acted_entities"]
    assert usd["effects"] == {} and usd["total_profit_effect"] is None

    code, out, err = await _cli(web_settings, "rules", "impact", rule.id, "--json", "--days", "7")
    assert code == 0, err
    from_cli = _task(orjson.loads(out))
    assert from_cli["counts"] == counts and from_cli["note"].startswith("not enough data yet")
    code, out, _ = await _cli(web_settings, "rules", "impact", rule.id)
    assert code == 0 and "held-out decisions" in out and "not enough data yet" in out
    assert "USD: 0 acted and 0 held-out entities" in out

    ranked = await client.get("/api/benchmark/impact?days=7&window=24h", headers=AUTH)
    assert ranked.status == 200
    (item,) = (await ranked.json())["items"]
    assert (item["rule_id"], item["task_id"], item["enough_data"]) == (rule.id, "t", False)
    assert item["currency"] == "USD" and item["profit"] is None
    assert item["counts"] == usd["counts"]

    bad = await client.get(f"/api/rules/{rule.id}/impact?window=2d", headers=AUTH)
    assert bad.status == 422 and "window" in await bad.text()
    missing = await client.get("/api/rules/nope/impact", headers=AUTH)
    assert missing.status == 404
    assert (await client.get(f"/api/rules/{rule.id}/impact")).status == 401
