"""The domain, pure: no I/O, no clock, no settings.

Five rooms and a few modules between them:

- ``language/``: what a rule says — its model, validation, catalogue of metrics and
  vocabulary, levels, periods, schedules, actions, approvals, templates and money;
- ``plan/``: the planners every write obeys (targets, scaling, rebalancing);
- ``replay/``: the backtest's replay over Insights history, calling the same planners;
- ``meta/``: Meta's rules vocabulary, filters, import and export, API versions;
- ``impact/``: holdouts and the measured effect;
- at the top: the shared base models (``basics``), an entity as listed (``entity``), Meta's
  Advantage+ limits (``advantage``), evaluation (``evaluate``), local filtering
  (``filtering``), Insights fetch grouping (``fetch``) and conflicts between rules
  (``conflicts``).

The rooms depend one way: ``impact`` ← ``language`` ← ``plan``, ``meta``, ``replay``; no
cycle between them (tests/test_layers.py).

May import: nothing of ruleengine's but ``errors`` (tests/test_layers.py).
"""
