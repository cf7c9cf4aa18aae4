"""Property: mutated rules never make the rules API answer 5xx, and a refusal stores nothing.

Each example starts from a valid rule of ``examples/rules`` and applies up to three
mutations: a field set to a value that once broke it (a 300-character timezone, year 9999,
an integer beyond 64 bits, a template with a format spec, an account id with a newline …),
any value at a random JSON path replaced by junk (huge or negative numbers, NaN, long or
non-ASCII strings, wrong types, nested lists and objects), a key or item deleted, a key
added. Hypothesis runs derandomised, so a failure reproduces.
"""

from __future__ import annotations

import copy
import io
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import SecretStr
from web_helpers import AUTH, Client, rule_body, start_client

from ruleengine import constants as c
from ruleengine.cli.files import problem_line, validate_files
from ruleengine.errors import FieldError
from ruleengine.settings import Settings
from ruleengine.store.db import Database
from support import SANDBOX_ACCOUNTS

EXAMPLES = [
    orjson.loads(p.read_bytes())
    for p in sorted((Path(__file__).parents[2] / "examples" / "rules").glob("*.json"))
]
WEBHOOKS = {"ops": SecretStr("http://127.0.0.1:9/never-called")}
FUZZ = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

BIG_INTS = [2**63 - 1, 2**63, 2**64, -(2**63) - 1, 10**12, 10**12 + 1, 10**30, 0, -1]
# Values that once answered 500, aimed at the fields they broke (plus generic junk below).
AIMED: dict[str, list[Any]] = {
    "timezone": ["x" * 300, "America", "zone.tab", "../../etc/passwd", "UTC\x00", "Mars/Olympus"],
    "start": ["0001-01-01", "9999-12-31", "2026-02-30"],
    "end": ["0001-01-01", "9999-12-31", 1.5],
    "amount": BIG_INTS,
    "max_budget": BIG_INTS,
    "min_budget": BIG_INTS,
    "every_minutes": BIG_INTS,
    "cooldown_minutes": BIG_INTS,
    "after_minutes": BIG_INTS,
    "percent": ["NaN", "Infinity", 1e308, 2**64],
    "value": ["NaN", "-Infinity", 2**64, 1e308],
    "multiplier": ["NaN", 1e308, 0],
    "template": ["{name:>999999999}", "{name!r}", "{date:%Y}", "{name[0]}", "{}", "{", "x" * 5000],
    "ad_accounts": ["act_1001\n", "act_١٠٠١", "act_999", "act_"],
    "slots": ["08:30\n", "0८:3०", "24:00", "8:00"],
    "at_time": ["08:30\n", "0८:3०"],
    "metric": ["actions.purchase\n", "custom:margin\n", "spend\n"],
    "name": ["", "x" * 5000, "\x00", None],
    "webhook": ["ops\n", "nope"],
    "spreadsheet_id": ["", "x" * 5000],
}
ADDED: dict[str, list[Any]] = {
    "date_range": [{"start": "0001-01-01"}, {"end": "9999-12-31"}, {"start": "2026-12-01"}],
    "status": ["HAS_ISSUES", "ACTIVE", "deleted"],
    "then": [{"after_minutes": 2**64, "do": "activate"}, {"at_time": "25:00", "do": "pause"}],
}
SCALARS = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from(BIG_INTS),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([v for values in AIMED.values() for v in values if isinstance(v, str)]),
    st.text(max_size=20),
    st.none(),
    st.booleans(),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)

Path_ = tuple[Any, ...]


def paths(value: Any, here: Path_ = ()) -> Iterator[Path_]:
    """Every JSON path in ``value``, containers included (the root is ``()``)."""
    yield here
    if isinstance(value, dict):
        for key, item in value.items():
            yield from paths(item, (*here, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from paths(item, (*here, index))


def at(value: Any, path: Path_) -> Any:
    for key in path:
        value = value[key]
    return value


def field_of(path: Path_) -> str | None:
    """The name of the field a path is in: ``ad_accounts`` for ``("ad_accounts", 1)``."""
    names = [key for key in path if isinstance(key, str)]
    return names[-1] if names else None


def _mutate(draw: st.DrawFn, rule: Any) -> Any:
    every = list(paths(rule))
    aimed = [p for p in every if p and not isinstance(at(rule, p), dict | list)]
    aimed = [p for p in aimed if field_of(p) in AIMED]
    operation = draw(st.sampled_from(["aim", "aim", "replace", "delete", "add"]))
    if operation == "aim" and aimed:
        path = draw(st.sampled_from(aimed))
        at(rule, path[:-1])[path[-1]] = draw(st.sampled_from(AIMED[str(field_of(path))]))
        return rule
    path = draw(st.sampled_from(every))
    target = at(rule, path)
    if operation == "add" and isinstance(target, dict):
        key = draw(st.sampled_from(sorted(ADDED)) | st.text(max_size=8))
        target[key] = draw(st.sampled_from(ADDED[key]) if key in ADDED else VALUES)
    elif operation == "delete" and path:
        del at(rule, path[:-1])[path[-1]]
    elif path:
        at(rule, path[:-1])[path[-1]] = draw(VALUES)
    else:
        return draw(VALUES)
    return rule


@st.composite
def mutated_rules(draw: st.DrawFn) -> Any:
    """A valid example with up to three hostile mutations."""
    rule: Any = copy.deepcopy(draw(st.sampled_from(EXAMPLES)))
    for _ in range(draw(st.integers(min_value=0, max_value=3))):
        rule = _mutate(draw, rule)
    return rule


def encode(body: Any) -> bytes:
    # The stdlib encoder writes integers of any size and NaN/Infinity tokens, as a hostile
    # client would; orjson (the server's parser) refuses the latter.
    return json.dumps(body, allow_nan=True).encode()


@pytest.fixture
async def fuzz_client(
    web_settings: Settings, db: Database, redis: Any, accounts: list[str]
) -> AsyncIterator[Client]:
    client = await start_client(web_settings.model_copy(update={"webhooks": WEBHOOKS}))
    try:
        yield client
    finally:
        await client.close()


async def counts(db: Database) -> tuple[int, int]:
    return (
        await db[c.RULES].count_documents({}),
        await db[c.RULE_VERSIONS].count_documents({}),
    )


async def post(client: Client, path: str, body: Any) -> tuple[int, Any]:
    response = await client.post(
        path, data=encode(body), headers={**AUTH, "Content-Type": "application/json"}
    )
    text = await response.text()
    assert response.status < 500, (path, response.status, text)
    return response.status, orjson.loads(text)


@FUZZ
@given(body=mutated_rules())
async def test_validate_never_fails_and_agrees_with_the_cli(
    fuzz_client: Client, db: Database, accounts: list[str], tmp_path: Path, body: Any
) -> None:
    status, answer = await post(fuzz_client, "/api/rules/validate", body)
    assert status in (200, 422), answer
    rule_file = tmp_path / "rule.json"
    rule_file.write_bytes(encode(body))
    out = io.StringIO()
    # what `ruleengine rules apply` runs; `rules validate` is the same without the references
    registered = {a: SANDBOX_ACCOUNTS[a][2] for a in accounts}
    valid = validate_files([rule_file], out, accounts=registered, webhooks=set(WEBHOOKS))
    assert bool(valid) == (status == 200), (answer, out.getvalue())
    if status == 422 and not answer["errors"][0]["message"].startswith("the body is not valid"):
        # the same problems, each at the same path with the same message
        api_errors = [FieldError(e["path"], e["message"]) for e in answer["errors"]]
        expected = [problem_line(rule_file, error) for error in api_errors]
        assert out.getvalue().split("\n")[:-1] == expected


@FUZZ
@given(body=mutated_rules(), serial=st.integers(min_value=0, max_value=10**9))
async def test_create_never_fails_and_a_refusal_stores_nothing(
    fuzz_client: Client, db: Database, body: Any, serial: int
) -> None:
    if isinstance(body, dict) and isinstance(body.get("name"), str):
        body["name"] = f"{body['name'][:150]} #{serial}"  # most valid bodies get through
    before = await counts(db)
    status, answer = await post(fuzz_client, "/api/rules", body)
    assert status in (201, 409, 422), answer
    after = await counts(db)
    assert after == ((before[0] + 1, before[1] + 1) if status == 201 else before)


@FUZZ
@given(body=mutated_rules())
async def test_update_never_fails_and_a_refusal_changes_nothing(
    fuzz_client: Client, db: Database, body: Any
) -> None:
    target = await db[c.RULES].find_one({"name": "Fuzz target"})
    if target is None:
        status, created = await post(fuzz_client, "/api/rules", rule_body("Fuzz target"))
        assert status == 201
        target = await db[c.RULES].find_one({"_id": created["id"]})
    before = await counts(db)
    response = await fuzz_client.put(
        f"/api/rules/{target['_id']}",
        data=encode(body),
        headers={**AUTH, "Content-Type": "application/json"},
    )
    assert response.status < 500, await response.text()
    if response.status >= 400:
        assert response.status in (409, 422)
        assert await counts(db) == before
        assert await db[c.RULES].find_one({"_id": target["_id"]}) == target


@FUZZ
@given(body=mutated_rules())
async def test_preview_never_fails_and_writes_nothing(
    fuzz_client: Client, db: Database, body: Any
) -> None:
    status, answer = await post(fuzz_client, "/api/rules/preview", body)
    assert status in (200, 422), answer
    for collection in (c.RULES, c.RULE_VERSIONS, c.BATCHES, c.EXECUTIONS, c.ACTION_INTENTS):
        assert await db[collection].count_documents({}) == 0, collection
