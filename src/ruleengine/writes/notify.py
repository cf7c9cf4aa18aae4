"""Notifications: render a template and post it to a named webhook (Slack-compatible JSON).

Webhooks are named in ``RULEENGINE_WEBHOOKS`` (``{"ops": "https://hooks…"}``);
rules refer to the name, never the URL. Delivery failures go to the error log
and come back as :class:`NotifyError`; they never crash a job. The ``notify``
action (and a ``notify`` follow-up) sends at most once per (batch, task, entity):
its intent is recorded first, and a pending one found later is given up rather
than risk a second message.

A job's messages go out :data:`NOTIFY_CHUNK` at a time (:func:`send_many`): one look-up of
the batch's intents, then per chunk one insert of its intents and one update per outcome,
instead of three commands a message. A worker killed inside a chunk leaves its intents
pending: the redelivery gives them up (``pending_intent_unverifiable``), so a crash costs
at most one chunk of messages — never a message twice.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import aiohttp

from ruleengine.acting.results import ActKey, ActResult, JobRun, intent_doc, settled
from ruleengine.errors import ErrorReport, ErrorSink, RuleEngineError
from ruleengine.redact import REDACTOR
from ruleengine.rules.entity import Entity
from ruleengine.rules.evaluate import ConditionResult, TaskVerdict
from ruleengine.rules.language.model import Task
from ruleengine.rules.language.money import format_value
from ruleengine.rules.language.template import message_text, render_template
from ruleengine.rules.plan.plan import Plan
from ruleengine.settings import Settings
from ruleengine.store.intents import Intent, IntentStore, Resolution

log = logging.getLogger(__name__)

#: Messages of a job recorded, sent and settled together (see the module): a crash gives up
#: at most this many, each settled at most once.
NOTIFY_CHUNK = 10


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
    #: the field ``before`` and ``after`` are values of: a budget or a bid is shown as money
    field: str | None = None
    account_name: str | None = None
    currency: str | None = None

    def values(self, *, now: datetime, tz: ZoneInfo) -> dict[str, Any]:
        """Placeholder values, including ``{date}`` and ``{time}`` in the rule's timezone.

        Each value is message text (:func:`~ruleengine.rules.language.template.message_text`): an
        ad's
        name is whatever whoever may rename it wrote, and must not ping a channel, link
        elsewhere or start a line of its own. The template, the rule author's, stays as written.
        """
        local = now.astimezone(tz)
        values = {
            "rule": self.rule,
            "task": self.task,
            "level": self.level,
            "account": self.account,
            "entity_id": self.entity_id,
            "entity_name": self.entity_name,
            "action": self.action,
            "account_name": self.account_name or self.account,
            "before": "-" if self.before is None else self._shown(self.before),
            "after": "-" if self.after is None else self._shown(self.after),
            "conditions": self.conditions,
            "date": local.date().isoformat(),
            "time": local.strftime("%H:%M"),
        }
        return {name: message_text(value) for name, value in values.items()}

    def _shown(self, value: Any) -> str:
        """A value of the field: money in the account's currency (``$120.00``) for a budget
        or a bid — minor units are for the store and the wire only —, else as it is."""
        return format_value(self.field, value, self.currency)


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
        account_name=run.facts.registered.name if run.facts else None,
        currency=run.facts.registered.currency if run.facts else None,
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
    (result,) = await send_many(
        notifier, intents, run, [Message(entity, key, webhook, message, context)]
    )
    return result


@dataclass(frozen=True)
class Message:
    """One message of a job: to whom, about which (entity, task), and its text."""

    entity: Entity
    key: ActKey
    webhook: str
    text: str
    context: dict[str, Any] = field(default_factory=dict)


async def send_many(
    notifier: Notifier, intents: IntentStore, run: JobRun, messages: Sequence[Message]
) -> list[ActResult]:
    """Send each message at most once for (batch, key, entity), a chunk of
    :data:`NOTIFY_CHUNK` at a time: a message whose intent this batch recorded before is not
    sent again (settled: its result; pending: given up, ``pending_intent_unverifiable``).
    Each message's result, in order."""
    results: dict[int, ActResult] = {}
    found = await intents.get_many(run.batch_id, [(m.key.task_id, m.entity.id) for m in messages])
    fresh: list[int] = []
    for index, message in enumerate(messages):
        intent = found.get((message.key.task_id, message.entity.id))
        if intent is None:
            fresh.append(index)
        elif intent.status == "pending":  # it may have gone out before a crash: never twice
            await intents.resolve(
                intent.id, status="failed", now=run.store_now(), reason="unverifiable"
            )
            results[index] = ActResult("skipped", "pending_intent_unverifiable", field="notify")
        else:
            results[index] = settled(intent)
    for start in range(0, len(fresh), NOTIFY_CHUNK):
        chunk = fresh[start : start + NOTIFY_CHUNK]
        docs = [_intent(run, messages[i]) for i in chunk]
        recorded = await intents.begin_many(docs, now=run.store_now())
        resolutions: list[Resolution] = []
        for index, intent in zip(chunk, recorded, strict=True):
            results[index] = await _deliver(notifier, messages[index], intent, resolutions)
        await intents.resolve_many(resolutions, now=run.store_now())
    return [results[i] for i in range(len(messages))]


def _intent(run: JobRun, message: Message) -> dict[str, Any]:
    before: Any = None  # a message has no value before
    return intent_doc(run, message.entity, message.key, Plan("notify", before, message.webhook))


async def _deliver(
    notifier: Notifier, message: Message, intent: Intent, resolutions: list[Resolution]
) -> ActResult:
    """Send one recorded message; what settles its intent goes in ``resolutions``."""
    if not intent.created:  # another delivery of the batch recorded it meanwhile
        return settled(intent)
    try:
        await notifier.send(message.webhook, message.text, context=message.context)
    except NotifyError as exc:
        error = {"message": str(exc)}
        resolutions.append(Resolution(intent.id, "failed", {"error": error}))
        return ActResult("failed", "notify_failed", "notify", None, message.text, error=error)
    resolutions.append(Resolution(intent.id, "done"))
    return ActResult("applied", None, "notify", None, message.text)
