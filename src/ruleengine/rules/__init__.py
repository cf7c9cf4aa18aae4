"""The domain, pure: no I/O, no clock, no settings.

The rule model and its validation (``model``, ``validation``, ``action_types``, ``levels``,
``basics``), the metric catalogue and vocabulary (``catalog``, ``vocabulary``), schedules
(``schedule``), periods and fetch grouping (``periods``, ``fetch``), evaluation
(``evaluate``, ``entity``, ``filtering``, ``template``, ``metric_table``), money and the
planners and guards every write obeys (``money``, ``plan``, ``scaling``) — the live write
path and the backtest's replay call the same functions (``replay``, ``replay_rows``,
``replay_masks``, ``history``, ``lag``) —, conflicts analysis (``conflicts``) and Meta's
rules vocabulary (``meta_vocab``, ``meta_import``, ``meta_export``).

May import: nothing of ruleengine's but ``errors`` (tests/test_layers.py).
"""
