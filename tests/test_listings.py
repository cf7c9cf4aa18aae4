"""A sweep's listings: one per (ad account, level), each rule's filters applied locally.

The equivalence test generates filters over every field and operator the rule language
allows and compares what local filtering picks out of the full listing with what the
sandbox (our model of Meta) lists for the same ``filtering``, over HTTP.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, get_args

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from flow import dispatch, save_rule
from graph_sandbox.admin import SandboxAdmin
from ruleengine import constants as c
from ruleengine.dispatching.listings import ListingKey, SweepListings, plan_listings
from ruleengine.dispatching.payload import EvaluateJob, deserialize
from ruleengine.errors import RuleValidationError
from ruleengine.meta.http import GraphSession
from ruleengine.meta.reader import GraphReader
from ruleengine.rules.entity import Entity
from ruleengine.rules.filtering import EVERY_STATUS
from ruleengine.rules.language.model import (
    EFFECTIVE_STATUSES,
    FILTER_FIELDS,
    FilterOperator,
    Rule,
    parse_rule,
)
from ruleengine.settings import Settings
from ruleengine.store.db import Database
from ruleengine.store.ruledocs import RuleDoc
from support import SANDBOX_TOKEN

T0 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
OPERATORS = list(get_args(FilterOperator))
_NAMES = itertools.count()
_ADVANTAGE = ["campaign{smart_promotion_type,advantage_state_info,is_adset_budget_sharing_enabled}"]
_BASE = ["id", "name", "created_time", "effective_status", "status"]
FIELDS = {
    "campaign": [
        *_BASE,
        "smart_promotion_type",
        "advantage_state_info",
        "is_adset_budget_sharing_enabled",
        "objective",
    ],
    "adset": [*_BASE, "campaign_id", *_ADVANTAGE],
    "ad": [*_BASE, "adset_id", "campaign_id", *_ADVANTAGE],
}


def rule_data(level: str = "campaign", **overrides: Any) -> dict[str, Any]:
    return {
        "name": f"r{next(_NAMES)}",
        "level": level,
        "ad_accounts": ["act_1001", "act_1002"],
        "filters": [],
        "schedule": {"mode": "interval", "every_minutes": 15},
        "tasks": [
            {
                "id": "t",
                "conditions": [{"metric": "spend", "period": "today", "operator": ">", "value": 1}],
                "action": {"type": "pause"},
            }
        ],
    } | overrides


def rule(level: str = "campaign", **overrides: Any) -> Rule:
    return parse_rule(rule_data(level, **overrides))


@pytest.fixture
async def reader(settings: Settings, sandbox: SandboxAdmin) -> AsyncIterator[GraphReader]:
    session = GraphSession(settings)
    try:
        yield GraphReader.from_settings(session)
    finally:
        await session.close()


# ---------------------------------------------------------------- planning (no servers)


def test_one_listing_per_account_and_level_with_every_field_and_status_rules_need() -> None:
    plain = rule(filters=[{"field": "name", "operator": "CONTAIN", "value": "x"}])
    archived = rule(
        filters=[{"field": "effective_status", "operator": "IN", "value": ["ARCHIVED"]}],
        ad_accounts=["act_1001"],
    )
    budget = rule(
        tasks=[
            {
                "id": "t",
                "conditions": [{"metric": "daily_budget", "operator": ">", "value": 1}],
                "action": {"type": "pause"},
            }
        ],
        filters=[{"field": "objective", "operator": "EQUAL", "value": "OUTCOME_SALES"}],
    )
    plans = plan_listings([plain, archived, budget])
    first, second = ListingKey("act_1001", "campaign"), ListingKey("act_1002", "campaign")
    assert set(plans) == {first, second}
    assert plans[first].filtering == EVERY_STATUS
    assert plans[second].filtering == []
    assert {"daily_budget", "objective", "effective_status", "name"} <= plans[first].fields


def test_ad_set_rules_on_campaign_names_add_the_campaign_listing_with_their_statuses() -> None:
    adsets = rule(
        "adset",
        filters=[
            {"field": "campaign.name", "operator": "CONTAIN", "value": "x"},
            {"field": "effective_status", "operator": "IN", "value": ["DELETED"]},
        ],
        ad_accounts=["act_1001"],
    )
    plans = plan_listings([adsets])
    campaigns = plans[ListingKey("act_1001", "campaign")]
    assert campaigns.fields == {"id", "name"}
    assert campaigns.filtering == EVERY_STATUS
    assert "campaign_id" in plans[ListingKey("act_1001", "adset")].fields


def test_ad_rules_on_ad_set_and_campaign_names_add_those_listings_once() -> None:
    ads = rule(
        "ad",
        filters=[
            {"field": "adset.name", "operator": "CONTAIN", "value": "x"},
            {"field": "campaign.name", "operator": "CONTAIN", "value": "y"},
            {"field": "effective_status", "operator": "IN", "value": ["ARCHIVED"]},
        ],
        ad_accounts=["act_1001"],
    )
    by_id = rule("ad", filters=[{"field": "adset.id", "operator": "EQUAL", "value": "7"}])
    adsets = rule("adset", ad_accounts=["act_1001"])
    plans = plan_listings([ads, by_id, adsets])
    assert set(plans) == {
        ListingKey("act_1001", "ad"),
        ListingKey("act_1002", "ad"),
        ListingKey("act_1001", "adset"),
        ListingKey("act_1001", "campaign"),
    }
    parents = plans[ListingKey("act_1001", "adset")]
    assert "name" in parents.fields and parents.filtering == EVERY_STATUS
    assert plans[ListingKey("act_1001", "campaign")].fields == {"id", "name"}
    own = plans[ListingKey("act_1001", "ad")].fields
    assert {"adset_id", "campaign_id"} <= own


# ---------------------------------------------------------------- local = Meta's filtering

_FULL: dict[tuple[str, str], list[dict[str, Any]]] = {}


async def full_listing(reader: GraphReader, account: str, level: str) -> list[dict[str, Any]]:
    """Every object of the level, archived ones too (the world never changes in this test)."""
    if (account, level) not in _FULL:
        _FULL[account, level] = await reader.list_entities(
            account,
            level,
            token=SANDBOX_TOKEN,
            fields=FIELDS[level],
            filtering=EVERY_STATUS,
        )
    return _FULL[account, level]


def values_of(texts: list[str], ids: list[str]) -> st.SearchStrategy[str | float]:
    """Values near the field's own: its texts, fragments of them, in other case, numbers."""
    whole = st.sampled_from(texts)
    fragment = whole.flatmap(
        lambda text: st.tuples(st.integers(0, len(text)), st.integers(0, len(text))).map(
            lambda cut: text[min(cut) : max(cut)]
        )
    )
    numbers = st.one_of(
        st.sampled_from(ids).map(float),
        st.floats(allow_nan=False, allow_infinity=False),
        st.integers(-10, 10).map(float),
    )
    return st.one_of(
        whole,
        whole.map(str.swapcase),
        fragment,
        fragment.map(str.swapcase),
        fragment.map(str.lower),
        st.sampled_from(["1", "5.0", " 7", "", "None", "ACTIVE", "active"]),
        numbers,
        numbers.map(lambda n: str(int(n)) if n.is_integer() and abs(n) < 1e18 else str(n)),
        st.text(max_size=6),
    )


def world_values(
    field: str, level: str, objects: list[dict[str, Any]], parents: dict[str, list[dict[str, Any]]]
) -> list[str]:
    """The values ``field`` has in the world (a campaign's for ``campaign.x`` on ad sets, an ad
    set's for ``adset.x`` on ads)."""
    prefix, _, name = field.rpartition(".")
    source = parents[prefix] if prefix in parents and prefix != level else objects
    return sorted({str(o[name]) for o in source if name in o}) or ["x"]


@st.composite
def a_filter(
    draw: st.DrawFn,
    level: str,
    objects: list[dict[str, Any]],
    parents: dict[str, list[dict[str, Any]]],
) -> dict[str, Any]:
    field = draw(st.sampled_from(sorted(FILTER_FIELDS[level])))
    operator = draw(st.sampled_from(OPERATORS))
    value: st.SearchStrategy[Any] = (
        st.sampled_from(sorted(EFFECTIVE_STATUSES))
        if field == "effective_status"
        else values_of(
            world_values(field, level, objects, parents), [str(o["id"]) for o in objects]
        )
    )
    if operator in ("IN", "NOT_IN"):
        return {"field": field, "operator": operator, "value": draw(st.lists(value, max_size=4))}
    return {"field": field, "operator": operator, "value": draw(value)}


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    account=st.sampled_from(["act_1003", "act_1001"]),
    level=st.sampled_from(["campaign", "adset", "ad"]),
    data=st.data(),
)
async def test_local_filtering_lists_what_the_sandbox_lists_for_the_same_filtering(
    reader: GraphReader, account: str, level: str, data: st.DataObject
) -> None:
    campaigns = await full_listing(reader, account, "campaign")
    adsets = await full_listing(reader, account, "adset")
    objects = await full_listing(reader, account, level)
    parents = {"campaign": campaigns, "adset": adsets}
    filters = data.draw(st.lists(a_filter(level, objects, parents), max_size=3))
    try:
        subject = rule(level, filters=filters, ad_accounts=[account])
    except RuleValidationError:
        assume(False)
        return
    server = await reader.list_entities(
        account, level, token=SANDBOX_TOKEN, fields=["id"], filtering=subject.filtering()
    )
    raw = {
        ListingKey(account, level): objects,
        ListingKey(account, "campaign"): campaigns,
        ListingKey(account, "adset"): adsets,
    }
    local = SweepListings(raw).entities(subject, account)
    assert isinstance(local, list)
    assert [e.id for e in local] == [o["id"] for o in server]


# ---------------------------------------------------------------- the dispatcher


@dataclass
class Stack:
    """The servers a dispatcher test sweeps with, the demo accounts registered."""

    settings: Settings
    db: Database
    redis: Any
    sandbox: SandboxAdmin
    reader: GraphReader

    async def sweep(self, *rules: dict[str, Any]) -> tuple[list[RuleDoc], Any, int]:
        """Save ``rules``, dispatch them once: the rules, the report and the list calls."""
        saved = [await save_rule(self.db, data, now=T0) for data in rules]
        await self.sandbox.clear_stats()
        report = await dispatch(self.settings, self.db, now=T0 + timedelta(seconds=3))
        return saved, report, (await self.sandbox.stats())["calls_by_kind"]["list"]

    async def jobs(self) -> list[EvaluateJob]:
        """The queued jobs."""
        found = []
        for job_id in await self.redis.zrange(c.QUEUE_NAME, 0, -1):
            raw = deserialize(await self.redis.get(b"arq:job:" + job_id))
            found.append(EvaluateJob.model_validate(raw["a"][0]))
        return found

    async def entity_ids(self) -> dict[tuple[str, str], list[str]]:
        """Entity ids of each queued job, by (rule id, account)."""
        return {(j.rule_id, j.account): [e.id for e in j.entities] for j in await self.jobs()}

    async def server_side(self, data: dict[str, Any], account: str) -> list[Entity]:
        """What the rule's own listing with its filters sent to Meta lists (the old way)."""
        return await self.reader.list_for_rule(parse_rule(data), account, token=SANDBOX_TOKEN)


@pytest.fixture
async def stack(
    settings: Settings,
    db: Database,
    redis: Any,
    sandbox: SandboxAdmin,
    accounts: list[str],
    reader: GraphReader,
) -> Stack:
    return Stack(settings, db, redis, sandbox, reader)


def ids(entities: list[Entity]) -> list[str]:
    return [e.id for e in entities]


async def test_two_rules_with_different_filters_share_one_listing_and_get_their_own_entities(
    stack: Stack,
) -> None:
    auto = rule_data(
        ad_accounts=["act_1001"],
        filters=[{"field": "name", "operator": "CONTAIN", "value": "[auto]"}],
    )
    paused = rule_data(
        ad_accounts=["act_1001"],
        filters=[{"field": "effective_status", "operator": "IN", "value": ["PAUSED"]}],
    )
    (first, second), report, list_calls = await stack.sweep(auto, paused)
    assert (report.jobs, report.listings, list_calls) == (2, 1, 1)
    jobs = await stack.entity_ids()
    assert jobs[first.id, "act_1001"] == ids(await stack.server_side(auto, "act_1001"))
    assert jobs[second.id, "act_1001"] == ids(await stack.server_side(paused, "act_1001"))
    assert (len(jobs[first.id, "act_1001"]), len(jobs[second.id, "act_1001"])) == (10, 1)


async def test_archived_objects_reach_only_the_rules_that_ask_for_them(stack: Stack) -> None:
    archived = rule_data(
        ad_accounts=["act_1003"],
        filters=[{"field": "effective_status", "operator": "IN", "value": ["ARCHIVED"]}],
    )
    everything = rule_data(ad_accounts=["act_1003"])
    adsets = rule_data(
        "adset",
        ad_accounts=["act_1003"],
        filters=[{"field": "campaign.name", "operator": "NOT_CONTAIN", "value": "[AUTO]"}],
    )
    saved, report, list_calls = await stack.sweep(archived, everything, adsets)
    # one campaign listing (every status) for both campaign rules and the ad sets' names
    assert (report.jobs, report.listings, list_calls) == (3, 2, 2)
    jobs = await stack.entity_ids()
    for doc, data in zip(saved, (archived, everything, adsets), strict=True):
        assert jobs[doc.id, "act_1003"] == ids(await stack.server_side(data, "act_1003"))
    (clearance,) = jobs[saved[0].id, "act_1003"]
    assert clearance not in jobs[saved[1].id, "act_1003"]
    # Brand Awareness and Seasonal Promo (2 ad sets each), Payment Hold, New Launch, and
    # the late-2026 campaigns (docs/sandbox.md): legacy Advantage+ shopping (1 ad set), spend
    # caps (3), budget sharing (3)
    assert len(jobs[saved[2].id, "act_1003"]) == 13


async def test_every_rule_gets_the_entities_and_fields_its_own_listing_gave_it(
    stack: Stack,
) -> None:
    budget_task = {
        "id": "t",
        "conditions": [
            {"metric": "budget_spent_pct", "operator": ">", "value": 1},
            {"metric": "lifetime_budget", "operator": ">", "value": 1},
        ],
        "action": {"type": "pause"},
    }
    variants = [
        rule_data(filters=[{"field": "name", "operator": "CONTAIN", "value": "[AUTO]"}]),
        rule_data(
            filters=[{"field": "objective", "operator": "NOT_EQUAL", "value": "OUTCOME_LEADS"}],
            tasks=[budget_task],
        ),
        rule_data(
            "adset",
            filters=[{"field": "campaign.objective", "operator": "IN", "value": ["OUTCOME_LEADS"]}],
        ),
        rule_data(
            "adset",
            filters=[{"field": "effective_status", "operator": "NOT_IN", "value": ["ACTIVE"]}],
            tasks=[budget_task],
        ),
    ]
    saved, report, list_calls = await stack.sweep(*variants)
    assert (report.jobs, report.listings, list_calls) == (8, 4, 4)
    by_id = {doc.id: data for doc, data in zip(saved, variants, strict=True)}
    for job in await stack.jobs():
        assert job.entities == await stack.server_side(by_id[job.rule_id], job.account)
