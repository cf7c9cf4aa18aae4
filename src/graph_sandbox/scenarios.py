"""The scenarios the sandbox can load: ``demo`` (a small, varied world) and ``bench`` (a big one).

The structure of each scenario is fixed; the seed picks the numbers (budgets,
performance, creation times) and the ids. Creation times are anchored to a
fixed date, not to the clock, so the same seed gives the same world whenever
and wherever it is built.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from graph_sandbox.adrule_specs import validate_rule
from graph_sandbox.delivery import Archetype, Profile
from graph_sandbox.results import default_goal
from graph_sandbox.world import (
    ACTIVE,
    ARCHIVED,
    IN_PROCESS,
    PAUSED,
    WITH_ISSUES,
    Account,
    AdObject,
    World,
)

SCENARIOS = ("demo", "bench")

#: Every object of a fresh world was created within ~6 weeks after this instant.
EPOCH = datetime(2026, 9, 1, tzinfo=UTC)

_TIMEZONES = ("America/New_York", "Europe/Berlin", "Asia/Jakarta")
_AUDIENCES = (
    "Lookalike 1%",
    "Broad 18-65",
    "Interests - Fitness",
    "Website Visitors 30d",
    "Advantage+ Audience",
)


@dataclass(frozen=True)
class WorldConfig:
    """What to build: a scenario, a seed, and optional sizes.

    ``None`` sizes take the scenario's defaults (demo: 3 accounts × 12
    campaigns × 2–3 ad sets, and a yen account with 4 campaigns; bench: 3 × 500 × 1).
    ``timezones``: ``(account id, IANA name)`` pairs that replace those accounts' time
    zones (a half-hour zone such as ``Asia/Kolkata``, say); the rest of the world is the
    same as without them.
    """

    seed: int = 1
    scenario: str = "demo"
    accounts: int | None = None
    campaigns_per_account: int | None = None
    adsets_per_campaign: int | None = None
    timezones: tuple[tuple[str, str], ...] = ()
    #: ``new``: an app created since 2026-11-04, refused Graph's legacy features
    #: (:mod:`graph_sandbox.legacy`); ``legacy``: an older app, which may still use them.
    app: str = "new"


@dataclass(frozen=True)
class _CampaignSpec:
    name: str
    archetype: Archetype
    budget: str  # "daily" or "lifetime" (campaign budget, CBO) or "adset"
    budget_cents: int  # the campaign's budget, or each ad set's
    adsets: int = 2
    objective: str = "OUTCOME_SALES"
    status: str = ACTIVE
    paused_adset: bool = False
    held_as: str | None = None  # WITH_ISSUES, IN_PROCESS: the campaign and its ad sets
    # the ad sets' bidding: a strategy with a cap carries a bid (minor units); no random draw,
    # so the rest of the world is the same with or without it
    bid_strategy: str = "LOWEST_COST_WITHOUT_CAP"
    bid_cents: int | None = None
    # the first ad set's last significant edit: this many local days before "now", wherever
    # the clock stands, so the demo always has ad sets in their learning phase
    edited_days_ago: int | None = None
    smart_promotion_type: str | None = None
    advantage_state: str | None = None
    budget_sharing: bool | None = None
    # the ad sets' spend limits, by position: ({"daily_spend_cap": 8000}, …)
    spend_limits: tuple[dict[str, int], ...] = ()


_W, _M, _L = Archetype.WINNER, Archetype.MIDDLING, Archetype.LOSER
_NONE = Archetype.NO_DELIVERY

# One demo account's campaigns; ``{cc}`` is the account's country code.
_DEMO_CAMPAIGNS = (
    _CampaignSpec("[AUTO] Prospecting {cc} 1", _W, "daily", 20000, adsets=3),
    _CampaignSpec("[AUTO] Prospecting {cc} 2", _L, "daily", 30000, adsets=3),
    _CampaignSpec(
        "[AUTO] Prospecting {cc} 3",
        _M,
        "adset",
        7000,
        adsets=3,
        paused_adset=True,
        edited_days_ago=1,
    ),
    _CampaignSpec("[AUTO] Retargeting {cc} 1", _W, "daily", 12000),
    _CampaignSpec(
        "[AUTO] Retargeting {cc} 2",
        _L,
        "adset",
        10000,
        bid_strategy="LOWEST_COST_WITH_BID_CAP",
        bid_cents=450,
    ),
    _CampaignSpec("[AUTO] Broad {cc} 1", _M, "lifetime", 600000),
    _CampaignSpec("[AUTO] Creative Test {cc} 1", Archetype.NO_PURCHASE, "adset", 5000, adsets=3),
    _CampaignSpec(
        "[AUTO] Lead Gen {cc} 1", Archetype.LEADGEN, "daily", 8000, objective="OUTCOME_LEADS"
    ),
    _CampaignSpec(
        "[AUTO] Lead Gen {cc} 2",
        Archetype.LEADGEN,
        "adset",
        4000,
        objective="OUTCOME_LEADS",
        bid_strategy="COST_CAP",
        bid_cents=1200,
    ),
    _CampaignSpec("[AUTO] Catalog Sales {cc} 1", _W, "daily", 15000, status=PAUSED),
    _CampaignSpec(
        "Brand Awareness {cc}", Archetype.AWARENESS, "daily", 5000, objective="OUTCOME_AWARENESS"
    ),
    _CampaignSpec("Seasonal Promo {cc}", Archetype.NO_DELIVERY, "adset", 6000),
)

# Campaigns in the other statuses Meta reports, added to the third demo account after
# everything else (their own random stream, so no other object changes). None delivers;
# their names carry no [AUTO] tag, so rules filtered on it never see them.
_DEMO_STATUS_CAMPAIGNS = (
    _CampaignSpec("Clearance {cc}", _NONE, "daily", 4000, adsets=1, status=ARCHIVED),
    _CampaignSpec("Payment Hold {cc}", _NONE, "adset", 3000, adsets=1, held_as=WITH_ISSUES),
    _CampaignSpec("New Launch {cc}", _NONE, "daily", 9000, adsets=1, held_as=IN_PROCESS),
)
_STATUS_CAMPAIGNS_ACCOUNT = 2  # index into _DEMO_ACCOUNTS: act_1003

# The Meta of late 2026, added to the same account after everything else (ads included), so
# no other object's id or numbers change; no [AUTO] tag. A legacy Advantage+ shopping
# campaign: the API may change its status only (Meta's v25.0 changelog).
_DEMO_2027_CAMPAIGNS = (
    _CampaignSpec(
        "Advantage+ Shopping {cc} (legacy)",
        _L,
        "daily",
        25000,
        adsets=1,
        smart_promotion_type="AUTOMATED_SHOPPING_ADS",
        advantage_state="advantage_plus_sales",
    ),
    # An Advantage campaign budget whose ad sets are steered by spend limits.
    _CampaignSpec(
        "Advantage Budget {cc} (spend caps)",
        _W,
        "daily",
        30000,
        adsets=3,
        spend_limits=({"daily_spend_cap": 8000}, {"daily_min_spend_target": 5000}),
    ),
    # Ad set budgets shared with the campaign's other ad sets (up to 20 %, since v24.0).
    _CampaignSpec("Budget Sharing {cc}", _M, "adset", 6000, adsets=3, budget_sharing=True),
)

_DEMO_ACCOUNTS = (
    ("1001", "Demo Store US", "USD", "America/New_York", "US"),
    ("1002", "Demo Store DE", "EUR", "Europe/Berlin", "DE"),
    ("1003", "Demo Store ID", "USD", "Asia/Jakarta", "ID"),
)

#: The fourth demo account bills in yen, a zero-decimal currency: its budgets and
#: Insights money are whole yen (``"30000"`` is ¥30,000), so a client that divides by
#: 100 is off by 100 times.
_JPY_ACCOUNT = ("1004", "Demo Store JP", "JPY", "Asia/Tokyo", "JP")
_JPY_CAMPAIGNS = (
    _CampaignSpec("[AUTO] Prospecting {cc} 1", _W, "daily", 30000),
    _CampaignSpec(
        "[AUTO] Retargeting {cc} 1",
        _L,
        "adset",
        5000,
        bid_strategy="LOWEST_COST_WITH_BID_CAP",
        bid_cents=600,  # ¥600: whole yen
    ),
    _CampaignSpec("[AUTO] Creative Test {cc} 1", Archetype.NO_PURCHASE, "adset", 3000),
    _CampaignSpec(
        "Brand Awareness {cc}", Archetype.AWARENESS, "daily", 8000, objective="OUTCOME_AWARENESS"
    ),
)

_BENCH_MIX = (_W, _M, _L, Archetype.NO_PURCHASE, _M)


def build_world(config: WorldConfig) -> World:
    """Build the world ``config`` describes.

    Raises:
        ValueError: Unknown scenario, a size below 1, or an unknown time zone.
    """
    if config.scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {config.scenario!r}; choose one of {SCENARIOS}")
    for size in (config.accounts, config.campaigns_per_account, config.adsets_per_campaign):
        if size is not None and size < 1:
            raise ValueError("accounts, campaigns_per_account and adsets_per_campaign must be >= 1")
    zones = dict(config.timezones)
    for name in zones.values():
        try:
            ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(f"unknown time zone {name!r}: use an IANA name") from exc
    world = World(seed=config.seed, scenario=config.scenario)
    rng = random.Random(f"{config.seed}:{config.scenario}")
    if config.scenario == "demo":
        _build_demo(world, rng, config, zones)
    else:
        _build_bench(world, rng, config, zones)
    _add_ads(world)
    if config.scenario == "demo":
        _add_demo_rules(world)
        _add_2027_campaigns(world, config)
    return world


def _build_demo(
    world: World, rng: random.Random, config: WorldConfig, zones: dict[str, str]
) -> None:
    # act_1001–act_1003, then the yen account act_1004, then copies of the first three.
    for index in range(config.accounts or len(_DEMO_ACCOUNTS) + 1):
        number, name, currency, tz, cc = _DEMO_ACCOUNTS[index % len(_DEMO_ACCOUNTS)]
        campaigns: tuple[_CampaignSpec, ...] = _DEMO_CAMPAIGNS
        if index == len(_DEMO_ACCOUNTS):
            (number, name, currency, tz, cc), campaigns = _JPY_ACCOUNT, _JPY_CAMPAIGNS
        elif index > len(_DEMO_ACCOUNTS):
            number, name = str(1001 + index), f"Demo Store {index + 1}"
        world.add_account(Account(number, name, currency, zones.get(f"act_{number}", tz)))
        for position in range(config.campaigns_per_account or len(campaigns)):
            spec = campaigns[position % len(campaigns)]
            if position >= len(campaigns):
                spec = _renumbered(spec, position // len(campaigns))
            _add_campaign(world, rng, number, spec, cc, config.adsets_per_campaign)
    if (config.accounts or len(_DEMO_ACCOUNTS)) > _STATUS_CAMPAIGNS_ACCOUNT:
        number, _, _, _, cc = _DEMO_ACCOUNTS[_STATUS_CAMPAIGNS_ACCOUNT]
        extra = random.Random(f"{config.seed}:demo:statuses")
        for spec in _DEMO_STATUS_CAMPAIGNS:
            _add_campaign(world, extra, number, spec, cc, None)


def _add_2027_campaigns(world: World, config: WorldConfig) -> None:
    """The demo's campaigns of Meta's late 2026 (:data:`_DEMO_2027_CAMPAIGNS`), ads and all."""
    if (config.accounts or len(_DEMO_ACCOUNTS)) <= _STATUS_CAMPAIGNS_ACCOUNT:
        return
    number, _, _, _, cc = _DEMO_ACCOUNTS[_STATUS_CAMPAIGNS_ACCOUNT]
    extra = random.Random(f"{config.seed}:demo:2027")
    for spec in _DEMO_2027_CAMPAIGNS:
        campaign = _add_campaign(world, extra, number, spec, cc, None)
        for position, adset in enumerate(world.adsets_of(campaign.id)):
            _add_ads_of(world, adset, position)


def _build_bench(
    world: World, rng: random.Random, config: WorldConfig, zones: dict[str, str]
) -> None:
    for index in range(config.accounts or 3):
        number = str(2001 + index)
        tz = zones.get(f"act_{number}", _TIMEZONES[index % len(_TIMEZONES)])
        world.add_account(Account(number, f"Bench Account {index + 1}", "USD", tz))
        for position in range(config.campaigns_per_account or 500):
            capped = position % len(_BENCH_MIX) == len(_BENCH_MIX) - 1  # every fifth: a bid cap
            spec = _CampaignSpec(
                f"[AUTO] Bench {index + 1} Campaign {position + 1:04d}",
                _BENCH_MIX[position % len(_BENCH_MIX)],
                "daily",
                rng.randrange(5000, 30001, 500),
                adsets=config.adsets_per_campaign or 1,
                bid_strategy="LOWEST_COST_WITH_BID_CAP" if capped else "LOWEST_COST_WITHOUT_CAP",
                bid_cents=500 if capped else None,
            )
            _add_campaign(world, rng, number, spec, "", None)


def _renumbered(spec: _CampaignSpec, round_: int) -> _CampaignSpec:
    """A later copy of a demo template, so names stay unique when a demo account is enlarged."""
    return _CampaignSpec(
        f"{spec.name} r{round_ + 1}",
        spec.archetype,
        spec.budget,
        spec.budget_cents,
        spec.adsets,
        spec.objective,
        spec.status,
        spec.paused_adset,
        bid_strategy=spec.bid_strategy,
        bid_cents=spec.bid_cents,
    )


def _add_campaign(
    world: World,
    rng: random.Random,
    account_number: str,
    spec: _CampaignSpec,
    cc: str,
    adsets_override: int | None,
) -> AdObject:
    created = EPOCH + timedelta(days=rng.randrange(0, 40), minutes=rng.randrange(0, 24 * 60))
    name = spec.name.format(cc=cc)
    campaign = AdObject(
        id=world.next_id("campaign"),
        kind="campaign",
        account_id=account_number,
        name=name,
        status=spec.status,
        objective=spec.objective,
        created_time=created,
        updated_time=created + timedelta(hours=rng.randrange(1, 72)),
        daily_budget=spec.budget_cents if spec.budget == "daily" else None,
        lifetime_budget=spec.budget_cents if spec.budget == "lifetime" else None,
        held_as=spec.held_as,
        smart_promotion_type=spec.smart_promotion_type,
        advantage_state=spec.advantage_state,
        budget_sharing=spec.budget_sharing,
    )
    world.add(campaign)
    _add_adsets(world, rng, campaign, spec, adsets_override or spec.adsets)
    for adset, limits in zip(world.adsets_of(campaign.id), spec.spend_limits, strict=False):
        for field, value in limits.items():
            setattr(adset, field, value)
    return campaign


def _add_adsets(
    world: World, rng: random.Random, campaign: AdObject, spec: _CampaignSpec, count: int
) -> None:
    # A campaign budget is shared unevenly between its ad sets, as CBO does.
    weights = [rng.uniform(0.6, 1.4) for _ in range(count)]
    for position, weight in enumerate(weights):
        if spec.budget == "adset":
            spend = spec.budget_cents
        else:
            daily = spec.budget_cents if spec.budget == "daily" else spec.budget_cents // 30
            spend = round(daily * weight / sum(weights))
        paused = spec.paused_adset and position == count - 1
        audience = _AUDIENCES[position % len(_AUDIENCES)]
        adset = AdObject(
            id=world.next_id("adset"),
            kind="adset",
            account_id=campaign.account_id,
            name=f"{campaign.name.removeprefix('[AUTO] ')} - {audience}",
            status=PAUSED if paused else ACTIVE,
            objective=spec.objective,
            created_time=campaign.created_time + timedelta(minutes=5 + position),
            updated_time=campaign.updated_time,
            campaign_id=campaign.id,
            daily_budget=spec.budget_cents if spec.budget == "adset" else None,
            profile=make_profile(rng, spec.archetype, spend),
            held_as=spec.held_as,
            bid_strategy=spec.bid_strategy,
            bid_amount=spec.bid_cents,
            optimization_goal=default_goal(spec.objective),
        )
        world.add(adset)
        if position == 0 and spec.edited_days_ago is not None:
            world.edited_days_ago[adset.id] = spec.edited_days_ago


def _add_ads(world: World) -> None:
    """Ads under every ad set, made after everything else so campaigns and ad sets stay as they
    were (same ids, same numbers); ads need no randomness."""
    for account in list(world.accounts):
        for adset in list(world.adsets(account)):
            _add_ads_of(world, adset, world.adsets_of(adset.campaign_id or "").index(adset))


def _add_ads_of(world: World, adset: AdObject, position: int) -> None:
    for number in range(1, _ads_per_adset(adset, position) + 1):
        world.add(
            AdObject(
                id=world.next_id("ad"),
                kind="ad",
                account_id=adset.account_id,
                name=f"{adset.name} - Ad {number}",
                status=ACTIVE,
                objective=adset.objective,
                created_time=adset.created_time + timedelta(minutes=10 + number),
                updated_time=adset.updated_time,
                campaign_id=adset.campaign_id,
                adset_id=adset.id,
            )
        )


def _ads_per_adset(adset: AdObject, position: int) -> int:
    """Three ads in a creative test's ad sets, else one or two (alternating within a campaign)."""
    if adset.profile is not None and adset.profile.archetype is Archetype.NO_PURCHASE:
        return 3
    return 1 + position % 2


def make_profile(rng: random.Random, archetype: Archetype, budget_cents: int) -> Profile:
    """A typical day for an ad set of ``archetype`` spending about ``budget_cents`` a day."""
    base = Profile(
        archetype,
        spend_cents=round(budget_cents * rng.uniform(0.85, 1.0)),
        cpm_cents=rng.randrange(900, 1500),
        ctr=rng.uniform(0.012, 0.022),
        link_share=rng.uniform(0.65, 0.85),
        aov_cents=rng.randrange(3000, 6000, 100),
        frequency=rng.uniform(1.2, 1.7),
    )
    if archetype is Archetype.NO_DELIVERY:
        return replace(base, spend_cents=0)
    if archetype is Archetype.AWARENESS:
        return replace(
            base,
            cpm_cents=rng.randrange(400, 700),
            ctr=rng.uniform(0.003, 0.006),
            frequency=rng.uniform(1.8, 2.4),
        )
    if archetype is Archetype.LEADGEN:
        return replace(base, lead_rate=rng.uniform(0.08, 0.15))
    if archetype is Archetype.NO_PURCHASE:
        return replace(base, cart_rate=rng.uniform(0.03, 0.06))
    low, high = {_W: (3.8, 5.0), _M: (1.6, 2.6), _L: (0.5, 0.95)}[archetype]
    return replace(base, roas=rng.uniform(low, high), cart_rate=rng.uniform(0.06, 0.1))


def _filter(field: str, operator: str, value: object) -> dict[str, object]:
    return {"field": field, "value": value, "operator": operator}


def _preset(value: str) -> dict[str, object]:
    return _filter("time_preset", "EQUAL", value)


def _option(field: str, value: object) -> dict[str, object]:
    return {"field": field, "value": value, "operator": "EQUAL"}


def _demo_rules(world: World) -> list[tuple[str, str, str, dict[str, object]]]:
    """Meta rules of the demo accounts, in the POST body form: (account, name, status, specs).

    Money is in the account currency's minor units as Meta's rules take it (cents for
    act_1001, whole yen for act_1004). Ids point at objects of this world.
    """
    us_test = next(a for a in world.adsets("act_1001") if "Creative Test" in a.name)
    jp_retargeting = next(c for c in world.campaigns("act_1004") if "Retargeting" in c.name)
    adset = _filter("entity_type", "EQUAL", "ADSET")
    ad = _filter("entity_type", "EQUAL", "AD")
    campaign = _filter("entity_type", "EQUAL", "CAMPAIGN")
    return [
        (
            "1001",
            "Pause ad sets with CPA over $40 (7 days)",
            "ENABLED",
            {
                "evaluation_spec": {
                    "evaluation_type": "SCHEDULE",
                    "filters": [
                        adset,
                        _preset("LAST_7_DAYS"),
                        _filter("cpa", "GREATER_THAN", 4000),
                        _filter("spent", "GREATER_THAN", 5000),
                    ],
                },
                "execution_spec": {"execution_type": "PAUSE"},
                "schedule_spec": {"schedule_type": "SEMI_HOURLY"},
            },
        ),
        (
            "1001",
            "Scale winners +20% (ROAS over 3)",
            "ENABLED",
            {
                "evaluation_spec": {
                    "evaluation_type": "SCHEDULE",
                    "filters": [
                        adset,
                        _preset("LAST_7D"),
                        _filter("website_purchase_roas", "GREATER_THAN", 3),
                        _filter("hours_since_creation", "GREATER_THAN", 72),
                    ],
                },
                "execution_spec": {
                    "execution_type": "CHANGE_BUDGET",
                    "execution_options": [
                        _option(
                            "change_spec", {"amount": 20, "unit": "PERCENTAGE", "limit": 50000}
                        ),
                        _option("action_frequency", 1440),
                        _option("execution_count_limit", 5),
                    ],
                },
                "schedule_spec": {"schedule_type": "DAILY"},
            },
        ),
        (
            "1001",
            "Tell me when a campaign spends over $250 today",
            "ENABLED",
            {
                "evaluation_spec": {
                    "evaluation_type": "SCHEDULE",
                    "filters": [
                        campaign,
                        _preset("TODAY"),
                        _filter("spent", "GREATER_THAN", 25000),
                    ],
                },
                "execution_spec": {
                    "execution_type": "NOTIFICATION",
                    "execution_options": [_option("user_ids", [100000000000001])],
                },
                "schedule_spec": {"schedule_type": "HOURLY"},
            },
        ),
        (
            "1001",
            "Weekday mornings: cut campaigns with CPC over $1.50 by $10",
            "DISABLED",
            {
                "evaluation_spec": {
                    "evaluation_type": "SCHEDULE",
                    "filters": [
                        campaign,
                        _filter("campaign.name", "CONTAIN", "[AUTO]"),
                        _preset("LAST_3_DAYS"),
                        _filter("cpc", "GREATER_THAN", 150),
                    ],
                },
                "execution_spec": {
                    "execution_type": "CHANGE_CAMPAIGN_BUDGET",
                    "execution_options": [
                        _option(
                            "change_spec",
                            {"amount": -1000, "unit": "ACCOUNT_CURRENCY", "limit": 5000},
                        )
                    ],
                },
                "schedule_spec": {
                    "schedule_type": "CUSTOM",
                    "schedule": [{"start_minute": 480, "end_minute": 600, "days": [1, 2, 3, 4, 5]}],
                },
            },
        ),
        (
            "1001",
            "Pause ads over $10 per purchase once they reach 5,000 people",
            "ENABLED",
            {
                "evaluation_spec": {
                    "evaluation_type": "TRIGGER",
                    "trigger": {
                        "type": "STATS_CHANGE",
                        "field": "cost_per_purchase_fb",
                        "value": 1000,
                        "operator": "GREATER_THAN",
                    },
                    "filters": [ad, _preset("LAST_3_DAYS"), _filter("reach", "GREATER_THAN", 5000)],
                },
                "execution_spec": {"execution_type": "PAUSE"},
            },
        ),
        (
            "1001",
            "Rotate the creative test's ads daily",
            "ENABLED",
            {
                "evaluation_spec": {
                    "evaluation_type": "SCHEDULE",
                    "filters": [
                        ad,
                        _filter("adset.id", "IN", [int(us_test.id)]),
                        _preset("LAST_7_DAYS"),
                        _filter("impressions", "GREATER_THAN", 5000),
                    ],
                },
                "execution_spec": {"execution_type": "ROTATE"},
                "schedule_spec": {"schedule_type": "DAILY"},
            },
        ),
        (
            "1004",
            "Pause ad sets spending ¥5,000 without a purchase",
            "ENABLED",
            {
                "evaluation_spec": {
                    "evaluation_type": "SCHEDULE",
                    "filters": [
                        adset,
                        _preset("LAST_3_DAYS"),
                        _filter("spent", "GREATER_THAN", 5000),
                        _filter("offsite_conversion.fb_pixel_purchase", "LESS_THAN", 1),
                    ],
                },
                "execution_spec": {"execution_type": "PAUSE"},
                "schedule_spec": {"schedule_type": "SEMI_HOURLY"},
            },
        ),
        (
            "1004",
            "Rebalance retargeting budgets towards the cheapest CPA",
            "ENABLED",
            {
                "evaluation_spec": {
                    "evaluation_type": "SCHEDULE",
                    "filters": [
                        adset,
                        _filter("campaign.id", "IN", [int(jp_retargeting.id)]),
                        _preset("LAST_7D"),
                        _filter("cpa", "GREATER_THAN", 3000),
                    ],
                },
                "execution_spec": {
                    "execution_type": "REBALANCE_BUDGET",
                    "execution_options": [
                        _option(
                            "rebalance_spec",
                            {"type": "PROPORTIONAL", "target_field": "cpa", "is_inverse": True},
                        )
                    ],
                },
                "schedule_spec": {"schedule_type": "DAILY"},
            },
        ),
    ]


def _add_demo_rules(world: World) -> None:
    """Meta rules on act_1001 and act_1004, made a day apart after the accounts' campaigns."""
    for position, (number, name, status, specs) in enumerate(_demo_rules(world)):
        if world.account(f"act_{number}") is None:
            continue
        evaluation, execution = specs["evaluation_spec"], specs["execution_spec"]
        schedule = specs.get("schedule_spec")
        validate_rule(evaluation, execution, schedule)
        world.adrules.create(
            number,
            name=name,
            status=status,
            specs=(evaluation, execution, schedule),  # type: ignore[arg-type]
            at=EPOCH + timedelta(days=41 + position, hours=9),
        )
