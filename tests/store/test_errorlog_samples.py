"""Error-log samples stay small and storable whatever a failure carried."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import bson
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ruleengine import constants as c
from ruleengine.errors import ErrorReport
from ruleengine.redact import MASK
from ruleengine.store.db import Database
from ruleengine.store.errorlog import ErrorLog
from ruleengine.store.samples import MAX_DEPTH, SAMPLE_MAX_BYTES, bounded_sample

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
TOKEN = "EAAG" + "x7Yq" * 10

ANY_TEXT = st.text(st.characters(exclude_categories=[]), max_size=40)  # surrogates, NUL too
LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=2**63, max_value=2**2000),
    st.floats(),
    ANY_TEXT,
    st.text(max_size=3).map(lambda s: s * 5000),
    st.binary(max_size=10),
    st.datetimes(timezones=st.just(UTC)),
)
JSONISH = st.recursive(
    LEAVES,
    lambda inner: st.lists(inner, max_size=8) | st.dictionaries(ANY_TEXT, inner, max_size=8),
    max_leaves=60,
)


def _nested(depth: int, leaf: Any, as_list: bool) -> Any:
    value = leaf
    for n in range(depth):
        value = [value] if as_list else {f"level{n}": value, "$set": n, "a.b": None}
    return value


HOSTILE = st.one_of(
    JSONISH,
    st.builds(lambda n, v: [v] * n, st.integers(0, 60_000), LEAVES),
    st.builds(lambda n, v: {str(k): v for k in range(n)}, st.integers(0, 5_000), LEAVES),
    st.builds(_nested, st.integers(0, 400), LEAVES, st.booleans()),
)


def _report(params: Any, response: Any, context: Any, message: str, stack: str) -> ErrorReport:
    return ErrorReport(
        function="writer.update",
        message=message,
        stack=stack,
        params=params,
        response=response,
        context=context,
    )


@settings(max_examples=300, deadline=None)
@given(params=HOSTILE, response=HOSTILE, context=HOSTILE, message=ANY_TEXT, stack=ANY_TEXT)
def test_a_sample_always_encodes_within_the_bound(
    params: Any, response: Any, context: Any, message: str, stack: str
) -> None:
    sample = bounded_sample(
        {
            "at": NOW,
            "message": message * 1000,
            "params": params,
            "response": response,
            "stack": stack * 1000,
            "context": context,
        }
    )
    assert len(bson.encode(sample)) <= SAMPLE_MAX_BYTES


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(params=HOSTILE, response=HOSTILE, context=HOSTILE, message=ANY_TEXT, stack=ANY_TEXT)
@example(params={"\ud800": 1}, response=2**64, context=None, message="\ud800", stack="\udfff")
async def test_recording_anything_never_fails_and_stores_a_bounded_sample(
    db: Database, params: Any, response: Any, context: Any, message: str, stack: str
) -> None:
    log = ErrorLog(db)
    group_id = await log.record(_report(params, response, context, message, stack), now=NOW)
    group = await log.get(group_id)
    assert len(bson.encode(group.samples[0])) <= SAMPLE_MAX_BYTES
    stored = await db[c.ERROR_LOG].find_one({"function": "writer.update"})
    assert stored is not None
    assert all(len(bson.encode(s)) <= SAMPLE_MAX_BYTES for s in stored["samples"])


async def test_a_huge_answer_and_a_deep_context_are_kept_in_part_and_say_so(db: Database) -> None:
    response = {"data": [{"id": str(n), "spend": "1.00"} for n in range(50_000)]}
    context = _nested(500, "bottom", as_list=False)
    params = {"body": {"daily_budget": 12000}, "access_token": TOKEN, "note": f"t={TOKEN}"}
    log = ErrorLog(db)
    group = await log.get(
        await log.record(
            _report(params, response, context, "boom " * 10_000, "frame\n" * 50_000 + "Error: x"),
            now=NOW,
        )
    )
    (sample,) = group.samples
    assert len(bson.encode(sample)) <= SAMPLE_MAX_BYTES
    assert sample["params"]["body"] == {"daily_budget": 12000}  # small fields stay whole
    assert sample["params"]["access_token"] == MASK
    assert TOKEN not in str(sample)
    data = sample["response"]
    if isinstance(data, str):  # too big even with 200 items: JSON text with a marker
        assert data.startswith('{"data":[{"id":"0"') and "…[cut: " in data
    else:
        assert len(data["data"]) == 201 and data["data"][-1] == "… 49800 more items"
    deepest = sample["context"]
    for _ in range(MAX_DEPTH):
        deepest = deepest[next(k for k in deepest if k.startswith("level"))]
    assert deepest == f"<object nested deeper than {MAX_DEPTH} levels>"
    assert sample["stack"].endswith("Error: x")  # a stack keeps its last frames
