"""Custom metrics from Google Sheets: the table parsing, and SheetsReader end to end.

The end-to-end tests run the real gspread / gspread-asyncio / google-auth code
against the Sheets v4 simulator on a loopback port: a service-account key file
(throwaway RSA key) whose ``token_uri`` points at the simulator, and
``api_url`` routing every Sheets request there.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from graph_sandbox.sheets_api import (
    GridBounds,
    SheetsStore,
    create_sheets_app,
    parse_cells,
    split_sheet_name,
)
from ruleengine.errors import RuleEngineError
from ruleengine.rules.language.metric_table import (
    CustomMetricTable,
    SheetsError,
    normalise_name,
    parse_number,
)
from ruleengine.worker.sheets import SheetsReader

ACCOUNT_EMAIL = "ruleengine-bot@demo-project.iam.gserviceaccount.com"

METRICS_ROWS = [
    ["Campaign ID", "Campaign Name", "Margin %", "Target CPA", "Note"],
    ["120001", "Summer Sale [AUTO]", "35%", "$1,200", "keep"],
    ["120002", "Winter Promo", "12.5", "", "-"],
    ["120003", "Brand", "#N/A", " 7 ", "1,234.5"],
]


# --- parsing, no I/O ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("12.5", 12.5),
        ("1,234.5", 1234.5),
        ("35%", 35.0),
        ("-35 %", -35.0),
        ("$1,200", 1200.0),
        ("-$1,200.50", -1200.5),
        ("($1,200)", -1200.0),
        ("Rp 15,000", 15000.0),
        ("€3", 3.0),
        (" 7 ", 7.0),
        ("1.5E+3", 1500.0),
        (".5", 0.5),
        ("0", 0.0),
        (42, 42.0),
        (2.5, 2.5),
        ("", None),
        ("   ", None),
        ("#N/A", None),
        ("#DIV/0!", None),
        ("-", None),
        ("n/a", None),
        ("twelve", None),
        ("12 apples", None),
        ("1.234,5", None),  # a comma decimal point: refuse rather than guess the locale
        ("1,23", None),
        ("(12", None),
        ("-(12)", None),
        ("nan", None),
        ("inf", None),
        (float("nan"), None),
        (True, None),
        (None, None),
    ],
)
def test_parse_number_is_lenient_but_never_guesses(raw: object, expected: float | None) -> None:
    assert parse_number(raw) == expected


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("margin_pct", "margin_pct"),
        ("Margin %", "margin_pct"),
        ("  Margin Pct ", "margin_pct"),
        ("margin-pct", "margin_pct"),
        ("Target CPA ($)", "target_cpa"),
        ("ROAS (7d)", "roas_7d"),
        ("Ad set ID", "ad_set_id"),
        ("", ""),
    ],
)
def test_normalise_name(header: str, expected: str) -> None:
    assert normalise_name(header) == expected


def test_table_by_id_reads_every_metric_column() -> None:
    table = CustomMetricTable(METRICS_ROWS)

    assert table.key == "id"
    assert table.metrics == ("margin_pct", "target_cpa", "note")
    assert len(table) == 3

    def value(entity_id: str, metric: str) -> float | None:
        return table.value(entity_id=entity_id, entity_name="ignored", metric=metric)

    assert value("120001", "margin_pct") == 35.0
    assert value("120001", "custom:margin_pct") == 35.0
    assert value("120001", "Margin %") == 35.0
    assert value("120001", "target_cpa") == 1200.0
    assert value("120003", "note") == 1234.5
    assert value("120002", "target_cpa") is None  # empty cell
    assert value("120003", "margin_pct") is None  # #N/A
    assert value("120001", "note") is None  # text
    assert value("120001", "no_such_column") is None
    assert value("999999", "margin_pct") is None  # no row


def test_table_by_name_matches_trimmed_and_case_insensitive() -> None:
    table = CustomMetricTable(METRICS_ROWS, key="name")

    name = "  summer sale [auto] "
    assert table.value(entity_id="x", entity_name=name, metric="margin_pct") == 35.0
    assert table.value(entity_id="120001", entity_name="Other", metric="margin_pct") is None


def test_table_key_column_is_the_first_of_its_kind() -> None:
    rows = [["Note", "Ad Set ID", "Entity ID", "Margin"], ["x", "1", "2", "5"]]
    table = CustomMetricTable(rows)

    assert table.value(entity_id="1", entity_name="", metric="margin") == 5.0
    assert table.value(entity_id="2", entity_name="", metric="margin") is None
    assert table.metrics == ("note", "margin")  # key columns are not metrics


def test_an_ad_sheet_is_keyed_by_ad_id_or_ad_name() -> None:
    rows = [["Ad ID", "Ad Name", "Margin"], ["120009", "Red shoes", "7"]]
    by_id, by_name = CustomMetricTable(rows), CustomMetricTable(rows, key="name")

    assert by_id.value(entity_id="120009", entity_name="", metric="margin") == 7.0
    assert by_name.value(entity_id="", entity_name="red shoes", metric="margin") == 7.0
    assert by_id.metrics == ("margin",)


def test_table_duplicate_key_last_row_wins_whole() -> None:
    rows = [["id", "a", "b"], ["1", "10", "20"], ["1", "11", ""]]
    table = CustomMetricTable(rows)

    assert len(table) == 1
    assert table.value(entity_id="1", entity_name="", metric="a") == 11.0
    assert table.value(entity_id="1", entity_name="", metric="b") is None


def test_table_tolerates_ragged_rows_and_blank_keys() -> None:
    rows = [["id", "a", "b"], ["1"], ["", "5", "5"], [" 2 ", "3"]]
    table = CustomMetricTable(rows)

    assert len(table) == 2
    assert table.value(entity_id="1", entity_name="", metric="a") is None
    assert table.value(entity_id="2", entity_name="", metric="a") == 3.0


def test_table_duplicate_headers_left_most_wins() -> None:
    table = CustomMetricTable([["id", "Margin %", "margin pct"], ["1", "1", "2"]])

    assert table.metrics == ("margin_pct",)
    assert table.value(entity_id="1", entity_name="", metric="margin_pct") == 1.0


@pytest.mark.parametrize(
    ("rows", "key", "fragment"),
    [
        ([], "id", "empty"),
        ([["", " "]], "id", "empty"),
        ([["Campaign Name", "Margin"]], "id", "campaign_id"),
        ([["Campaign ID", "Margin"]], "name", "campaign_name"),
    ],
)
def test_table_without_key_column_is_a_sheets_error(
    rows: list[list[str]], key: str, fragment: str
) -> None:
    with pytest.raises(SheetsError, match=fragment):
        CustomMetricTable(rows, key=key)  # type: ignore[arg-type]


def test_sheets_error_is_a_ruleengine_error() -> None:
    assert issubclass(SheetsError, RuleEngineError)


# --- the simulator's A1 notation ------------------------------------------------------------


@pytest.mark.parametrize(
    ("a1", "expected"),
    [
        ("'Sheet 1'!A1:Z", ("Sheet 1", "A1:Z")),
        ("'It''s'!B2", ("It's", "B2")),
        ("'Sheet 1'", ("Sheet 1", None)),
        ("Sheet1!A:C", ("Sheet1", "A:C")),
        ("A1:B2", (None, "A1:B2")),
    ],
)
def test_split_sheet_name(a1: str, expected: tuple[str | None, str | None]) -> None:
    assert split_sheet_name(a1) == expected


@pytest.mark.parametrize(
    ("cells", "expected"),
    [
        ("A1:Z", GridBounds(0, None, 0, 26)),
        ("B2:C3", GridBounds(1, 3, 1, 3)),
        ("A:C", GridBounds(0, None, 0, 3)),
        ("2:5", GridBounds(1, 5, 0, None)),
        ("AA10", GridBounds(9, 10, 26, 27)),
        ("Metrics", None),
        ("A1:", None),
    ],
)
def test_parse_cells(cells: str, expected: GridBounds | None) -> None:
    assert parse_cells(cells) == expected


# --- end to end against the simulator -------------------------------------------------------


@dataclass
class Simulator:
    store: SheetsStore
    base_url: str  # e.g. http://127.0.0.1:PORT/sheets


@pytest.fixture(scope="module")
def private_key_pem() -> str:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return pem.decode()


@pytest.fixture
async def simulator() -> AsyncIterator[Simulator]:
    store = SheetsStore()
    runner = web.AppRunner(create_sheets_app(store))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    port = runner.addresses[0][1]
    yield Simulator(store, f"http://127.0.0.1:{port}/sheets")
    await runner.cleanup()


@pytest.fixture
def credentials_file(tmp_path: Path, private_key_pem: str, simulator: Simulator) -> Path:
    path = tmp_path / "service-account.json"
    info = {
        "type": "service_account",
        "project_id": "demo-project",
        "private_key_id": "0123456789abcdef",
        "private_key": private_key_pem,
        "client_email": ACCOUNT_EMAIL,
        "client_id": "100000000000000000001",
        "auth_uri": "https://accounts.google.com/o/oauth2/auth",
        "token_uri": simulator.base_url + "/token",
        "universe_domain": "googleapis.com",
    }
    path.write_text(json.dumps(info))
    return path


@pytest.fixture
async def reader(credentials_file: Path, simulator: Simulator) -> AsyncIterator[SheetsReader]:
    sheets = SheetsReader(
        credentials_file=credentials_file, api_url=simulator.base_url, call_interval_s=0
    )
    yield sheets
    await sheets.close()


async def test_load_by_id_reads_values_through_the_real_client(
    reader: SheetsReader, simulator: Simulator
) -> None:
    simulator.store.put("sheet-a", "Metrics", METRICS_ROWS)

    table = await reader.load("sheet-a")

    assert table.metrics == ("margin_pct", "target_cpa", "note")
    assert table.value(entity_id="120001", entity_name="", metric="custom:margin_pct") == 35.0
    assert table.value(entity_id="120001", entity_name="", metric="target_cpa") == 1200.0
    assert table.value(entity_id="120003", entity_name="", metric="target_cpa") == 7.0
    assert table.value(entity_id="120002", entity_name="", metric="target_cpa") is None
    assert table.value(entity_id="120003", entity_name="", metric="margin_pct") is None
    assert table.value(entity_id="404", entity_name="", metric="margin_pct") is None
    assert simulator.store.counts["token"] == 1  # the JWT grant went to the key's token_uri


async def test_load_by_name(reader: SheetsReader, simulator: Simulator) -> None:
    simulator.store.put("sheet-a", "Metrics", METRICS_ROWS)

    table = await reader.load("sheet-a", key="name")

    assert table.value(entity_id="", entity_name="WINTER PROMO", metric="margin_pct") == 12.5


async def test_worksheet_chosen_by_title(reader: SheetsReader, simulator: Simulator) -> None:
    simulator.store.put("sheet-a", "Metrics", METRICS_ROWS)
    simulator.store.put("sheet-a", "Q4 targets", [["id", "Target CPA"], ["120001", "950"]])

    first = await reader.load("sheet-a")
    q4 = await reader.load("sheet-a", worksheet="Q4 targets")

    assert first.value(entity_id="120001", entity_name="", metric="target_cpa") == 1200.0
    assert q4.value(entity_id="120001", entity_name="", metric="target_cpa") == 950.0
    assert "GET /v4/spreadsheets/sheet-a/values/%27Q4%20targets%27" in simulator.store.requests


async def test_one_values_read_per_load(reader: SheetsReader, simulator: Simulator) -> None:
    simulator.store.put("sheet-a", "Metrics", METRICS_ROWS)

    await reader.load("sheet-a")
    first_load = list(simulator.store.requests)
    simulator.store.put("sheet-a", "Metrics", [["id", "Margin %"], ["120001", "40%"]])
    table = await reader.load("sheet-a")

    assert first_load == [
        "POST /token",
        "GET /v4/spreadsheets/sheet-a?includeGridData=false",  # open_by_key
        "GET /v4/spreadsheets/sheet-a?includeGridData=false",  # first worksheet
        "GET /v4/spreadsheets/sheet-a/values/%27Metrics%27",
    ]
    # The second load re-reads the values (fresh data) and nothing else.
    assert list(simulator.store.requests)[len(first_load) :] == [
        "GET /v4/spreadsheets/sheet-a/values/%27Metrics%27"
    ]
    assert table.value(entity_id="120001", entity_name="", metric="margin_pct") == 40.0


async def test_cache_reuses_a_table_until_it_expires(
    credentials_file: Path, simulator: Simulator
) -> None:
    simulator.store.put("sheet-a", "Metrics", METRICS_ROWS)
    now = [1000.0]
    sheets = SheetsReader(
        credentials_file=credentials_file,
        api_url=simulator.base_url,
        cache_s=60,
        call_interval_s=0,
    )
    sheets._clock = lambda: now[0]
    try:
        tables = await asyncio.gather(*(sheets.load("sheet-a") for _ in range(3)))
        assert simulator.store.counts["values.get"] == 1
        assert tables[0] is tables[1] is tables[2]

        other_key = await sheets.load("sheet-a", key="name")  # a different cache entry
        assert other_key is not tables[0]
        assert simulator.store.counts["values.get"] == 2

        now[0] += 61
        assert await sheets.load("sheet-a") is not tables[0]
        assert simulator.store.counts["values.get"] == 3
    finally:
        await sheets.close()


async def test_unknown_spreadsheet_says_what_to_do(reader: SheetsReader) -> None:
    with pytest.raises(SheetsError) as caught:
        await reader.load("does-not-exist")

    message = str(caught.value)
    assert "does-not-exist" in message
    assert "not found" in message
    assert ACCOUNT_EMAIL in message


async def test_private_spreadsheet_asks_to_share_it(
    reader: SheetsReader, simulator: Simulator
) -> None:
    simulator.store.put("sheet-a", "Metrics", METRICS_ROWS)
    simulator.store.set_private("sheet-a")

    with pytest.raises(SheetsError, match=f"share the sheet with {ACCOUNT_EMAIL}"):
        await reader.load("sheet-a")


async def test_sheet_made_private_after_a_load(reader: SheetsReader, simulator: Simulator) -> None:
    simulator.store.put("sheet-a", "Metrics", METRICS_ROWS)
    await reader.load("sheet-a")
    simulator.store.set_private("sheet-a")

    # gspread-asyncio has the spreadsheet cached, so the 403 comes from the values read.
    with pytest.raises(SheetsError, match=r"access denied \(403 PERMISSION_DENIED"):
        await reader.load("sheet-a")


async def test_unreachable_api_fails_fast(credentials_file: Path, simulator: Simulator) -> None:
    simulator.store.put("sheet-a", "Metrics", METRICS_ROWS)
    # Tokens still come from the simulator (token_uri); the Sheets API is a closed port.
    sheets = SheetsReader(
        credentials_file=credentials_file, api_url="http://127.0.0.1:1", call_interval_s=0
    )
    try:
        with pytest.raises(SheetsError, match=r"could not reach the Sheets API at http://127"):
            await sheets.load("sheet-a")
    finally:
        await sheets.close()


async def test_unknown_worksheet(reader: SheetsReader, simulator: Simulator) -> None:
    simulator.store.put("sheet-a", "Metrics", METRICS_ROWS)

    with pytest.raises(SheetsError, match=r"worksheet 'Nope'.*no worksheet with that title"):
        await reader.load("sheet-a", worksheet="Nope")


async def test_sheet_without_key_column(reader: SheetsReader, simulator: Simulator) -> None:
    simulator.store.put("sheet-a", "Metrics", [["Campaign", "Margin"], ["x", "1"]])

    with pytest.raises(SheetsError, match=r"spreadsheet sheet-a .*no key column"):
        await reader.load("sheet-a")


async def test_revoked_service_account(reader: SheetsReader, simulator: Simulator) -> None:
    simulator.store.put("sheet-a", "Metrics", METRICS_ROWS)
    simulator.store.revoke(ACCOUNT_EMAIL)

    with pytest.raises(SheetsError, match="could not obtain an access token"):
        await reader.load("sheet-a")


async def test_no_credentials_names_the_setting(simulator: Simulator) -> None:
    sheets = SheetsReader(credentials_file=None, api_url=simulator.base_url)

    with pytest.raises(SheetsError, match="RULEENGINE_SHEETS_CREDENTIALS_FILE"):
        await sheets.load("sheet-a")
    await sheets.close()
    assert not simulator.store.requests


async def test_unreadable_key_file_names_the_setting(tmp_path: Path) -> None:
    bad = tmp_path / "key.json"
    bad.write_text('{"type": "service_account"}')
    sheets = SheetsReader(credentials_file=bad)

    with pytest.raises(SheetsError, match="not a Google service-account JSON key"):
        await sheets.load("sheet-a")
    with pytest.raises(SheetsError, match="RULEENGINE_SHEETS_CREDENTIALS_FILE"):
        await SheetsReader(credentials_file=tmp_path / "missing.json").load("sheet-a")


async def test_access_token_is_never_logged(
    reader: SheetsReader, simulator: Simulator, caplog: pytest.LogCaptureFixture
) -> None:
    simulator.store.put("sheet-a", "Metrics", METRICS_ROWS)
    caplog.set_level(logging.DEBUG)

    await reader.load("sheet-a")

    assert "custom metrics loaded" in caplog.text
    assert "sim-" not in caplog.text  # every token the simulator issues starts so


# --- the simulator over HTTP ----------------------------------------------------------------


async def test_simulator_speaks_google_errors_and_ranges(simulator: Simulator) -> None:
    store = simulator.store
    async with aiohttp.ClientSession() as http:
        put = await http.put(
            f"{simulator.base_url}/_admin/s1",
            json={"worksheet": "Sheet 1", "values": [["id", "a", ""], ["1", "2", ""], []]},
        )
        assert put.status == 200
        base = f"{simulator.base_url}/v4/spreadsheets/s1"

        anonymous = await http.get(f"{base}/values/A1:B2")
        assert anonymous.status == 401
        assert (await anonymous.json())["error"]["status"] == "UNAUTHENTICATED"

        auth = {"Authorization": "Bearer " + store.issue_token("x@y", frozenset({"openid"}))}
        assert (await http.get(base, headers=auth)).status == 403  # insufficient scopes

        scope = frozenset({"https://www.googleapis.com/auth/spreadsheets.readonly"})
        auth = {"Authorization": "Bearer " + store.issue_token("x@y", scope)}
        values = await (await http.get(f"{base}/values/'Sheet 1'!A1:Z", headers=auth)).json()
        assert values == {
            "range": "'Sheet 1'!A1:Z1000",
            "majorDimension": "ROWS",
            "values": [["id", "a"], ["1", "2"]],
        }
        batch = await http.get(
            f"{base}/values:batchGet",
            params=[("ranges", "B1:B"), ("ranges", "'Sheet 1'"), ("majorDimension", "COLUMNS")],
            headers=auth,
        )
        ranges = (await batch.json())["valueRanges"]
        assert [r["values"] for r in ranges] == [[["a", "2"]], [["id", "1"], ["a", "2"]]]

        bad_range = await http.get(f"{base}/values/Nope!A1", headers=auth)
        assert bad_range.status == 400
        missing = await http.get(f"{simulator.base_url}/v4/spreadsheets/zz", headers=auth)
        assert (await missing.json())["error"] == {
            "code": 404,
            "message": "Requested entity was not found.",
            "status": "NOT_FOUND",
        }
