"""The sandbox's world: ad accounts, campaigns, ad sets, ads and ad rules, stored in memory.

Campaigns, ad sets and ads share one :class:`AdObject` type (``kind`` tells them
apart) because Graph treats them alike: they are read, filtered, updated and
copied by id. Iteration order is creation order, which makes listings and
cursors stable. An ad set's delivery is its profile's; its ads share it out by their
weights (:mod:`graph_sandbox.ads`), and it delivers only while one of them is active.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import Literal
from zoneinfo import ZoneInfo

from graph_sandbox.adrule_library import AdRuleLibrary
from graph_sandbox.ads import AdFactors, seeded_factors
from graph_sandbox.delivery import Profile
from graph_sandbox.schedules import HighDemandPeriod, ScheduleBook
from graph_sandbox.timeline import BudgetChange, StatusChange

Kind = Literal["campaign", "adset", "ad"]

ACTIVE = "ACTIVE"
PAUSED = "PAUSED"
CAMPAIGN_PAUSED = "CAMPAIGN_PAUSED"
ARCHIVED = "ARCHIVED"
DELETED = "DELETED"
#: Effective statuses a listing leaves out unless the caller asks for them by name.
HIDDEN_BY_DEFAULT = frozenset({ARCHIVED, DELETED})
WITH_ISSUES = "WITH_ISSUES"
IN_PROCESS = "IN_PROCESS"
ADSET_PAUSED = "ADSET_PAUSED"
# A campaign's effective statuses its ad sets take on.
_INHERITED = frozenset({ARCHIVED, DELETED, WITH_ISSUES})

# Ids look like Meta's (15 digits, numeric strings); the prefix keeps campaign
# and ad set ids apart so ``GET /{id}`` never has to guess.
_ID_PREFIX: dict[Kind, str] = {"campaign": "12021", "adset": "12022", "ad": "12023"}


@dataclass
class Account:
    """One ad account (``id`` is ``act_<account_id>``)."""

    account_id: str
    name: str
    currency: str
    timezone_name: str
    account_status: int = 1

    @property
    def id(self) -> str:
        """The Graph id, ``act_<number>``."""
        return f"act_{self.account_id}"

    @cached_property
    def tz(self) -> ZoneInfo:
        """The account's timezone; Insights days are calendar days in it."""
        return ZoneInfo(self.timezone_name)


@dataclass
class AdObject:
    """A campaign, an ad set or an ad.

    Budgets are integers in minor units, ``None`` when the object has no such
    budget (an ad-set-budget campaign, or an ad set under a CBO campaign).
    Only ad sets have a delivery ``profile``; a campaign delivers what its ad
    sets deliver. An ad has its ``campaign_id`` and its ``adset_id``.
    """

    id: str
    kind: Kind
    account_id: str
    name: str
    status: str
    objective: str
    created_time: datetime
    updated_time: datetime
    campaign_id: str | None = None
    daily_budget: int | None = None
    lifetime_budget: int | None = None
    profile: Profile | None = None
    source_id: str | None = None
    #: What Meta reports instead of ``ACTIVE`` while Meta holds the object back
    #: (``WITH_ISSUES``, ``IN_PROCESS``); such an object delivers nothing.
    held_as: str | None = None
    adset_id: str | None = None
    #: An ad set's bidding (Meta's ``bid_strategy``); ``bid_amount`` in minor units is set
    #: only under a strategy that takes a bid (a bid cap, a cost cap).
    bid_strategy: str = "LOWEST_COST_WITHOUT_CAP"
    bid_amount: int | None = None
    #: An ad set's ``optimization_goal`` (:mod:`graph_sandbox.results`); ``None`` otherwise.
    optimization_goal: str | None = None
    #: A campaign made through Meta's old Advantage+ APIs (``AUTOMATED_SHOPPING_ADS``,
    #: ``SMART_APP_PROMOTION``): the API may no longer change it but for its status.
    smart_promotion_type: str | None = None
    #: A campaign's ``advantage_state_info.advantage_state`` (None: not Advantage+).
    advantage_state: str | None = None
    #: A campaign's ``is_adset_budget_sharing_enabled`` (ad set budgets, since v24.0: up to
    #: 20 % of an ad set's daily budget may go to the campaign's other ad sets).
    budget_sharing: bool | None = None
    #: An ad set's spend limits under an Advantage campaign budget, minor units (None: unset).
    daily_spend_cap: int | None = None
    daily_min_spend_target: int | None = None
    lifetime_spend_cap: int | None = None
    lifetime_min_spend_target: int | None = None


class World:
    """Every ad account and ad object of one scenario, with the lookups Graph needs."""

    def __init__(self, *, seed: int, scenario: str) -> None:
        self.seed = seed
        self.scenario = scenario
        self.accounts: dict[str, Account] = {}
        self.objects: dict[str, AdObject] = {}
        self._campaigns: dict[str, list[AdObject]] = {}
        self._adsets: dict[str, list[AdObject]] = {}
        self._children: dict[str, list[AdObject]] = {}
        self._ads: dict[str, list[AdObject]] = {}
        self._ads_of: dict[str, list[AdObject]] = {}
        self._serial: dict[Kind, int] = {"campaign": 0, "adset": 0, "ad": 0}
        self._status_log: dict[str, list[StatusChange]] = {}
        self._budget_log: dict[str, list[BudgetChange]] = {}
        #: Significant edits of ad sets (Meta's learning phase restarts at each), by ad set.
        self._significant_edits: dict[str, list[datetime]] = {}
        #: Ad sets the scenario says were edited ``n`` account-local days before "now",
        #: wherever the clock stands (:mod:`graph_sandbox.learning`).
        self.edited_days_ago: dict[str, int] = {}
        #: Meta's Automated Rules of the accounts (``adrules_library``): stored, never run.
        self.adrules = AdRuleLibrary(seed=seed)
        #: Ads whose factors the admin API set, instead of the seed's.
        self.ad_factors: dict[str, AdFactors] = {}
        self._seeded_factors: dict[str, AdFactors] = {}
        #: Budget schedules (Meta's high-demand periods) of campaigns and ad sets.
        self.schedules = ScheduleBook(seed=seed)

    def add_account(self, account: Account) -> None:
        """Register an ad account."""
        self.accounts[account.id] = account
        self._campaigns[account.id] = []
        self._adsets[account.id] = []
        self._ads[account.id] = []

    def next_id(self, kind: Kind) -> str:
        """A fresh id for a new campaign, ad set or ad, deterministic from the seed and position."""
        self._serial[kind] += 1
        return f"{_ID_PREFIX[kind]}{self.seed % 1000:03d}{self._serial[kind]:07d}"

    def add(self, obj: AdObject) -> None:
        """Store a campaign, ad set or ad (its account and its parents must exist)."""
        self.objects[obj.id] = obj
        act = f"act_{obj.account_id}"
        if obj.kind == "campaign":
            self._campaigns[act].append(obj)
            self._children[obj.id] = []
        elif obj.kind == "ad":
            assert obj.adset_id is not None, "an ad needs its adset_id"
            self._ads[act].append(obj)
            self._ads_of[obj.adset_id].append(obj)
        else:
            self._ads_of[obj.id] = []
            assert obj.campaign_id is not None, "an ad set needs its campaign_id"
            self._adsets[act].append(obj)
            self._children[obj.campaign_id].append(obj)

    def account(self, act_id: str) -> Account | None:
        """The ad account ``act_<n>``, or ``None``."""
        return self.accounts.get(act_id)

    def account_of(self, obj: AdObject) -> Account:
        """The ad account an object belongs to."""
        return self.accounts[f"act_{obj.account_id}"]

    def get(self, object_id: str) -> AdObject | None:
        """The campaign or ad set with this id, or ``None``."""
        return self.objects.get(object_id)

    def campaigns(self, act_id: str) -> list[AdObject]:
        """The campaigns of an ad account, in creation order."""
        return self._campaigns[act_id]

    def adsets(self, act_id: str) -> list[AdObject]:
        """The ad sets of an ad account, in creation order."""
        return self._adsets[act_id]

    def adsets_of(self, campaign_id: str) -> list[AdObject]:
        """The ad sets of a campaign, in creation order."""
        return self._children[campaign_id]

    def ads(self, act_id: str) -> list[AdObject]:
        """The ads of an ad account, in creation order."""
        return self._ads[act_id]

    def ads_of(self, parent_id: str) -> list[AdObject]:
        """The ads of an ad set, or of every ad set of a campaign, in creation order."""
        if parent_id in self._children:
            return [ad for adset in self._children[parent_id] for ad in self._ads_of[adset.id]]
        return self._ads_of[parent_id]

    def adset_of(self, ad: AdObject) -> AdObject:
        """The ad set an ad belongs to."""
        assert ad.adset_id is not None
        return self.objects[ad.adset_id]

    def campaign_of(self, adset: AdObject) -> AdObject:
        """The campaign an ad set belongs to."""
        assert adset.campaign_id is not None
        return self.objects[adset.campaign_id]

    def factors(self, ad: AdObject) -> AdFactors:
        """An ad's weights in its ad set's delivery: set by the admin API, or its source's
        (a copy shows the same creative), or the seed's."""
        found = self.ad_factors.get(ad.id)
        if found is not None:
            return found
        source = self.objects.get(ad.source_id) if ad.source_id else None
        if source is not None and source.kind == "ad":
            return self.factors(source)
        seeded = self._seeded_factors.get(ad.id)
        if seeded is None:
            seeded = self._seeded_factors[ad.id] = seeded_factors(self.seed, ad.id)
        return seeded

    def effective_status(self, obj: AdObject) -> str:
        """Meta's ``effective_status``.

        An ad set under a paused campaign is ``CAMPAIGN_PAUSED``; under an archived,
        deleted or ``WITH_ISSUES`` campaign it takes the campaign's status, as Meta's
        children do (``IN_PROCESS`` is the campaign's own). An active ad under a paused
        ad set is ``ADSET_PAUSED``, and otherwise shows its ad set's effective status.
        """
        if obj.kind == "ad" and obj.status == ACTIVE:
            parent = self.effective_status(self.adset_of(obj))
            return ADSET_PAUSED if parent == PAUSED else parent
        if obj.kind == "adset":
            campaign = self.effective_status(self.campaign_of(obj))
            if campaign == PAUSED:
                return CAMPAIGN_PAUSED
            if campaign in _INHERITED:
                return campaign
        if obj.status == ACTIVE and obj.held_as:
            return obj.held_as
        return obj.status

    def set_status(self, obj: AdObject, status: str, at: datetime, *, via_api: bool = True) -> None:
        """Change an object's status at ``at``, keeping the change in its status log
        (``via_api``: written through the Graph API, not in Ads Manager)."""
        if status != obj.status:
            change = StatusChange(at, obj.status, status, via_api)
            self._status_log.setdefault(obj.id, []).append(change)
            obj.status = status

    def status_log(self, object_id: str) -> list[StatusChange]:
        """Every status change of an object, in the order they were made."""
        return self._status_log.get(object_id, [])

    def log_budget(
        self, obj: AdObject, before: int, after: int, at: datetime, *, via_api: bool = True
    ) -> None:
        """Log a change of an object's budget at ``at``: its delivery follows the new budget
        from that instant (:mod:`graph_sandbox.timeline`)."""
        if after != before:
            self._budget_log.setdefault(obj.id, []).append(BudgetChange(at, before, after, via_api))

    def budget_log(self, object_id: str) -> list[BudgetChange]:
        """Every budget change of an object, in the order they were made."""
        return self._budget_log.get(object_id, [])

    def high_demand_periods(self, object_id: str) -> list[HighDemandPeriod]:
        """Every budget schedule an object had, deleted ones too (their past spend stays)."""
        return self.schedules.of(object_id, deleted=True)

    def significant_edit(self, adset_id: str, at: datetime) -> None:
        """Log a significant edit of an ad set at ``at``: its learning phase starts again."""
        self._significant_edits.setdefault(adset_id, []).append(at)

    def significant_edits(self, adset_id: str) -> list[datetime]:
        """Every logged significant edit of an ad set, in the order they were made."""
        return self._significant_edits.get(adset_id, [])
