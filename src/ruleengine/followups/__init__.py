"""Follow-ups: the delayed second step of an action (``then``), in one place.

"Pause now, re-activate in 2 hours": when an action with ``then`` fires, one
``followups`` document per (rule, task, entity) records what the action left
(the status it set, the budget it wrote, the name it wrote, and the values
before), the due time and a *generation*. MongoDB is the source of truth
(:mod:`ruleengine.store.followups`); Redis is only the timer: a delayed arq job
with a deterministic id per (key, generation). Scheduling again for the same key
bumps the generation and replaces the document, so an older timer that still
fires finds a newer generation and does nothing — never two follow-ups for one key.

* :mod:`ruleengine.followups.scheduling` stores follow-ups and arms their timers,
  and re-arms the ones Redis lost. It never writes to Meta: the dispatcher uses it.
* :mod:`ruleengine.followups.running` runs a due follow-up on a worker: claim the
  generation, re-check the live state, act through the write path, record.

The web app's HTTP handlers are in :mod:`ruleengine.web.api.followups`. This
package imports neither submodule, so importing the scheduler never loads the
write path.

May import: ``scheduling`` — ``store``, ``rules`` and the basics; ``running`` — also
``writes``, ``acting``, ``accounts``, ``meta`` and :mod:`ruleengine.worker.deps` (the
worker's services it runs with).
"""
