"""Meta's Ad Rules in the sandbox, over HTTP: the library, a rule, its history, Meta's errors."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from facebook_business.adobjects.adaccount import AdAccount
from facebook_business.adobjects.adrule import AdRule
from facebook_business.api import FacebookAdsApi
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sandbox_helpers import Sandbox, running_sandbox
from test_sdk import sandbox_api, sdk

FIXTURES = Path(__file__).parents[1] / "fixtures" / "meta_rules"
#: Every fixture, read once: the docs' examples (POST bodies) and the read-back answers.
_LOADED = {path.stem: json.loads(path.read_text()) for path in sorted(FIXTURES.glob("*.json"))}
POST_FIXTURES = [name for name in _LOADED if not name.startswith("readback_")]
READBACK_FIXTURES = [name for name in _LOADED if name.startswith("readback_")]
SPECS = ("evaluation_spec", "execution_spec", "schedule_spec")
RULE_FIELDS = "name,status,evaluation_spec,execution_spec,schedule_spec"


def _fixture(name: str) -> dict[str, Any]:
    body: dict[str, Any] = copy.deepcopy(_LOADED[name])
    return body


def _as_text(value: Any) -> Any:
    """Numbers as Meta reads them back: strings, the shortest decimal form."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return str(int(value)) if float(value).is_integer() else str(value)
    if isinstance(value, list):
        return [_as_text(item) for item in value]
    return {key: _as_text(item) for key, item in value.items()}


def _expected_read_back(body: dict[str, Any]) -> dict[str, Any]:
    """What a POST body reads back as: condition values with numbers as strings."""
    evaluation = copy.deepcopy(body["evaluation_spec"])
    for item in evaluation["filters"]:
        item["value"] = _as_text(item["value"])
    if "value" in evaluation.get("trigger", {}):
        evaluation["trigger"]["value"] = _as_text(evaluation["trigger"]["value"])
    execution = copy.deepcopy(body["execution_spec"])
    for option in execution.get("execution_options", []):
        option["value"] = _as_text(option["value"])
    expected = {"name": body["name"], "status": body.get("status", "ENABLED")}
    expected |= {"evaluation_spec": evaluation, "execution_spec": execution}
    if "schedule_spec" in body:
        expected["schedule_spec"] = body["schedule_spec"]
    return expected


def _without_ids(rule: dict[str, Any]) -> dict[str, Any]:
    """A read-back rule without the ids and times the sandbox gives it."""
    kept = {k: v for k, v in rule.items() if k not in ("id", "created_time", "updated_time")}
    for spec in ("evaluation_spec", "execution_spec"):
        if spec in kept:
            kept[spec] = {k: v for k, v in kept[spec].items() if k != "id"}
    kept.pop("account_id", None)
    return kept


async def _create(box: Sandbox, body: dict[str, Any], account: str = "act_1002") -> str:
    reply = await box.post(f"/{account}/adrules_library", **body)
    assert reply.status == 200, reply.body
    return str(reply.body["id"])


@pytest.mark.parametrize("name", POST_FIXTURES)
async def test_every_docs_fixture_is_created_and_reads_back_in_metas_shape(
    sandbox: Sandbox, name: str
) -> None:
    body = _fixture(name)
    rule_id = await _create(sandbox, body)

    read = await sandbox.get(f"/{rule_id}", fields=RULE_FIELDS)

    assert read.status == 200
    assert _without_ids(read.body) == _expected_read_back(body)
    assert read.body["evaluation_spec"]["id"] != read.body["execution_spec"]["id"]


@pytest.mark.parametrize("name", READBACK_FIXTURES)
async def test_read_back_fixtures_post_again_and_read_back_the_same(
    sandbox: Sandbox, name: str
) -> None:
    answer = _fixture(name)
    for rule in answer.get("data", [answer]):
        body = {k: rule[k] for k in ("name", "status", *SPECS) if k in rule}
        for spec in ("evaluation_spec", "execution_spec"):
            body[spec] = {k: v for k, v in body[spec].items() if k != "id"}
        if body["evaluation_spec"]["evaluation_type"] == "SCHEDULE":
            # A read-back without schedule_spec (not asked for) needs one to post again.
            body.setdefault("schedule_spec", {"schedule_type": "DAILY"})
        rule_id = await _create(sandbox, body)

        read = await sandbox.get(f"/{rule_id}", fields=",".join(k for k in rule if k != "id"))

        assert _without_ids(read.body) == _without_ids(rule)


async def test_the_demo_accounts_hold_metas_rules_and_page_through_them(sandbox: Sandbox) -> None:
    await sandbox.admin.clear_stats()
    seen: list[dict[str, Any]] = []
    reply = await sandbox.get("/act_1001/adrules_library", fields=RULE_FIELDS, limit="3")
    while True:
        seen += reply.body["data"]
        if "next" not in reply.body.get("paging", {}):
            break
        reply = await sandbox.fetch("GET", reply.body["paging"]["next"])

    assert len(seen) == 6 == len({rule["id"] for rule in seen})
    types = {rule["execution_spec"]["execution_type"] for rule in seen}
    assert types == {"PAUSE", "CHANGE_BUDGET", "NOTIFICATION", "CHANGE_CAMPAIGN_BUDGET", "ROTATE"}
    assert {rule["evaluation_spec"]["evaluation_type"] for rule in seen} == {"SCHEDULE", "TRIGGER"}
    assert any(r.get("schedule_spec", {}).get("schedule_type") == "CUSTOM" for r in seen)
    budget = next(r for r in seen if r["execution_spec"]["execution_type"] == "CHANGE_BUDGET")
    options = {o["field"]: o["value"] for o in budget["execution_spec"]["execution_options"]}
    assert options["change_spec"] == {"amount": "20", "unit": "PERCENTAGE", "limit": "50000"}
    assert options["action_frequency"] == "1440"
    # Meta's implicit effective_status filter is applied by Meta when a rule runs, not stored.
    assert all(
        f["field"] != "effective_status" for r in seen for f in r["evaluation_spec"]["filters"]
    )
    japan = await sandbox.get("/act_1004/adrules_library", fields="execution_spec")
    assert {r["execution_spec"]["execution_type"] for r in japan.body["data"]} == {
        "PAUSE",
        "REBALANCE_BUDGET",
    }
    assert (await sandbox.get("/act_1003/adrules_library")).body == {"data": []}
    stats = await sandbox.admin.stats()
    assert stats["calls_by_kind"]["adrules"] == 4  # 2 pages, act_1004, act_1003
    assert (await sandbox.admin.world())["adrules"] == 8


async def test_a_reset_rebuilds_the_demo_rules(sandbox: Sandbox) -> None:
    rule_id = await _create(sandbox, _fixture("rebalance_even"), account="act_1001")
    assert (await sandbox.admin.world())["adrules"] == 9

    await sandbox.admin.reset()

    assert (await sandbox.admin.world())["adrules"] == 8
    gone = await sandbox.get(f"/{rule_id}")
    assert (gone.status, gone.error["code"], gone.error["error_subcode"]) == (400, 100, 33)


async def test_a_rule_reads_like_metas_and_updates_replace_whole_specs(sandbox: Sandbox) -> None:
    body = _fixture("roas_website_budget")
    rule_id = await _create(sandbox, body)
    fields = "id,account_id,name,status,created_time,updated_time,created_by"
    read = await sandbox.get(f"/{rule_id}", fields=fields)
    assert read.body["account_id"] == "1002"
    assert read.body["created_by"] == {"id": "100000000000001", "name": "Sandbox User"}
    assert read.body["created_time"] == "2026-12-01T15:00:00+0000"
    assert (await sandbox.get(f"/{rule_id}")).body == {"id": rule_id}

    await sandbox.admin.advance_clock(60)
    schedule = {"schedule_type": "CUSTOM", "schedule": [{"start_minute": 90, "days": [1]}]}
    update = await sandbox.post(
        f"/{rule_id}", status="DISABLED", name="Renamed", schedule_spec=schedule
    )

    assert update.body == {"success": True}
    after = await sandbox.get(f"/{rule_id}", fields=f"{RULE_FIELDS},updated_time")
    assert (after.body["status"], after.body["name"]) == ("DISABLED", "Renamed")
    assert after.body["schedule_spec"] == schedule
    assert after.body["updated_time"] == "2026-12-01T15:01:00+0000"
    assert (
        _without_ids(after.body)["evaluation_spec"] == _expected_read_back(body)["evaluation_spec"]
    )
    writes = await sandbox.admin.writes()
    assert [(w["kind"], w["ok"]) for w in writes] == [("adrules", True), ("adrules", True)]
    refused = await sandbox.post(f"/{rule_id}", schedule_spec={"schedule_type": "WEEKLY"})
    assert "schedule_spec.schedule_type must be one of" in refused.error["message"]
    assert (await sandbox.get(f"/{rule_id}", fields="schedule_spec")).body[
        "schedule_spec"
    ] == schedule


async def test_history_is_what_was_seeded_newest_first_and_filters_like_metas(
    sandbox: Sandbox,
) -> None:
    rules = await sandbox.get("/act_1001/adrules_library", fields="name")
    rule_id = rules.body["data"][0]["id"]
    assert (await sandbox.get(f"/{rule_id}/history")).body == {"data": []}
    paused = {"action": "PAUSED", "field": "status", "old_value": "ACTIVE", "new_value": "PAUSED"}
    await sandbox.admin.add_rule_run(
        rule_id,
        timestamp="2026-12-01T10:00:00+00:00",
        results=[{"object_id": "111", "object_type": "ADSET", "actions": [paused]}],
    )
    await sandbox.admin.add_rule_run(
        rule_id,
        timestamp="2026-12-01T10:30:00+00:00",
        is_manual=True,
        results=[
            {"object_id": "222", "object_type": "ADSET", "actions": [{"action": "NOT_CHANGED"}]}
        ],
    )

    history = await sandbox.get(f"/{rule_id}/history")

    first, second = history.body["data"]
    assert (first["timestamp"], first["is_manual"]) == ("2026-12-01T10:30:00+0000", True)
    assert second["results"] == [{"object_id": "111", "object_type": "ADSET", "actions": [paused]}]
    assert second["evaluation_spec"]["filters"][2] == {
        "field": "cpa",
        "value": "4000",
        "operator": "GREATER_THAN",
    }
    assert set(second) == {
        "evaluation_spec",
        "execution_spec",
        "is_manual",
        "results",
        "schedule_spec",
        "timestamp",
    }
    only = await sandbox.get(f"/{rule_id}/history", hide_no_changes="true", fields="timestamp")
    assert only.body["data"] == [{"timestamp": "2026-12-01T10:00:00+0000"}]
    by_object = await sandbox.get(f"/{rule_id}/history", object_id="222", fields="is_manual")
    assert by_object.body["data"] == [{"is_manual": True}]
    by_action = await sandbox.get(f"/{rule_id}/history", action="CHANGED_BID")
    assert by_action.body == {"data": []}
    page = await sandbox.get(f"/{rule_id}/history", limit="1", fields="timestamp")
    assert "next" in page.body["paging"]
    account = await sandbox.get("/act_1001/adrules_history", fields="rule_id,timestamp")
    assert [entry["rule_id"] for entry in account.body["data"]] == [rule_id, rule_id]
    bad = await sandbox.get(f"/{rule_id}/history", action="EXPLODED")
    assert bad.error["code"] == 100


_VALID = _fixture("change_spec_budget_tue_fri")


def _broken(path: tuple[str | int, ...], value: Any) -> dict[str, Any]:
    """The valid fixture with the value at ``path`` replaced (``...``: removed)."""
    body = copy.deepcopy(_VALID)
    _replace(body, path, value)
    return body


def _replace(root: Any, path: tuple[Any, ...], value: Any) -> None:
    """Put ``value`` at ``path`` inside ``root`` (``...``: remove what is there)."""
    node = root
    for key in path[:-1]:
        node = node[key]
    if value is ...:
        del node[path[-1]]
    else:
        node[path[-1]] = value


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("evaluation_spec", "evaluation_type"), "SOMETIMES", "evaluation_spec.evaluation_type"),
        (("evaluation_spec", "filters", 0), ..., "must have an entity_type or an id filter"),
        (("evaluation_spec", "filters", 1), ..., "must have a time_preset filter"),
        (("evaluation_spec", "filters", 1, "value"), "LAST_8_DAYS", "filters[1].value"),
        (("evaluation_spec", "filters", 2, "operator"), "MORE", "filters[2].operator"),
        (("evaluation_spec", "filters", 3, "value"), [1, 2, 3], "filters[3].value"),
        (("evaluation_spec", "filters", 3, "value"), "a lot", "filters[3].value must be a number"),
        (("evaluation_spec", "trigger"), {"type": "METADATA_CREATION"}, "only for TRIGGER"),
        (("execution_spec", "execution_type"), "PING_ENDPOINT", "only for TRIGGER rules"),
        (("execution_spec", "execution_type"), "CHANGE_CAMPAIGN_BUDGET", "entity_type CAMPAIGN"),
        (("execution_spec", "execution_options"), [], "must have a change_spec"),
        (
            ("execution_spec", "execution_options", 0, "value", "unit"),
            ...,
            "value.unit is required unless target_field",
        ),
        (
            ("execution_spec", "execution_options", 0, "value", "unit"),
            "DOLLARS",
            "value.unit must be one of {ACCOUNT_CURRENCY, PERCENTAGE}",
        ),
        (("execution_spec", "execution_options", 0, "field"), "rebalance_spec", "does not go"),
        (("schedule_spec",), ..., "schedule_spec is required"),
        (("schedule_spec", "schedule", 0, "start_minute"), 45, "multiple of 30"),
        (("schedule_spec", "schedule", 0, "days"), [2, 7], "days[1] must be a day 0-6"),
        (("schedule_spec", "schedule"), [], "non-empty list for CUSTOM"),
        (("status",), "PAUSED", "Param status must be one of {ENABLED, DISABLED}"),
        (("name",), ..., "The parameter name is required"),
    ],
)
async def test_wrong_shapes_are_metas_error_100_naming_the_field(
    sandbox: Sandbox, path: tuple[str | int, ...], value: Any, message: str
) -> None:
    reply = await sandbox.post("/act_1002/adrules_library", **_broken(path, value))

    assert (reply.status, reply.error["code"], reply.error["type"]) == (400, 100, "OAuthException")
    assert reply.error["message"].startswith("(#100) ")
    assert message in reply.error["message"]
    assert (await sandbox.get("/act_1002/adrules_library")).body == {"data": []}


async def test_a_trigger_rule_takes_no_schedule_and_a_spec_must_be_json(sandbox: Sandbox) -> None:
    body = _fixture("trigger_stats_change") | {"schedule_spec": {"schedule_type": "DAILY"}}
    reply = await sandbox.post("/act_1002/adrules_library", **body)
    assert "schedule_spec is not supported by TRIGGER rules" in reply.error["message"]
    body = _fixture("trigger_stats_change") | {"execution_spec": "{not json"}
    reply = await sandbox.post("/act_1002/adrules_library", **body)
    assert reply.error["message"] == "(#100) Param execution_spec must be a JSON object"


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**40), 2**40)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8)
    | st.sampled_from(["EQUAL", "IN_RANGE", "SCHEDULE", "CUSTOM", "ADSET", "LIFETIME", "1e999"]),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path into a JSON value (the empty path excluded)."""
    found: list[tuple[Any, ...]] = []
    items = (
        node.items()
        if isinstance(node, dict)
        else enumerate(node)
        if isinstance(node, list)
        else []
    )
    for key, child in items:
        found.append((*prefix, key))
        found += _paths(child, (*prefix, key))
    return found


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data(), fixture=st.sampled_from(POST_FIXTURES))
async def test_any_malformed_spec_is_a_rule_or_metas_error_never_a_500(
    sandbox: Sandbox, data: st.DataObject, fixture: str
) -> None:
    body = _fixture(fixture)
    spec = data.draw(st.sampled_from([s for s in SPECS if s in body]))
    path = data.draw(st.sampled_from(_paths(body[spec]) or [()]))
    if path:
        _replace(body[spec], path, data.draw(st.just(...) | _JSON))

    reply = await sandbox.post("/act_1002/adrules_library", **body)

    if reply.status == 200:
        read = await sandbox.get(f"/{reply.body['id']}", fields=RULE_FIELDS)
        assert read.status == 200
    else:
        assert (reply.status, reply.error["code"]) == (400, 100), reply.body
        assert reply.error["message"].startswith("(#100) ")


async def test_a_token_without_ads_management_reads_rules_but_cannot_create_them() -> None:
    async with running_sandbox(seed=1) as box:
        reader = (await box.admin.issue_token(permissions=["ads_read"]))["token"]
        body = _fixture("rebalance_even")
        refused = await box.post("/act_1001/adrules_library", token=reader, **body)
        assert (refused.status, refused.error["code"]) == (403, 294)
        listed = await box.get("/act_1001/adrules_library", token=reader, fields="name")
        rule_id = listed.body["data"][0]["id"]
        assert (await box.get(f"/{rule_id}", token=reader)).status == 200
        update = await box.post(f"/{rule_id}", token=reader, status="DISABLED")
        assert update.error["code"] == 294
        none = (await box.admin.issue_token(permissions=[]))["token"]
        assert (await box.get("/act_1001/adrules_library", token=none)).error["code"] == 200
        other = (await box.admin.issue_token(accounts=["act_1002"]))["token"]
        hidden = await box.get(f"/{rule_id}", token=other)
        assert (hidden.error["code"], hidden.error["error_subcode"]) == (100, 33)
        assert (await box.get("/act_1001/adrules_library", token=other)).error["code"] == 200
        writes = await box.admin.writes()
        assert [(w["kind"], w["ok"]) for w in writes] == [("adrules", False)] * 2


async def test_metas_sdk_lists_creates_reads_and_reads_history(sandbox: Sandbox) -> None:
    FacebookAdsApi.set_default_api(sandbox_api(sandbox.url))
    try:
        fields = [AdRule.Field.name, AdRule.Field.evaluation_spec, AdRule.Field.execution_spec]
        rules = await sdk(lambda: list(AdAccount("act_1001").get_ad_rules_library(fields=fields)))
        assert len(rules) == 6 and all(isinstance(rule, AdRule) for rule in rules)
        body = _fixture("change_spec_bid_target_cpi")
        created = await sdk(lambda: AdAccount("act_1002").create_ad_rules_library(params=body))
        rule = await sdk(
            lambda: AdRule(created[AdRule.Field.id]).api_get(
                fields=[*fields, AdRule.Field.schedule_spec, AdRule.Field.status]
            )
        )
        assert rule[AdRule.Field.name] == "Test Change Bid Rule"
        assert rule[AdRule.Field.status] == AdRule.Status.enabled
        options = rule[AdRule.Field.execution_spec]["execution_options"]
        assert options[0]["value"]["limit"] == ["2", "10"]
        await sandbox.admin.add_rule_run(rule[AdRule.Field.id], results=[])
        history = await sdk(lambda: list(AdRule(created[AdRule.Field.id]).get_history()))
        assert len(history) == 1 and history[0]["is_manual"] is False
    finally:
        FacebookAdsApi.set_default_api(None)


def _rule(entity: str, execution: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """A schedule rule on ``entity`` (AD, ADSET, CAMPAIGN) spending over 50.00 in 7 days."""
    return {
        "name": f"{entity} rule",
        "evaluation_spec": {
            "evaluation_type": "SCHEDULE",
            "filters": [
                {"field": "entity_type", "value": entity, "operator": "EQUAL"},
                {"field": "time_preset", "value": "LAST_7D", "operator": "EQUAL"},
                {"field": "spent", "value": 5000, "operator": "GREATER_THAN"},
            ],
        },
        "execution_spec": execution,
        "schedule_spec": {"schedule_type": "DAILY"},
    } | extra


def _rebalance(**spec: Any) -> dict[str, Any]:
    option = {"field": "rebalance_spec", "value": spec, "operator": "EQUAL"}
    return {"execution_type": "REBALANCE_BUDGET", "execution_options": [option]}


@pytest.mark.parametrize(
    ("entity", "execution"),
    [
        ("AD", {"execution_type": "PAUSE"}),
        ("AD", {"execution_type": "UNPAUSE"}),
        ("AD", {"execution_type": "NOTIFICATION"}),
        ("ADSET", _rebalance(type="EVEN")),
        (
            "ADSET",
            _rebalance(
                type="NO_PAUSE_PROPORTIONAL",
                target_field="cost_per_purchase_fb",
                target_count=2,
                is_cross_campaign=True,
                is_inverse=True,
            ),
        ),
    ],
)
async def test_rules_on_ads_and_rebalancing_rules_are_stored(
    sandbox: Sandbox, entity: str, execution: dict[str, Any]
) -> None:
    rule_id = await _create(sandbox, _rule(entity, execution))
    read = await sandbox.get(f"/{rule_id}", fields="evaluation_spec,execution_spec")
    filters = read.body["evaluation_spec"]["filters"]
    assert filters[0] == {"field": "entity_type", "value": entity, "operator": "EQUAL"}
    for option in read.body["execution_spec"].get("execution_options", []):
        spec = option["value"]
        assert spec.get("target_count") in (None, "2")  # numbers read back as strings


@pytest.mark.parametrize(
    ("entity", "execution", "message"),
    [
        ("AD", _rebalance(type="EVEN"), "REBALANCE_BUDGET applies to entity_type ADSET, not AD"),
        (
            "CAMPAIGN",
            _rebalance(type="EVEN"),
            "REBALANCE_BUDGET applies to entity_type ADSET, not CAMPAIGN",
        ),
        (
            "AD",
            {
                "execution_type": "CHANGE_BUDGET",
                "execution_options": [
                    {
                        "field": "change_spec",
                        "value": {"amount": 10, "unit": "PERCENTAGE"},
                        "operator": "EQUAL",
                    }
                ],
            },
            "CHANGE_BUDGET applies to entity_type ADSET, not AD",
        ),
        ("ADSET", {"execution_type": "REBALANCE_BUDGET"}, "must have a rebalance_spec"),
        ("ADSET", _rebalance(type="PROPORTIONAL"), "target_field is required"),
        (
            "ADSET",
            _rebalance(type="EVEN", target_field="cpa", target_count=0),
            "target_count must be an integer",
        ),
        ("ADSET", _rebalance(type="EVEN", is_inverse="yes"), "is_inverse must be true or false"),
        ("ADSET", _rebalance(type="FAIR"), "type must be one of {EVEN, PROPORTIONAL"),
        ("ADSET", _rebalance(type="EVEN", amount=5), "amount is not a rebalance_spec field"),
        (
            "ADSET",
            {
                "execution_type": "REBALANCE_BUDGET",
                "execution_options": [
                    _rebalance(type="EVEN")["execution_options"][0],
                    {
                        "field": "change_spec",
                        "value": {"amount": 5, "unit": "PERCENTAGE"},
                        "operator": "EQUAL",
                    },
                ],
            },
            "change_spec does not go with REBALANCE_BUDGET",
        ),
    ],
)
async def test_rules_on_ads_and_rebalancing_rules_are_refused_like_metas(
    sandbox: Sandbox, entity: str, execution: dict[str, Any], message: str
) -> None:
    reply = await sandbox.post("/act_1002/adrules_library", **_rule(entity, execution))
    assert (reply.status, reply.error["code"]) == (400, 100)
    assert message in reply.error["message"], reply.error["message"]
