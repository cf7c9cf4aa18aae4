"""Everything on embedded defaults, for ``ruleengine up``, the tests and the benchmarks:
the embedded MongoDB-compatible server and Redis (``embedded``), the ports and their
refusal when taken (``ports``), restarting children (``supervise``) and ``up`` itself —
the only product code that loads the Graph sandbox, lazily, inside the function that
starts it.

May import: ``store``, ``rules`` and the basics.
"""
