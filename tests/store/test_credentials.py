"""Ad-account tokens: encrypted at rest, resolved by reference, never listed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from cryptography.fernet import Fernet

from ruleengine import constants as c
from ruleengine.errors import ConfigurationError, CredentialsError, TokenUnusableError
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
