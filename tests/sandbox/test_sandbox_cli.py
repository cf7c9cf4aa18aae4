"""``python -m graph_sandbox`` starts, announces its address, serves and stops on SIGTERM."""

from __future__ import annotations

import asyncio
import re
import signal
import sys

import aiohttp


async def test_cli_serves_on_a_free_port_and_stops_cleanly_on_sigterm() -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "graph_sandbox",
        "--port",
        "0",
        "--seed",
        "3",
        "--scenario",
        "bench",
        "--accounts",
        "1",
        "--campaigns",
        "5",
        "--token",
        "t",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        line = (await asyncio.wait_for(process.stdout.readline(), timeout=20)).decode()
        match = re.fullmatch(
            r"sandbox listening on (http://127\.0\.0\.1:(\d+)) \(scenario bench, seed 3\)\n", line
        )
        assert match, line
        assert match.group(2) != "0"
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"{match.group(1)}/v27.0/act_2001/campaigns?access_token=t") as response,
        ):
            assert response.status == 200
            assert len((await response.json())["data"]) == 5
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), timeout=20) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def test_cli_help_explains_the_flags() -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "graph_sandbox",
        "--help",
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await process.communicate()
    assert process.returncode == 0
    for flag in ("--host", "--port", "--seed", "--scenario", "--accounts", "--campaigns"):
        assert flag in out.decode()


async def test_the_old_module_name_is_an_alias_of_the_new_one() -> None:
    # ``python -m ruleengine.sandbox`` is kept for one release; it runs graph_sandbox's main.
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "ruleengine.sandbox",
        "--help",
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await process.communicate()
    assert process.returncode == 0
    assert out.decode().startswith("usage: python -m graph_sandbox ")
