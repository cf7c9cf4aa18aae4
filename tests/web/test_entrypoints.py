"""``python -m ruleengine.web`` and the aiohttp-devtools entry, as separate processes."""

from __future__ import annotations

import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import orjson
from web_helpers import API_TOKEN

from flow import process_env
from ruleengine.settings import Settings
from ruleengine.store.db import Database

ROOT = Path(__file__).resolve().parents[2]


def _env(settings: Settings) -> dict[str, str]:
    return process_env(settings, api_token=API_TOKEN, web_port="0")


def test_help_describes_the_command() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ruleengine.web", "--help"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0
    assert "--port" in result.stdout
    assert "RULEENGINE_API_TOKEN" in result.stdout


def test_serves_then_exits_0_on_sigterm(settings: Settings, db: Database) -> None:
    child = subprocess.Popen(
        [sys.executable, "-m", "ruleengine.web"],
        env=_env(settings),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline().strip()
        assert line.startswith("web listening on http://127.0.0.1:"), line
        url = line.removeprefix("web listening on ")
        with urllib.request.urlopen(f"{url}/health", timeout=10) as response:
            assert orjson.loads(response.read())["status"] == "ok"
        child.send_signal(signal.SIGTERM)
        _, stderr = child.communicate(timeout=20)
        assert child.returncode == 0, stderr
        assert "Traceback" not in stderr
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_a_missing_encryption_key_fails_with_a_message(settings: Settings, tmp_path: Any) -> None:
    env = _env(settings)
    del env["RULEENGINE_TOKEN_ENCRYPTION_KEY"]
    env["RULEENGINE_DATA_DIR"] = str(tmp_path / "empty")
    result = subprocess.run(
        [sys.executable, "-m", "ruleengine.web"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 1
    assert "RULEENGINE_TOKEN_ENCRYPTION_KEY" in result.stderr
    assert "Traceback" not in result.stderr


def test_aiohttp_devtools_finds_the_factory_of_devapp(settings: Settings) -> None:
    # What `adev runserver src/ruleengine/web/devapp.py` does, from the repository root.
    script = (
        "import asyncio\n"
        "from aiohttp_devtools.runserver.config import Config\n"
        "config = Config(app_path='src/ruleengine/web/devapp.py')\n"
        "factory = config.import_app_factory()\n"
        "app = asyncio.run(config.load_app(factory))\n"
        "print(config.app_factory_name, type(app).__name__)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=_env(settings),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["app_factory", "Application"]
