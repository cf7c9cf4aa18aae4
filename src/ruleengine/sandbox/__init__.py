"""Alias kept for one release: ``python -m ruleengine.sandbox`` runs ``python -m graph_sandbox``.

The Graph API simulator is the sibling package ``graph_sandbox``; this alias will be
removed in the next release. It imports nothing, and nothing in the product imports it.
"""
