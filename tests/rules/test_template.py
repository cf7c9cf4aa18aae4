"""Templates render plain placeholders only, and never raise on what an older version stored."""

from __future__ import annotations

from datetime import UTC, date, datetime
from zoneinfo import ZoneInfo

import pytest

from ruleengine.rules.language.action_types import RenameAction
from ruleengine.rules.language.template import render_template
from ruleengine.rules.plan.plan import plan_name
from ruleengine.writes.notify import MessageContext, render

VALUES = {"name": "Summer sale", "date": "2026-12-01", "rule": "Tag"}


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("{name} [{date}]", "Summer sale [2026-12-01]"),
        ("{{literal}} {name}", "{literal} Summer sale"),
        ("{name:>999999999}", "Summer sale"),  # a stored spec is ignored, not obeyed
        ("{name:,} {date:%Y}", "Summer sale 2026-12-01"),
        ("{name!r}", "Summer sale"),
        ("{missing} {name[0]} {name.upper}", "{missing} {name[0]} {name.upper}"),
        ("{}", "{}"),
        ("{name", "{name"),  # does not parse: left as it is
    ],
)
def test_render_fills_plain_placeholders_and_never_raises(template: str, expected: str) -> None:
    assert render_template(template, VALUES) == expected


def legacy_rename(template: str) -> RenameAction:
    """A rename action stored before templates were checked (validation bypassed)."""
    return RenameAction.model_construct(type="rename", template=template, then=None)


@pytest.mark.parametrize("template", ["{name:>999999999}", "{name!r} {date:%Y}", "{name[0]}"])
def test_a_legacy_rename_template_renders_without_blowing_up(template: str) -> None:
    plan = plan_name(
        legacy_rename(template), live="Summer sale", rule_name="Tag", today=date(2026, 12, 1)
    )
    assert isinstance(plan.after, str)
    assert len(plan.after) < 100


def test_a_legacy_notify_template_renders_without_blowing_up() -> None:
    context = MessageContext(
        rule="Tag",
        task="t",
        level="campaign",
        account="act_1",
        entity_id="1",
        entity_name="Summer sale",
        action="pause",
    )
    values = context.values(now=datetime(2026, 12, 1, tzinfo=UTC), tz=ZoneInfo("UTC"))
    assert render("{entity_name:>999999999} {date:%Y} {entity_id!r}", values) == (
        "Summer sale 2026-12-01 1"
    )
