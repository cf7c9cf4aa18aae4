"""The rule builder (the form view beside the JSON view) in Debian's Chromium.

A rule is built entirely through the form — from the keyboard where a picker is involved —
previewed and saved, and the stored rule is the example file's; the JSON view edited by
hand is followed by the form; the server's validation errors land on the form fields
their JSON paths name. Skipped like ``test_browser.py`` where its browser is absent.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_browser import (  # noqa: F401  (page and the autouse check are fixtures)
    _browser_required,
    _open,
    _shot,
    page,
)
from web_helpers import API_TOKEN, AUTH, Client, rule_body

from ruleengine.rules.language.model import parse_rule

pytestmark = pytest.mark.browser

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "rules"


def _at(path: str) -> str:
    """The form control (or group) for a JSON path."""
    return f'#builder-form [data-path="{path}"]'


async def _pick_metric(page: Any, path: str, query: str, name: str) -> None:  # noqa: F811
    """Choose ``name`` in the metric picker at ``path`` with the keyboard only."""
    picker = page.locator(_at(path))
    await picker.focus()
    await page.keyboard.press("Control+A")
    await page.keyboard.type(query)
    await page.wait_for_selector(f'{_at(path)}[aria-expanded="true"]')
    for _ in range(80):
        active = await picker.get_attribute("aria-activedescendant")
        if active and await page.locator(f"#{active}").get_attribute("data-name") == name:
            break
        await page.keyboard.press("ArrowDown")
    else:
        raise AssertionError(f"{name} is not offered for {query!r}")
    await page.keyboard.press("Enter")
    await page.wait_for_selector(f'{_at(path)}[aria-expanded="false"]')


async def _valid(page: Any) -> None:  # noqa: F811
    """Wait until the editor's rule validates; say what is wrong when it does not."""
    try:
        await page.wait_for_selector("#validity.ok")
    except Exception as exc:
        problems = await page.inner_text("#field-errors")
        raise AssertionError(f"{problems}\n{await page.input_value('#rule-editor')}") from exc


async def _editor_json(page: Any) -> dict[str, Any]:  # noqa: F811
    loaded: dict[str, Any] = json.loads(await page.input_value("#rule-editor"))
    return loaded


async def test_pause_losers_is_built_in_the_form_previewed_and_saved_as_the_example(
    page: Any,  # noqa: F811
    client: Client,
) -> None:
    example = json.loads((EXAMPLES / "01-pause-losers.json").read_text())
    console = await _open(page, f"{client.make_url('/rules')}#token={API_TOKEN}")
    await page.click("#new-rule")
    await page.locator(_at("name")).wait_for()

    # the draft's spend condition on act_1001 alone: money in dollars, with the symbol
    draft_spend = page.locator(_at("tasks[0].conditions[0].value")).locator("xpath=../..")
    assert "$" in await draft_spend.inner_text()
    await page.fill(_at("name"), example["name"])
    await page.fill(_at("description"), example["description"])
    for account in ("act_1002", "act_1003"):
        await page.get_by_label(f"({account})").check()
    # filters: the draft's status filter becomes the name filter, then a status filter follows
    await page.select_option(_at("filters[0].field"), "name")
    await page.select_option(_at("filters[0].operator"), "CONTAIN")
    await page.fill(_at("filters[0].value"), "[AUTO]")
    await page.get_by_role("button", name="Add filter").click()
    await page.select_option(_at("filters[1].field"), "effective_status")
    await page.locator(_at("filters[1].value")).get_by_label("ACTIVE", exact=True).wait_for()
    assert (await _editor_json(page))["filters"] == example["filters"]
    # the schedule: every 15 minutes (the draft's), in New York
    assert await page.input_value(_at("schedule.every_minutes")) == "15"
    await page.fill(_at("timezone"), example["timezone"])

    task = example["tasks"][0]
    await page.fill(_at("tasks[0].id"), task["id"])
    await _pick_metric(page, "tasks[0].conditions[0].metric", "roas", "purchase_roas.omni_purchase")
    help_text = await page.inner_text(".fld.metric .metric-help >> nth=0")
    assert "purchase value" in help_text.lower()
    await page.select_option(_at("tasks[0].conditions[0].period"), "last_7d")
    await page.select_option(_at("tasks[0].conditions[0].operator"), "<")
    await page.fill(_at("tasks[0].conditions[0].value"), "1.2")
    await page.get_by_role("button", name="Add condition").click()
    # spend is money: with accounts in dollars and euros, one amount is asked per currency
    spend = "tasks[0].conditions[1].value"
    await page.locator(_at(spend + ".EUR")).wait_for()
    asked = await page.locator(_at(spend)).inner_text()
    assert "Value (EUR)" in asked and "Value (USD)" in asked and "€" in asked and "$" in asked
    await page.select_option(_at("tasks[0].conditions[1].operator"), ">")
    await page.fill(_at(spend + ".USD"), "50")
    await page.fill(_at(spend + ".EUR"), "45")
    await page.select_option(_at("tasks[0].action.type"), "pause")
    await page.get_by_label("Then, later: a second step").check()
    await page.select_option(_at("tasks[0].action.then.do"), "activate")
    await page.fill(_at("tasks[0].action.then.after_minutes"), "120")
    await page.fill(_at("tasks[0].cooldown_minutes"), "180")
    await _valid(page)
    assert "null" not in (await page.inner_text("#builder-form")).split()
    await _shot(page, "builder-pause-losers")

    await page.click("#preview-rule")
    await page.wait_for_function(
        "() => /would apply/.test(document.querySelector('#preview-meta').textContent)"
    )
    assert "unsaved draft" in await page.inner_text("#preview-meta")

    await page.click("#save-rule")
    await page.locator("#versions-table tbody tr").first.wait_for()
    listed = await (await client.get("/api/rules", headers=AUTH)).json()
    (rule_id,) = [r["id"] for r in listed["items"] if r["name"] == example["name"]]
    stored = await (await client.get(f"/api/rules/{rule_id}", headers=AUTH)).json()
    assert stored["definition"] == parse_rule(example).definition()
    assert stored["checksum"] == parse_rule(example).checksum()
    assert console.errors == []


async def test_an_edit_of_the_json_view_is_followed_by_the_form(
    page: Any,  # noqa: F811
    client: Client,
) -> None:
    created = await client.post("/api/rules", json=rule_body("Pause spenders"), headers=AUTH)
    rule_id = (await created.json())["id"]
    console = await _open(page, f"{client.make_url('/rules/' + rule_id)}#token={API_TOKEN}")
    await page.locator(_at("tasks[0].cooldown_minutes")).wait_for()
    rule = await _editor_json(page)
    rule["tasks"][0]["cooldown_minutes"] = 95
    rule["tasks"][0]["conditions"][0]["metric"] = "cpc"
    rule["schedule"] = {"mode": "timetable", "slots": {"mon": ["08:00"], "fri": ["17:30"]}}
    await page.locator("#rule-editor").fill(json.dumps(rule, indent=2))
    await page.wait_for_function(
        f"() => document.querySelector('{_at('tasks[0].cooldown_minutes')}').value === '95'"
    )
    assert await page.input_value(_at("tasks[0].conditions[0].metric")) == "cpc"
    grid = page.locator("table.timetable")
    assert await grid.locator('button[aria-pressed="true"]').count() == 2
    assert await grid.get_by_label("Monday 08:00").get_attribute("aria-pressed") == "true"
    assert await grid.get_by_label("Friday 17:30").get_attribute("aria-pressed") == "true"
    # the grid from the keyboard: the Monday 08:00 cell, one right, Space → 09:00 as well
    await grid.get_by_label("Monday 08:00").focus()
    await page.keyboard.press("ArrowRight")
    await page.keyboard.press("Space")
    await page.wait_for_function(
        "() => JSON.parse(document.querySelector('#rule-editor').value).schedule.slots.mon"
        ".join() === '08:00,09:00'"
    )
    assert await page.evaluate("document.activeElement.getAttribute('aria-label')") == (
        "Monday 09:00"
    )
    await _shot(page, "builder-timetable")

    # JSON that does not parse: the form waits, greyed out, and says why
    await page.locator("#rule-editor").fill('{"name": "half')
    await page.locator("#builder-paused").wait_for()
    assert await page.locator("#builder-form[inert]").count() == 1
    await page.locator("#rule-editor").fill(json.dumps(rule, indent=2))
    await page.locator("#builder-paused").wait_for(state="hidden")
    assert console.errors == []


async def test_server_errors_land_on_the_form_fields_they_name(
    page: Any,  # noqa: F811
    client: Client,
) -> None:
    created = await client.post("/api/rules", json=rule_body("Pause spenders"), headers=AUTH)
    rule_id = (await created.json())["id"]
    console = await _open(page, f"{client.make_url('/rules/' + rule_id)}#token={API_TOKEN}")
    await page.locator(_at("tasks[0].action.type")).wait_for()
    await page.select_option(_at("tasks[0].action.type"), "increase_budget")
    percent = page.locator(_at("tasks[0].action.percent"))
    await percent.fill("5000")  # more than the 1000 % the schema allows
    await page.wait_for_function(
        """() => [...document.querySelectorAll('#builder-form .form-error')].some(
            (n) => n.dataset.for === 'tasks[0].action.percent' && n.textContent.includes('1000'))"""
    )
    assert await percent.get_attribute("aria-invalid") == "true"
    holder = percent.locator("xpath=ancestor::div[contains(@class, 'fld')][1]")
    assert "1000" in await holder.locator(".form-error").inner_text()
    # an unknown metric: the catalogue's own message, at the picker
    metric = "tasks[0].conditions[0].metric"
    await page.locator(_at(metric)).fill("roaz_7d")
    await page.wait_for_selector(f'{_at(metric)}[aria-invalid="true"]')
    note = page.locator(f'#builder-form .form-error[data-for="{metric}"]')
    assert "unknown metric" in await note.inner_text()
    described = await page.locator(_at(metric)).get_attribute("aria-describedby")
    assert await note.get_attribute("id") in (described or "").split()
    await _shot(page, "builder-errors")
    # fixed in the form: the errors go away with the next validation
    await percent.fill("20")
    await _pick_metric(page, metric, "spend", "spend")
    await _valid(page)
    assert await page.locator("#builder-form .form-error").count() == 0
    assert [e for e in console.errors if "422" not in e] == []


async def test_the_form_asks_for_a_holdout_offers_the_learning_phase_to_ad_sets_and_ranks_results(
    page: Any,  # noqa: F811
    client: Client,
) -> None:
    console = await _open(page, f"{client.make_url('/rules')}#token={API_TOKEN}")
    await page.click("#new-rule")
    await page.locator(_at("name")).wait_for()
    learning = "#builder-form input[data-path='tasks[0].respect_learning_phase']"
    assert await page.locator(learning).count() == 0  # a campaign has no learning phase
    await page.select_option(_at("level"), "adset")
    await page.locator(learning).wait_for()  # an ad set has
    # the holdout: a share of the matched entities, left unchanged to measure against
    await page.fill(_at("tasks[0].holdout.percent"), "20")
    await _valid(page)
    assert (await _editor_json(page))["tasks"][0]["holdout"] == {"percent": 20}
    # "results" lists the Results metrics first, not "Amount spent"
    picker = page.locator(_at("tasks[0].conditions[0].metric"))
    await picker.focus()
    await page.keyboard.press("Control+A")
    await page.keyboard.type("results")
    await page.wait_for_selector(f'{_at("tasks[0].conditions[0].metric")}[aria-expanded="true"]')
    first = page.locator(".combo-list:not(.hidden) [role=option]").first
    assert await first.get_attribute("data-name") == "results"
    await _shot(page, "builder")
    await page.keyboard.press("Escape")
    await page.fill(_at("tasks[0].holdout.percent"), "")  # empty: no holdout
    await _valid(page)
    assert "holdout" not in (await _editor_json(page))["tasks"][0]
    assert console.errors == []


async def test_a_money_amount_on_dollar_and_yen_accounts_is_asked_per_currency(
    page: Any,  # noqa: F811
    client: Client,
) -> None:
    """A rule over a USD and a JPY account with a bare ``cost_per_result > 20`` (¥20 is
    about 13 cents): the server refuses it at the value, saying to give it per currency, and
    the form asks one amount per currency — the condition's and the action's — and writes
    the maps."""
    body = rule_body("Yen and dollars", ad_accounts=["act_1001", "act_1004"])
    task = body["tasks"][0]
    task["conditions"] = [
        {"metric": "cost_per_result", "period": "last_7d", "operator": ">", "value": 20}
    ]
    task["action"] = {"type": "set_budget", "amount": 40}
    console = await _open(page, f"{client.make_url('/rules')}#token={API_TOKEN}")
    await page.click("#new-rule")
    await page.locator(_at("name")).wait_for()
    await page.locator("#rule-editor").fill(json.dumps(body, indent=2))
    value, amount = "tasks[0].conditions[0].value", "tasks[0].action.amount"
    await page.locator(_at(value + ".JPY")).wait_for()
    # the bare 20 is refused where it stands, with what to write instead
    note = page.locator(f'#builder-form .form-error[data-for="{value}"]')
    await note.wait_for()
    refusal = await note.inner_text()
    assert "the rule's accounts are in JPY and USD" in refusal
    assert "give this amount per currency" in refusal
    asked = await page.locator(_at(value)).inner_text()
    assert "Value (JPY)" in asked and "Value (USD)" in asked and "¥" in asked
    assert "20 is a different amount in each currency" in asked
    # the yen amount is whole yen: its input steps by 1, the dollar one by cents
    assert await page.get_attribute(_at(value + ".JPY"), "step") == "1"
    assert await page.get_attribute(_at(value + ".USD"), "step") == "0.01"
    await page.fill(_at(value + ".JPY"), "3000")
    await page.fill(_at(value + ".USD"), "20")
    await page.fill(_at(amount + ".JPY"), "6000")
    await page.fill(_at(amount + ".USD"), "40")
    await _valid(page)
    assert "the accounts are in JPY and USD: one amount per currency" in (
        await page.locator(_at(value)).inner_text()
    )
    written = (await _editor_json(page))["tasks"][0]
    assert written["conditions"][0]["value"] == {"JPY": 3000, "USD": 20}
    assert written["action"]["amount"] == {"JPY": 6000, "USD": 40}
    await _shot(page, "builder-per-currency")

    # "is between": each currency gets its own [low, high]
    await page.select_option(_at("tasks[0].conditions[0].operator"), "IN_RANGE")
    await page.locator(_at(value + ".JPY[1]")).wait_for()
    await page.fill(_at(value + ".JPY[1]"), "4500")
    await page.fill(_at(value + ".USD[1]"), "30")
    await _valid(page)
    ranged = (await _editor_json(page))["tasks"][0]["conditions"][0]["value"]
    assert ranged == {"JPY": [3000, 4500], "USD": [20, 30]}
    assert [e for e in console.errors if "422" not in e] == []
