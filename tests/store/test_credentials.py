"""Ad-account tokens: encrypted at rest, resolved by reference, never listed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from cryptography.fernet import Fernet

from ruleengine import constants as c
from ruleengine.errors import (
    ConfigurationError,
    CredentialsError,
    NotFoundError,
    TokenUnusableError,
)
from ruleengine.settings import Settings
from ruleengine.store.credentials import (
    CredentialStore,
    TokenState,
    fingerprint,
    load_key,
    token_ref,
)
from ruleengine.store.db import Database

TOKEN = "EAABsbCS1iHgBAKZCZBq7ZCz0secrettokenvalue1234567890"
NOW = datetime(2026, 12, 1, tzinfo=UTC)


async def test_token_round_trip_without_plaintext_in_the_database(db: Database) -> None:
    store = CredentialStore(db, Fernet.generate_key())
    account = await store.add("act_1001", TOKEN, now=NOW, name="Shop", currency="usd")
    assert await store.token(token_ref("act_1001")) == TOKEN
    raw = await db[c.ACCOUNTS].find_one({"_id": "act_1001"})
    assert raw is not None
    assert TOKEN.encode() not in repr(raw).encode()
    assert TOKEN not in account.model_dump_json()
    assert account.currency == "USD"
    assert [a.id for a in await store.all()] == ["act_1001"]


async def test_wrong_key_and_unknown_account_say_what_to_do(db: Database) -> None:
    await CredentialStore(db, Fernet.generate_key()).add("act_1", TOKEN, now=NOW)
    other = CredentialStore(db, Fernet.generate_key())
    with pytest.raises(CredentialsError, match="Re-add the account"):
        await other.token(token_ref("act_1"))
    with pytest.raises(CredentialsError, match="not registered"):
        await other.token(token_ref("act_2"))


def test_key_file_is_created_only_when_asked(settings: Settings) -> None:
    bare = settings.model_copy(update={"token_encryption_key": None})
    with pytest.raises(ConfigurationError, match="RULEENGINE_TOKEN_ENCRYPTION_KEY"):
        load_key(bare)
    key = load_key(bare, create=True)
    assert load_key(bare) == key
    assert (bare.data_dir / "token-encryption.key").stat().st_mode & 0o777 == 0o600


async def test_rotating_a_token_keeps_the_accounts_timezone_and_currency(db: Database) -> None:
    store = CredentialStore(db, Fernet.generate_key())
    await store.add("act_9", TOKEN, now=NOW, name="Tokyo", timezone="Asia/Tokyo", currency="jpy")
    rotated = await store.add("act_9", TOKEN + "new", now=NOW)
    assert (rotated.name, rotated.timezone, rotated.currency) == ("Tokyo", "Asia/Tokyo", "JPY")
    assert await store.token(token_ref("act_9")) == TOKEN + "new"
    fresh = await store.add("act_10", TOKEN, now=NOW)
    assert (fresh.name, fresh.timezone, fresh.currency) == ("act_10", "UTC", "USD")


async def test_a_refused_token_is_kept_once_and_cleared_by_a_new_one(db: Database) -> None:
    store = CredentialStore(db, Fernet.generate_key())
    await store.add("act_1001", TOKEN, now=NOW)
    ref = token_ref("act_1001")
    state = TokenState(
        status="expired",
        code=190,
        subcode=463,
        message="expired",
        at=NOW,
        token_fingerprint=fingerprint(TOKEN),
    )
    stale = state.model_copy(update={"token_fingerprint": fingerprint("an older token")})
    assert not await store.mark_token("act_1001", stale)  # a report about a replaced token
    assert await store.usable_token(ref) == TOKEN
    assert await store.mark_token("act_1001", state)
    later = state.model_copy(update={"status": "invalid", "at": NOW + timedelta(hours=1)})
    assert not await store.mark_token("act_1001", later)  # the first refusal stays
    with pytest.raises(TokenUnusableError, match=r"expired \(code 190/463\).*accounts add"):
        await store.usable_token(ref)
    assert [a.token_state for a in await store.unusable()] == [state]
    assert (await store.get("act_1001")).token_state == state
    await store.add("act_1001", TOKEN, now=NOW)  # the same token, its permission restored
    assert await store.usable_token(ref) == TOKEN
    assert await store.unusable() == []


async def test_a_currency_mismatch_is_kept_once_and_only_against_the_values_it_was_found_on(
    db: Database,
) -> None:
    store = CredentialStore(db, Fernet.generate_key())
    wrong = await store.add("act_1004", TOKEN, now=NOW, currency="USD", timezone="Asia/Tokyo")
    assert wrong.disagreement(currency="usd", timezone="Asia/Tokyo", now=NOW) is None
    assert wrong.disagreement(currency=None, timezone=None, now=NOW) is None  # Meta said nothing
    state = wrong.disagreement(currency="JPY", timezone="Asia/Tokyo", now=NOW)
    assert state is not None
    assert (state.reason, state.meta_currency) == ("account_currency_mismatch", "JPY")
    assert "currency USD is registered, Meta's is JPY" in state.describe()
    assert "timezone" not in state.describe()

    fixed_meanwhile = state.model_copy(update={"currency": "EUR"})
    assert not await store.mark_currency("act_1004", fixed_meanwhile)
    assert await store.mark_currency("act_1004", state)
    later = state.model_copy(update={"at": NOW + timedelta(hours=1)})
    assert not await store.mark_currency("act_1004", later)  # the first finding stays
    marked = await store.get("act_1004")
    assert marked.currency_state == state
    assert [a.id for a in await store.mismatched()] == ["act_1004"]
    # found again later: the state keeps when it was first seen
    again = marked.disagreement(currency="JPY", timezone=None, now=NOW + timedelta(days=1))
    assert again is not None and again.at == NOW

    await store.add("act_1004", TOKEN + "new", now=NOW)  # a new token alone changes nothing
    assert (await store.get("act_1004")).currency_state == state
    assert not await store.clear_currency("act_1004", currency="EUR", timezone="Asia/Tokyo")
    fixed = await store.set_currency("act_1004", currency="jpy", timezone="Asia/Tokyo", now=NOW)
    assert (fixed.currency, fixed.currency_state) == ("JPY", None)
    assert await store.mismatched() == []


async def test_a_registered_currency_or_timezone_clears_a_mismatch(db: Database) -> None:
    store = CredentialStore(db, Fernet.generate_key())
    wrong = await store.add("act_1001", TOKEN, now=NOW, timezone="UTC")
    state = wrong.disagreement(currency="USD", timezone="America/New_York", now=NOW)
    assert state is not None and state.reason == "account_timezone_mismatch"
    assert await store.mark_currency("act_1001", state)
    assert await store.clear_currency("act_1001", currency="USD", timezone="UTC")
    assert await store.mark_currency("act_1001", state)
    again = await store.add("act_1001", TOKEN, now=NOW, timezone="America/New_York")
    assert again.currency_state is None
    with pytest.raises(NotFoundError):
        await store.set_currency("act_9", currency="USD", timezone="UTC", now=NOW)
    with pytest.raises(CredentialsError, match="timezone"):
        await store.set_currency("act_1001", currency="USD", timezone="Mars/Olympus", now=NOW)
