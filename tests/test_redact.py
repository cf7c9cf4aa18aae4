"""Tokens are masked wherever they appear in text, data and log records."""

from __future__ import annotations

import logging

import pytest

from ruleengine.redact import MASK, RedactingFilter, Redactor, setup_logging

TOKEN = "EAAGsecretTOKENvalue0123456789abcdefXYZ"


@pytest.mark.parametrize(
    "text",
    [
        f"GET /v27.0/act_1/campaigns?access_token={TOKEN}&limit=25",
        f'{{"access_token": "{TOKEN}"}}',
        f"Authorization: Bearer {TOKEN}",
        f"headers={{'Authorization': 'OAuth {TOKEN}'}}",
        f"the token is {TOKEN}.",
    ],
)
def test_patterns_mask_tokens_wherever_graph_puts_them(text: str) -> None:
    masked = Redactor().text(text)
    assert TOKEN not in masked
    assert MASK in masked


def test_registered_secrets_are_masked_even_without_a_pattern() -> None:
    redactor = Redactor()
    redactor.register("plain-secret-value")
    assert redactor.text("x plain-secret-value y") == f"x {MASK} y"
    data = {"access_token": "anything", "nested": ["plain-secret-value", 3]}
    assert redactor.data(data) == {"access_token": MASK, "nested": [MASK, 3]}


def test_log_records_are_masked_including_arguments_and_tracebacks(
    caplog: pytest.LogCaptureFixture,
) -> None:
    logger = logging.getLogger("ruleengine.test")
    caplog.handler.addFilter(RedactingFilter())
    with caplog.at_level(logging.INFO):
        logger.info("calling %s", f"https://graph/x?access_token={TOKEN}")
        try:
            raise ValueError(f"bad token {TOKEN}")
        except ValueError:
            logger.exception("failed")
    assert TOKEN not in caplog.text
    assert "access_token=[REDACTED]" in caplog.text


def test_setup_logging_routes_arq_through_the_redacting_handler() -> None:
    arq = logging.getLogger("arq")
    arq.addHandler(logging.StreamHandler())
    arq.propagate = False
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        setup_logging("INFO")
        assert arq.handlers == []
        assert arq.propagate is True
        assert any(isinstance(f, RedactingFilter) for h in root.handlers for f in h.filters)
    finally:
        root.handlers[:], _ = saved
        root.setLevel(saved[1])
