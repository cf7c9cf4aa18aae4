"""A local simulator of the Google Sheets v4 API and Google's OAuth token endpoint.

It serves exactly what :class:`ruleengine.worker.sheets.SheetsReader` (through gspread,
gspread-asyncio and google-auth) calls, over real HTTP, so the real client code
runs against it unchanged. Mount it on any aiohttp app with
:func:`add_sheets_routes` (the all-in-one demo puts it on the Graph sandbox under
``/sheets``) or run it alone with :func:`create_sheets_app`.

Point a service-account JSON's ``token_uri`` at ``{base}/sheets/token`` and
``RULEENGINE_SHEETS_API_URL`` at ``{base}/sheets``.

Served under the prefix:

- ``POST /token`` — the JWT-bearer grant; any well-formed assertion is accepted
  (its signature is not checked) unless its issuer was revoked.
- ``GET /v4/spreadsheets/{id}`` — spreadsheet metadata.
- ``GET /v4/spreadsheets/{id}/values/{range}`` and ``GET …/values:batchGet``.
- ``PUT /_admin/{id}`` (``{"worksheet", "values", "private"?}``), ``DELETE /_admin``
  and ``GET /_admin/stats`` — unauthenticated test and demo helpers.

Errors have Google's shape: ``{"error": {"code", "message", "status"}}``.

(Over 400 lines: it is a whole second simulated service — values, grid bounds, the
token endpoint — kept apart from the Graph modules.)
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import secrets
from collections import Counter, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

JWT_BEARER_GRANT = "urn:ietf:params:oauth:grant-type:jwt-bearer"
TOKEN_LIFETIME_S = 3600
SHEETS_SCOPES = frozenset(
    {
        "https://www.googleapis.com/auth/spreadsheets",
        "https://www.googleapis.com/auth/spreadsheets.readonly",
        "https://www.googleapis.com/auth/drive",
        "https://www.googleapis.com/auth/drive.readonly",
    }
)
# Google's grid never reports fewer than this many rows and columns for a new sheet.
MIN_GRID_ROWS = 1000
MIN_GRID_COLUMNS = 26

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass
class Worksheet:
    """One tab: its stable ``sheet_id``, title and cell values (strings, row-major)."""

    sheet_id: int
    title: str
    values: list[list[str]]

    @property
    def row_count(self) -> int:
        """Rows of the grid, as Google reports them (at least 1000)."""
        return max(MIN_GRID_ROWS, len(self.values))

    @property
    def column_count(self) -> int:
        """Columns of the grid, as Google reports them (at least 26)."""
        return max(MIN_GRID_COLUMNS, *(len(row) for row in self.values), 0)


@dataclass
class Spreadsheet:
    """A spreadsheet: title, tabs in order, and whether the service account may read it."""

    spreadsheet_id: str
    title: str
    worksheets: list[Worksheet] = field(default_factory=list)
    private: bool = False

    def worksheet(self, title: str) -> Worksheet | None:
        """The tab called ``title``, or None."""
        return next((ws for ws in self.worksheets if ws.title == title), None)


@dataclass
class SheetsStore:
    """The simulator's state: spreadsheets, issued tokens and request counters.

    ``counts`` counts requests by kind (``token``, ``spreadsheets.get``,
    ``values.get``, ``values.batchGet``); ``requests`` keeps the last 1,000 as
    ``"METHOD /path?query"`` strings (paths are relative to the prefix).
    """

    spreadsheets: dict[str, Spreadsheet] = field(default_factory=dict)
    counts: Counter[str] = field(default_factory=Counter)
    requests: deque[str] = field(default_factory=lambda: deque(maxlen=1000))
    revoked_clients: set[str] = field(default_factory=set)
    _tokens: dict[str, tuple[str, frozenset[str]]] = field(default_factory=dict, repr=False)
    _next_sheet_id: int = 0

    def put(self, spreadsheet_id: str, worksheet: str, values: list[list[str]]) -> None:
        """Create or replace the tab ``worksheet`` of ``spreadsheet_id`` (created if new).

        A new tab is added after the existing ones; a replaced tab keeps its position and id.
        """
        sheet = self.spreadsheets.setdefault(
            spreadsheet_id, Spreadsheet(spreadsheet_id, f"Spreadsheet {spreadsheet_id}")
        )
        rows = [[str(cell) for cell in row] for row in values]
        existing = sheet.worksheet(worksheet)
        if existing is not None:
            existing.values = rows
            return
        sheet.worksheets.append(Worksheet(self._next_sheet_id, worksheet, rows))
        self._next_sheet_id += 1

    def set_private(self, spreadsheet_id: str, private: bool = True) -> None:
        """Make a spreadsheet answer 403, as one not shared with the service account does."""
        self.spreadsheets[spreadsheet_id].private = private

    def revoke(self, client_email: str) -> None:
        """Refuse token exchange for ``client_email`` and invalidate its tokens."""
        self.revoked_clients.add(client_email)
        self._tokens = {t: v for t, v in self._tokens.items() if v[0] != client_email}

    def clear(self) -> None:
        """Forget every spreadsheet, token, revocation and counter."""
        self.spreadsheets.clear()
        self.counts.clear()
        self.requests.clear()
        self.revoked_clients.clear()
        self._tokens.clear()

    def issue_token(self, client_email: str, scopes: frozenset[str]) -> str:
        """Mint an access token for ``client_email`` with ``scopes``."""
        token = "sim-" + secrets.token_urlsafe(24)
        self._tokens[token] = (client_email, scopes)
        return token

    def token_scopes(self, token: str) -> frozenset[str] | None:
        """The scopes granted to ``token``, or None when it was never issued (or revoked)."""
        entry = self._tokens.get(token)
        return None if entry is None else entry[1]


class GoogleApiError(Exception):
    """An error answered in Google's JSON shape."""

    def __init__(self, code: int, status: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.status = status
        self.message = message

    def response(self) -> web.Response:
        """The error as Google sends it."""
        body = {"error": {"code": self.code, "message": self.message, "status": self.status}}
        return web.json_response(body, status=self.code)


# --- A1 notation -------------------------------------------------------------------------

_CELL_RE = re.compile(r"^(?P<col>[A-Za-z]{0,3})(?P<row>[0-9]*)$")


@dataclass(frozen=True)
class GridBounds:
    """A rectangle of a sheet, 0-based, end-exclusive; None means open-ended."""

    row_start: int = 0
    row_end: int | None = None
    col_start: int = 0
    col_end: int | None = None


def column_index(letters: str) -> int:
    """``A`` → 0, ``Z`` → 25, ``AA`` → 26."""
    index = 0
    for letter in letters.upper():
        index = index * 26 + (ord(letter) - ord("A") + 1)
    return index - 1


def column_letters(index: int) -> str:
    """0 → ``A``, 26 → ``AA``."""
    letters = ""
    index += 1
    while index:
        index, rest = divmod(index - 1, 26)
        letters = chr(ord("A") + rest) + letters
    return letters


def split_sheet_name(a1: str) -> tuple[str | None, str | None]:
    """Split ``'Sheet 1'!A1:B2`` into (``Sheet 1``, ``A1:B2``); either part may be absent.

    A bare unquoted word with no ``!`` is returned as the cell part; the caller
    decides whether it names a sheet. ``''`` inside quotes is an escaped quote.
    """
    if a1.startswith("'"):
        end = 1
        while True:
            end = a1.find("'", end)
            if end == -1:
                raise GoogleApiError(400, "INVALID_ARGUMENT", f"Unable to parse range: {a1}")
            if a1[end + 1 : end + 2] != "'":
                break
            end += 2
        name = a1[1:end].replace("''", "'")
        rest = a1[end + 1 :]
        return name, (rest[1:] if rest.startswith("!") else None) or None
    if "!" in a1:
        name, cells = a1.rsplit("!", 1)
        return name, cells or None
    return None, a1


def parse_cells(cells: str) -> GridBounds | None:
    """Parse ``A1``, ``A1:Z``, ``A:C``, ``2:5`` into bounds; None when it is not A1 notation."""
    start, _, end = cells.partition(":")
    first, last = _CELL_RE.match(start), _CELL_RE.match(end or start)
    if first is None or last is None or not start or (":" in cells and not end):
        return None
    return GridBounds(
        row_start=int(first["row"]) - 1 if first["row"] else 0,
        row_end=int(last["row"]) if last["row"] else None,
        col_start=column_index(first["col"]) if first["col"] else 0,
        col_end=column_index(last["col"]) + 1 if last["col"] else None,
    )


def resolve_range(sheet: Spreadsheet, a1: str) -> tuple[Worksheet, GridBounds]:
    """The tab and rectangle an A1 range names, as the Sheets API resolves them.

    A range without a sheet name means the first visible sheet, unless the bare
    text is itself the title of a sheet.
    """
    name, cells = split_sheet_name(a1)
    if name is None and cells is not None and sheet.worksheet(cells) is not None:
        name, cells = cells, None
    if name is None:
        worksheet = sheet.worksheets[0] if sheet.worksheets else None
    else:
        worksheet = sheet.worksheet(name)
    bounds = GridBounds() if cells is None else parse_cells(cells)
    if worksheet is None or bounds is None:
        raise GoogleApiError(400, "INVALID_ARGUMENT", f"Unable to parse range: {a1}")
    return worksheet, bounds


def quoted_title(title: str) -> str:
    """A sheet title as Google writes it in a range: quoted only when it must be."""
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", title):
        return title
    return "'" + title.replace("'", "''") + "'"


def value_range(worksheet: Worksheet, bounds: GridBounds, *, by_columns: bool) -> dict[str, Any]:
    """The ``ValueRange`` body for ``bounds`` of ``worksheet``; trailing empties are trimmed."""
    row_end = min(bounds.row_end or worksheet.row_count, worksheet.row_count)
    col_end = min(bounds.col_end or worksheet.column_count, worksheet.column_count)
    grid = [row[bounds.col_start : col_end] for row in worksheet.values[bounds.row_start : row_end]]
    if by_columns:
        width = max((len(row) for row in grid), default=0)
        grid = [[row[c] if c < len(row) else "" for row in grid] for c in range(width)]
    grid = _trim(grid)
    a1 = (
        f"{quoted_title(worksheet.title)}!{column_letters(bounds.col_start)}"
        f"{bounds.row_start + 1}:{column_letters(col_end - 1)}{row_end}"
    )
    body: dict[str, Any] = {"range": a1, "majorDimension": "COLUMNS" if by_columns else "ROWS"}
    if grid:  # Google leaves "values" out entirely for an empty range
        body["values"] = grid
    return body


def _trim(grid: list[list[str]]) -> list[list[str]]:
    """Drop empty cells at the end of each line and empty lines at the end, as Google does."""
    lines = []
    for line in grid:
        end = len(line)
        while end and line[end - 1] == "":
            end -= 1
        lines.append(line[:end])
    while lines and not lines[-1]:
        lines.pop()
    return lines


# --- HTTP handlers -----------------------------------------------------------------------


def _decode_jwt_claims(assertion: str) -> dict[str, Any]:
    """The claims of a JWT, unverified: the simulator trusts whoever holds a key file."""
    try:
        payload = assertion.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError, binascii.Error) as exc:
        raise ValueError("assertion is not a JWT") from exc
    if not isinstance(claims, dict) or not claims.get("iss") or not claims.get("scope"):
        raise ValueError("assertion lacks iss or scope")
    return claims


class _SheetsHandlers:
    """The request handlers, bound to one store."""

    def __init__(self, store: SheetsStore, prefix: str) -> None:
        self.store = store
        self.prefix = prefix

    def _record(self, kind: str, request: web.Request) -> None:
        self.store.counts[kind] += 1
        path = request.rel_url.raw_path_qs.removeprefix(self.prefix)
        self.store.requests.append(f"{request.method} {path}")

    async def token(self, request: web.Request) -> web.Response:
        self._record("token", request)
        form = await request.post()
        if form.get("grant_type") != JWT_BEARER_GRANT:
            return _oauth_error("unsupported_grant_type", "Invalid grant_type.")
        try:
            claims = _decode_jwt_claims(str(form.get("assertion", "")))
        except ValueError as exc:
            return _oauth_error("invalid_grant", f"Invalid JWT: {exc}.")
        client = str(claims["iss"])
        if client in self.store.revoked_clients:
            return _oauth_error("invalid_grant", "Invalid grant: account not found")
        token = self.store.issue_token(client, frozenset(str(claims["scope"]).split()))
        return web.json_response(
            {"access_token": token, "expires_in": TOKEN_LIFETIME_S, "token_type": "Bearer"}
        )

    def _spreadsheet(self, request: web.Request) -> Spreadsheet:
        """Authenticate the request and find its spreadsheet, or raise Google's error."""
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        scopes = self.store.token_scopes(token) if scheme.lower() == "bearer" else None
        if scopes is None:
            raise GoogleApiError(
                401,
                "UNAUTHENTICATED",
                "Request is missing required authentication credential. "
                "Expected OAuth 2 access token, login cookie or other valid authentication "
                "credential.",
            )
        if not scopes & SHEETS_SCOPES:
            raise GoogleApiError(
                403, "PERMISSION_DENIED", "Request had insufficient authentication scopes."
            )
        sheet = self.store.spreadsheets.get(request.match_info["id"])
        if sheet is None:
            raise GoogleApiError(404, "NOT_FOUND", "Requested entity was not found.")
        if sheet.private:
            raise GoogleApiError(403, "PERMISSION_DENIED", "The caller does not have permission")
        return sheet

    async def metadata(self, request: web.Request) -> web.Response:
        self._record("spreadsheets.get", request)
        sheet = self._spreadsheet(request)
        tabs = [
            {
                "properties": {
                    "sheetId": ws.sheet_id,
                    "title": ws.title,
                    "index": index,
                    "sheetType": "GRID",
                    "gridProperties": {"rowCount": ws.row_count, "columnCount": ws.column_count},
                }
            }
            for index, ws in enumerate(sheet.worksheets)
        ]
        return web.json_response(
            {
                "spreadsheetId": sheet.spreadsheet_id,
                "properties": {"title": sheet.title, "locale": "en_US", "timeZone": "Etc/GMT"},
                "sheets": tabs,
                "spreadsheetUrl": f"https://docs.google.com/spreadsheets/d/{sheet.spreadsheet_id}/edit",
            }
        )

    async def values_get(self, request: web.Request) -> web.Response:
        self._record("values.get", request)
        sheet = self._spreadsheet(request)
        worksheet, bounds = resolve_range(sheet, request.match_info["range"])
        by_columns = request.query.get("majorDimension", "ROWS") == "COLUMNS"
        return web.json_response(value_range(worksheet, bounds, by_columns=by_columns))

    async def values_batch_get(self, request: web.Request) -> web.Response:
        self._record("values.batchGet", request)
        sheet = self._spreadsheet(request)
        by_columns = request.query.get("majorDimension", "ROWS") == "COLUMNS"
        ranges = [
            value_range(*resolve_range(sheet, a1), by_columns=by_columns)
            for a1 in request.query.getall("ranges", [])
        ]
        return web.json_response({"spreadsheetId": sheet.spreadsheet_id, "valueRanges": ranges})

    async def admin_put(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
            worksheet, values = body["worksheet"], body["values"]
            if not isinstance(worksheet, str) or not isinstance(values, list):
                raise TypeError
            rows = [[str(cell) for cell in row] for row in values]
        except (ValueError, KeyError, TypeError):
            raise GoogleApiError(
                400, "INVALID_ARGUMENT", 'expected {"worksheet": str, "values": [[...]]}'
            ) from None
        spreadsheet_id = request.match_info["id"]
        self.store.put(spreadsheet_id, worksheet, rows)
        if "private" in body:
            self.store.set_private(spreadsheet_id, bool(body["private"]))
        return web.json_response({"ok": True})

    async def admin_clear(self, request: web.Request) -> web.Response:
        self.store.clear()
        return web.json_response({"ok": True})

    async def admin_stats(self, request: web.Request) -> web.Response:
        return web.json_response({"counts": dict(self.store.counts)})


def _oauth_error(error: str, description: str) -> web.Response:
    """An OAuth 2 token-endpoint error (RFC 6749 §5.2), which is not Google's API error shape."""
    return web.json_response({"error": error, "error_description": description}, status=400)


def _google_errors(handler: Handler) -> Handler:
    """Turn a :class:`GoogleApiError` raised by ``handler`` into Google's JSON error."""

    async def wrapped(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except GoogleApiError as exc:
            return exc.response()

    return wrapped


def add_sheets_routes(app: web.Application, store: SheetsStore, *, prefix: str = "/sheets") -> None:
    """Serve the Sheets v4 simulator backed by ``store`` on ``app`` under ``prefix``.

    Args:
        app: The application to add routes to (not yet started).
        store: Where spreadsheets, tokens and counters live.
        prefix: Path prefix, e.g. ``/sheets``; ``""`` serves at the root.
    """
    prefix = prefix.rstrip("/")
    h = _SheetsHandlers(store, prefix)
    spreadsheet = prefix + "/v4/spreadsheets/{id}"
    routes: list[tuple[str, str, Handler]] = [
        ("POST", prefix + "/token", h.token),
        ("GET", spreadsheet, h.metadata),
        # Registered before the catch-all range route so ":batchGet" is never read as a range.
        ("GET", spreadsheet + "/values:batchGet", h.values_batch_get),
        ("GET", spreadsheet + "/values/{range:.+}", h.values_get),
        ("PUT", prefix + "/_admin/{id}", h.admin_put),
        ("DELETE", prefix + "/_admin", h.admin_clear),
        ("GET", prefix + "/_admin/stats", h.admin_stats),
    ]
    for method, path, handler in routes:
        app.router.add_route(method, path, _google_errors(handler))


def create_sheets_app(store: SheetsStore | None = None) -> web.Application:
    """A standalone app serving the simulator under ``/sheets``.

    Args:
        store: The store to serve; a new empty one when None.
    """
    app = web.Application()
    add_sheets_routes(app, store if store is not None else SheetsStore())
    return app
