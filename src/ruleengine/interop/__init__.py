"""Meta's Automated Rules in and out, with I/O: reading an account's ``adrules_library``
(read-only), its currency and timezone, saving imported rules. The conversions are pure
(:mod:`ruleengine.rules.meta.importing`, :mod:`ruleengine.rules.meta.exporting`).

May import: ``analysis`` (the conflict check of an activating import), ``store``, ``meta``
(read-only), ``rules`` and the basics.
"""
