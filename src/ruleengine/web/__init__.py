"""The web app: REST API, UI screens, health and metrics (``python -m ruleengine.web``)."""
