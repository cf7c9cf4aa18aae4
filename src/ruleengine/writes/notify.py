"""Notifications: render a template and post it to a named webhook (Slack-compatible JSON).

Webhooks are named in ``RULEENGINE_WEBHOOKS`` (``{"ops": "https://hooks…"}``);
rules refer to the name, never the URL. Delivery failures go to the error log
and come back as :class:`NotifyError`; they never crash a job. The ``notify``
action (and a ``notify`` follow-up) sends at most once per (batch, task, entity):
its intent is recorded first, and a pending one found later is given up rather
than risk a second message.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import aiohttp

from ruleengine.acting.results import ActKey, ActResult, JobRun, record_once
from ruleengine.errors import ErrorReport, ErrorSink, RuleEngineError
from ruleengine.redact import REDACTOR
from ruleengine.rules.entity import Entity
from ruleengine.rules.evaluate import ConditionResult, TaskVerdict
from ruleengine.rules.model import Task
from ruleengine.rules.template import render_template
from ruleengine.settings import Settings
from ruleengine.store.intents import IntentStore

log = logging.getLogger(__name__)


class NotifyError(RuleEngineError):
    """A message could not be delivered."""


def _fmt(value: float | list[float] | str | None) -> str:
    if value is None:
        return "no data"
    if isinstance(value, str):  # a ranking's label
        return value
    if isinstance(value, list):  # [low, high] of IN_RANGE / NOT_IN_RANGE
        return "[" + " to ".join(_fmt(v) for v in value) + "]"
    if value == int(value):
        return f"{int(value):,}"
    return f"{value:,.2f}" if abs(value) >= 100 else f"{value:.4g}"


def describe_conditions(results: list[ConditionResult]) -> str:
    """``spend (today) 60 > 50 ✓; ctr (last_3d) no data < 0.6 ✗`` — what the rule saw (a
    result with its indicator: ``results (last_7d) [actions:link_click] 12 >= 10 ✓``)."""
    parts = []
    for r in results:
        where = f"{r.metric} ({r.period})" if r.period else r.metric
        if r.indicator is not None:  # what results were counted as, for this entity
            where += f" [{r.indicator}]"
        rhs = r.compare_to + f" = {_fmt(r.expected)}" if r.compare_to else _fmt(r.expected)
        parts.append(f"{where} {_fmt(r.actual)} {r.operator} {rhs} {'✓' if r.passed else '✗'}")
    return "; ".join(parts)


@dataclass(frozen=True)
class MessageContext:
    """What a notification template can refer to."""

    rule: str
    task: str
    level: str
    account: str
    entity_id: str
    entity_name: str
    action: str
    before: Any = None
    after: Any = None
    conditions: str = ""

    def values(self, *, now: datetime, tz: ZoneInfo) -> dict[str, Any]:
        """Placeholder values, including ``{date}`` and ``{time}`` in the rule's timezone."""
        local = now.astimezone(tz)
        return {
            "rule": self.rule,
            "task": self.task,
            "level": self.level,
            "account": self.account,
            "entity_id": self.entity_id,
            "entity_name": self.entity_name,
            "action": self.action,
            "before": "-" if self.before is None else self.before,
            "after": "-" if self.after is None else self.after,
            "conditions": self.conditions,
            "date": local.date().isoformat(),
            "time": local.strftime("%H:%M"),
        }


def render(template: str, values: Mapping[str, Any]) -> str:
    """Fill ``{placeholders}``; unknown ones stay as written; never raises.

    Format specs and conversions a template stored before they were refused are ignored.
    """
    return render_template(template, values)


class Notifier:
    """Posts messages to the webhooks configured in settings."""

    def __init__(self, settings: Settings, sink: ErrorSink) -> None:
        self._hooks = {name: url.get_secret_value() for name, url in settings.webhooks.items()}
        for url in self._hooks.values():
            REDACTOR.register(url)  # webhook URLs are secrets too
        self._sink = sink
        self._timeout = aiohttp.ClientTimeout(total=10)
        self._session: aiohttp.ClientSession | None = None

    async def send(self, webhook: str, text: str, *, context: dict[str, Any]) -> None:
        """Deliver ``text``; raises NotifyError (after logging it) when that fails."""
        url = self._hooks.get(webhook)
        try:
            if url is None:
                raise NotifyError(f"webhook '{webhook}' is not configured in RULEENGINE_WEBHOOKS")
            if self._session is None or self._session.closed:
                self._session = aiohttp.ClientSession(timeout=self._timeout)
            async with self._session.post(url, json={"text": text}) as response:
                if response.status >= 300:
                    body = (await response.text())[:500]
                    raise NotifyError(
                        f"webhook '{webhook}' answered HTTP {response.status}: {body}"
                    )
        except (aiohttp.ClientError, TimeoutError, NotifyError) as exc:
            error = (
                exc
                if isinstance(exc, NotifyError)
                else NotifyError(f"webhook '{webhook}': {exc!r}")
            )
            log.warning("notification not delivered: %s", error)
            await self._sink.report(
                ErrorReport(
                    function="notify.send",
                    message=str(error),
                    params={"webhook": webhook, "text": text},
                    context=context,
                )
            )
            raise error from None
        log.info("notification sent to '%s' (%d chars)", webhook, len(text))

    async def close(self) -> None:
        """Close the HTTP session."""
        if self._session is not None and not self._session.closed:
            await self._session.close()


def task_message(
    run: JobRun, entity: Entity, task: Task, template: str, *, verdict: TaskVerdict | None
) -> str:
    """A task's notification about ``entity``, with the conditions it saw."""
    context = MessageContext(
        rule=run.rule.name,
        task=task.id,
        level=run.rule.level,
        account=run.account,
        entity_id=entity.id,
        entity_name=entity.name,
        action=task.action.type,
        conditions=describe_conditions(verdict.conditions) if verdict else "",
    )
    return render(template, context.values(now=run.now, tz=run.rule.zone()))


async def send_once(
    notifier: Notifier,
    intents: IntentStore,
    run: JobRun,
    entity: Entity,
    key: ActKey,
    *,
    webhook: str,
    message: str,
    context: dict[str, Any],
) -> ActResult:
    """Send ``message`` to ``webhook`` at most once for (batch, key, entity)."""
    intent = await record_once(
        intents, run, entity, key, field="notify", before=None, target=webhook
    )
    if isinstance(intent, ActResult):
        return intent
    try:
        await notifier.send(webhook, message, context=context)
    except NotifyError as exc:
        error = {"message": str(exc)}
        await intents.resolve(intent.id, status="failed", now=run.now, error=error)
        return ActResult("failed", "notify_failed", "notify", None, message, error=error)
    await intents.resolve(intent.id, status="done", now=run.now)
    return ActResult("applied", None, "notify", None, message)
