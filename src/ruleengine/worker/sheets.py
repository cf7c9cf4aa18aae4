"""Custom metrics (``custom:<name>``) read from a Google Sheet through gspread-asyncio.

A worker job calls :meth:`SheetsReader.load` once, then looks values up in the
returned :class:`~ruleengine.rules.language.metric_table.CustomMetricTable` for every entity it
evaluates — one read of the sheet per job however many campaigns it holds. The
sheet's layout and how cells become numbers are :mod:`ruleengine.rules.language.metric_table`'s.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import gspread
import gspread_asyncio
import requests
from google.auth.exceptions import GoogleAuthError
from google.oauth2 import service_account
from requests.adapters import HTTPAdapter
from requests.utils import get_environ_proxies

from ruleengine.rules.language.metric_table import CustomMetricTable, KeyKind, SheetsError

logger = logging.getLogger(__name__)

GOOGLE_SHEETS_URL: Final = "https://sheets.googleapis.com"
# Read-only: the engine never writes to a sheet, so its key should not be able to.
SCOPES: Final = ("https://www.googleapis.com/auth/spreadsheets.readonly",)
CREDENTIALS_SETTING: Final = "RULEENGINE_SHEETS_CREDENTIALS_FILE"


class _EndpointOverrideAdapter(HTTPAdapter):
    """A requests transport that sends ``https://sheets.googleapis.com/...`` to another base URL.

    Mounted on the gspread session for the Google prefix only, so token exchange
    (which goes to the key file's ``token_uri``) and anything else are untouched.
    """

    def __init__(self, api_url: str) -> None:
        super().__init__()
        self._api_url = api_url

    def send(
        self,
        request: requests.PreparedRequest,
        stream: bool = False,
        timeout: float | tuple[float | None, float | None] | None = None,
        verify: bool | str = True,
        cert: str | tuple[str, str] | None = None,
        proxies: dict[str, str] | None = None,
    ) -> requests.Response:
        url = request.url or ""
        if url.startswith(GOOGLE_SHEETS_URL):
            request.url = self._api_url + url[len(GOOGLE_SHEETS_URL) :]
            # requests picked proxies (and NO_PROXY exemptions) for Google's host; pick
            # them again for the host the request really goes to.
            proxies = get_environ_proxies(request.url)
        return super().send(request, stream, timeout, verify, cert, proxies)


class _FailFastClientManager(gspread_asyncio.AsyncioGspreadClientManager):  # type: ignore[misc]
    """gspread-asyncio's manager, minus its default of retrying 429/5xx and network errors forever.

    A worker job must finish: the next scheduled run is the retry (as for Graph reads).
    """

    async def handle_gspread_error(self, e: Exception, method: Any, args: Any, kwargs: Any) -> None:
        raise e

    async def handle_requests_error(
        self, e: Exception, method: Any, args: Any, kwargs: Any
    ) -> None:
        raise e


@dataclass(frozen=True)
class _CacheEntry:
    table: CustomMetricTable
    expires_at: float  # on the reader's monotonic clock


_CacheKey = tuple[str, str | None, KeyKind]


class SheetsReader:
    """Reads custom-metric tables from Google Sheets with a service account.

    One reader per process; it keeps one authorised gspread-asyncio client and
    re-authenticates as tokens age. Calls to Google are serialised and spaced by
    ``call_interval_s`` (Google's per-user read quota is about one a second).

    Args:
        credentials_file: The service account's JSON key (setting
            ``RULEENGINE_SHEETS_CREDENTIALS_FILE``). Its ``token_uri`` is where
            tokens are requested. None: :meth:`load` raises :class:`SheetsError`.
        api_url: Base URL replacing ``https://sheets.googleapis.com`` for every
            Sheets request (setting ``RULEENGINE_SHEETS_API_URL``), e.g. a proxy
            or the sandbox's ``http://127.0.0.1:8081/sheets``.
        cache_s: Reuse a loaded table for this many seconds (per spreadsheet,
            worksheet and key kind); 0 reads the sheet on every :meth:`load`.
        timeout_s: Timeout of each HTTP request to the Sheets API.
        call_interval_s: Minimum gap between two Sheets API calls.
    """

    def __init__(
        self,
        *,
        credentials_file: Path | None,
        api_url: str | None = None,
        cache_s: float = 0.0,
        timeout_s: float = 30.0,
        call_interval_s: float = 1.1,
    ) -> None:
        self._credentials_file = credentials_file
        self._api_url = api_url.rstrip("/") if api_url else None
        self._cache_s = cache_s
        self._timeout_s = timeout_s
        self._call_interval_s = call_interval_s
        self._manager: _FailFastClientManager | None = None
        self._client: gspread_asyncio.AsyncioGspreadClient | None = None
        self._account_email: str | None = None
        self._cache: dict[_CacheKey, _CacheEntry] = {}
        self._locks: dict[_CacheKey, asyncio.Lock] = {}
        self._clock = time.monotonic  # replaceable in tests

    async def load(
        self, spreadsheet_id: str, *, worksheet: str | None = None, key: KeyKind = "id"
    ) -> CustomMetricTable:
        """Read one worksheet into a :class:`CustomMetricTable`.

        Args:
            spreadsheet_id: The id in the sheet's URL (``/spreadsheets/d/<id>/edit``).
            worksheet: The tab's title (case-sensitive); None for the first tab.
            key: Match rows on the entity ``"id"`` or its ``"name"``.

        Raises:
            SheetsError: No credentials, authentication failed, the spreadsheet or
                tab does not exist or is not shared with the service account, the
                API could not be reached, or the sheet has no key column.
        """
        cache_key: _CacheKey = (spreadsheet_id, worksheet, key)
        # One load per key at a time, so concurrent jobs share one read of a cached sheet.
        async with self._locks.setdefault(cache_key, asyncio.Lock()):
            entry = self._cache.get(cache_key)
            if entry is not None and entry.expires_at > self._clock():
                return entry.table
            table = await self._read_table(spreadsheet_id, worksheet, key)
            if self._cache_s > 0:
                self._cache[cache_key] = _CacheEntry(table, self._clock() + self._cache_s)
            return table

    async def close(self) -> None:
        """Close the HTTP session and forget cached tables; a later :meth:`load` starts afresh."""
        if self._client is not None:
            self._client.gc.http_client.session.close()
        self._client = None
        self._manager = None
        self._cache.clear()

    async def _read_table(
        self, spreadsheet_id: str, worksheet: str | None, key: KeyKind
    ) -> CustomMetricTable:
        where = _describe(spreadsheet_id, worksheet)
        try:
            rows = await self._fetch_rows(spreadsheet_id, worksheet)
        except (
            gspread.exceptions.GSpreadException,
            PermissionError,  # what gspread raises for a 403 on open_by_key
            GoogleAuthError,
            requests.RequestException,
        ) as exc:
            raise self._explain(exc, where) from exc
        try:
            table = CustomMetricTable(rows, key=key)
        except SheetsError as exc:
            raise SheetsError(f"{where}: {exc}") from exc
        logger.info(
            "custom metrics loaded from %s: %d rows, metrics: %s",
            where,
            len(table),
            ", ".join(table.metrics) or "none",
        )
        return table

    async def _fetch_rows(self, spreadsheet_id: str, worksheet: str | None) -> list[list[Any]]:
        """The worksheet's formatted values; gspread-asyncio caches the spreadsheet and tab.

        The first load of a spreadsheet costs two metadata reads and one values read;
        later loads through the same client cost the values read only.
        """
        client = await self._authorized_client()
        spreadsheet = await client.open_by_key(spreadsheet_id)
        if worksheet is None:
            tab = await spreadsheet.get_worksheet(0)
        else:
            tab = await spreadsheet.worksheet(worksheet)
        rows: list[list[Any]] = await tab.get_values()
        return rows

    async def _authorized_client(self) -> gspread_asyncio.AsyncioGspreadClient:
        if self._credentials_file is None:
            raise SheetsError(
                "custom metrics need a Google service account, and the setting "
                f"{CREDENTIALS_SETTING} is missing: set it to the path of the service "
                "account's JSON key file"
            )
        if self._manager is None:
            self._manager = _FailFastClientManager(
                self._load_credentials,
                gspread_delay=self._call_interval_s,
                gspread_timeout=self._timeout_s,
            )
        client = await self._manager.authorize()
        if client is not self._client:
            self._adopt(client)
        return client

    def _adopt(self, client: gspread_asyncio.AsyncioGspreadClient) -> None:
        """Take a freshly authorised client into use: route its session, close the old one."""
        if self._api_url is not None:
            adapter = _EndpointOverrideAdapter(self._api_url)
            client.gc.http_client.session.mount(GOOGLE_SHEETS_URL + "/", adapter)
        if self._client is not None:
            self._client.gc.http_client.session.close()
        self._client = client

    def _load_credentials(self) -> service_account.Credentials:
        """Read the key file (gspread-asyncio calls this in a thread at each re-authentication)."""
        path = self._credentials_file
        try:
            # google-auth leaves this classmethod unannotated; it returns Credentials.
            credentials: service_account.Credentials = (
                service_account.Credentials.from_service_account_file(  # type: ignore[no-untyped-call]
                    str(path), scopes=SCOPES
                )
            )
        except OSError as exc:
            raise SheetsError(
                f"cannot read the service-account key file {path} ({exc.strerror}); "
                f"check {CREDENTIALS_SETTING}"
            ) from exc
        except ValueError as exc:
            raise SheetsError(
                f"{path} is not a Google service-account JSON key ({exc}); create a key for "
                f"the service account and point {CREDENTIALS_SETTING} at it"
            ) from exc
        self._account_email = credentials.service_account_email
        return credentials

    def _explain(self, exc: Exception, where: str) -> SheetsError:
        """A SheetsError saying what went wrong with ``where`` and what to do about it."""
        account = self._account_email or "the service account (client_email in the key file)"
        share = f"share the sheet with {account} (Viewer is enough)"
        if isinstance(exc, gspread.exceptions.APIError):
            return SheetsError(_explain_api_error(exc, where, share))
        if isinstance(exc, gspread.exceptions.SpreadsheetNotFound):
            return SheetsError(
                f"{where}: spreadsheet not found (404); check the id (the part of the sheet's "
                f"URL between /d/ and /edit) and {share}"
            )
        if isinstance(exc, PermissionError):
            return SheetsError(f"{where}: access denied (403); {share}")
        if isinstance(exc, gspread.exceptions.WorksheetNotFound):
            return SheetsError(
                f"{where}: the spreadsheet has no worksheet with that title (titles are "
                "case-sensitive); fix the worksheet name or rename the tab"
            )
        if isinstance(exc, GoogleAuthError):
            return SheetsError(
                f"{where}: could not obtain an access token for {account} ({exc}); check that "
                f"the key in {CREDENTIALS_SETTING} is current and the account exists"
            )
        if isinstance(exc, requests.RequestException):
            return SheetsError(
                f"{where}: could not reach the Sheets API at "
                f"{self._api_url or GOOGLE_SHEETS_URL} ({type(exc).__name__})"
            )
        return SheetsError(f"{where}: {exc}")


def _describe(spreadsheet_id: str, worksheet: str | None) -> str:
    tab = "first worksheet" if worksheet is None else f"worksheet {worksheet!r}"
    return f"spreadsheet {spreadsheet_id} ({tab})"


def _explain_api_error(exc: gspread.exceptions.APIError, where: str, share: str) -> str:
    """Words for an error answered by the Sheets API itself."""
    status = str(exc.error.get("status", ""))
    detail = f"{exc.code} {status}: {exc.error.get('message', '')}".strip()
    if exc.code == 401:
        return (
            f"{where}: authentication rejected ({detail}); check the service-account key "
            f"in {CREDENTIALS_SETTING} and that the Sheets API is enabled for its project"
        )
    if exc.code == 403:
        return f"{where}: access denied ({detail}); {share}"
    if exc.code == 404:
        return f"{where}: not found ({detail}); check the spreadsheet id and {share}"
    if exc.code == 429:
        return f"{where}: rate-limited by the Sheets API ({detail}); raise the cache time"
    return f"{where}: the Sheets API answered {detail}"
