"""``python -m ruleengine.sandbox``: an alias of ``python -m graph_sandbox``, to be removed.

Kept for one release so scripts that start the sandbox by its old name keep working.
"""

import sys

from graph_sandbox.__main__ import main

if __name__ == "__main__":
    sys.exit(main())
