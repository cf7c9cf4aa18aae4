/* Accounts screen: registered ad accounts, their token health, rules and last batch;
 * register one (its currency and timezone are read from Meta), rotate its token, re-read
 * its currency and timezone from Meta, remove it.
 *
 * A token is read from a password field, sent once and the field emptied; the API never
 * answers it back, so the page can only say "set" (with its fingerprint) or what Meta said.
 */
"use strict";

(() => {
  const { api, el, badge, failed, say, timeCell } = RE;
  const $ = (id) => document.getElementById(id);

  /* What a user does about each way Meta refuses a token. */
  const ADVICE = {
    invalid: "the token was revoked (password changed, user logged out, app removed): issue a new token and rotate it here",
    expired: "the token expired: issue a new (long-lived or system-user) token and rotate it here",
    missing_permission: "the token lacks a permission (ads_management, ads_read) or access to this account: grant it, then rotate the token here (the same token is accepted again)",
  };

  async function load() {
    let page;
    try {
      page = await api("GET", "/api/accounts");
    } catch (err) {
      failed(err, "could not load the accounts");
      return;
    }
    $("accounts-table").tBodies[0].replaceChildren(...page.items.map(accountRow));
    $("accounts-empty").classList.toggle("hidden", page.items.length > 0);
  }

  function tokenCell(account) {
    const state = account.token_state;
    if (!state) {
      return el("td", { class: "token-health" },
        el("span", { class: "badge status-active", dataset: { token: "set" } }, "set · OK"),
        el("span", { class: "muted fingerprint" }, " fingerprint ", el("code", {}, account.token_fingerprint)));
    }
    const code = state.code === null || state.code === undefined ? "" : ` (code ${state.code}${state.subcode ? "/" + state.subcode : ""})`;
    return el("td", { class: "token-health" },
      el("span", { class: "badge status-failed", dataset: { token: state.status } }, state.status.replace("_", " ") + code),
      el("div", { class: "muted" }, "since ", RE.fmtTime(state.at), ": ", state.message),
      el("div", { class: "advice" }, ADVICE[state.status] || "replace the token"));
  }

  /* The registered currency (or timezone) a job found not to be Meta's: budget and bid
   * changes on the account stop until it is re-read from Meta. */
  function settingCell(account, key, metaKey) {
    const state = account.currency_state;
    const meta = state ? state[metaKey] : null;
    if (!meta || meta === account[key]) return el("td", {}, account[key]);
    return el("td", { class: "currency-state", dataset: { mismatch: key } },
      el("span", { class: "badge status-failed" }, account[key]),
      el("div", { class: "muted" }, "Meta's: ", el("strong", {}, meta)));
  }

  function mismatchNote(account) {
    const state = account.currency_state;
    if (!state) return null;
    return el("div", { class: "advice", dataset: { currencyState: "mismatch" } },
      "Not Meta's since ", RE.fmtTime(state.at),
      ": no budget or bid change is made on this account until it is re-read from Meta.");
  }

  function rulesCell(rules) {
    if (!rules.length) return el("td", { class: "muted" }, "none");
    return el("td", {}, el("ul", { class: "account-rules" }, rules.map((r) =>
      el("li", {}, el("a", { href: "/rules/" + encodeURIComponent(r.id) }, r.name), " ", badge(r.status)))));
  }

  function batchCell(batch) {
    if (!batch) return el("td", { class: "muted" }, "none yet");
    const cell = timeCell(batch.started_at);
    cell.prepend(badge(batch.status), " ");
    cell.append(el("span", { class: "muted" }, batch.rule_name || ""));
    return cell;
  }

  function accountRow(account) {
    const row = el("tr", { dataset: { accountId: account.id } },
      el("td", {}, el("div", { class: "strong" }, account.name), el("code", { class: "muted" }, account.id),
        mismatchNote(account)),
      settingCell(account, "currency", "meta_currency"),
      settingCell(account, "timezone", "meta_timezone"),
      tokenCell(account),
      rulesCell(account.rules),
      batchCell(account.last_batch),
      el("td", { class: "actions" },
        el("button", { type: "button", class: "small secondary", dataset: { action: "rotate", needs: "PUT /api/accounts/{id}/token" },
          onclick: () => toggleRotate(row, account) }, "Rotate token"),
        el("button", { type: "button", class: "small secondary", dataset: { action: "refresh", needs: "POST /api/accounts/{id}/refresh" },
          title: "read the currency and timezone from Meta again, with the stored token",
          onclick: (event) => refresh(account, event.currentTarget) }, "Re-read from Meta"),
        el("button", { type: "button", class: "small ghost", dataset: { action: "remove", needs: "DELETE /api/accounts/{id}" },
          onclick: (event) => remove(account, event.currentTarget) }, "Remove")));
    return row;
  }

  function toggleRotate(row, account) {
    const next = row.nextElementSibling;
    if (next && next.classList.contains("detail-row")) {
      next.remove();
      return;
    }
    const input = el("input", { type: "password", autocomplete: "new-password", spellcheck: "false",
      id: "rotate-" + account.id, placeholder: "the new token, pasted once" });
    const submit = el("button", { type: "submit", class: "small", dataset: { needs: "PUT /api/accounts/{id}/token" } }, "Replace token");
    const form = el("form", { class: "rotate-form", autocomplete: "off" },
      el("label", { for: input.id }, "New access token for " + account.id), input, submit);
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const token = input.value;
      input.value = "";
      try {
        const updated = await api("PUT", `/api/accounts/${encodeURIComponent(account.id)}/token`, { token });
        await load();
        say(rowButton(updated.id, "rotate"), `token replaced (fingerprint ${updated.token_fingerprint})`, "ok");
      } catch (err) {
        failed(err, "could not replace the token", submit);
      }
    });
    row.after(el("tr", { class: "detail-row" }, el("td", { colspan: 7 }, form)));
    input.focus();
  }

  /* A row's button, found again after the table was drawn anew (the message goes beside it). */
  function rowButton(accountId, action) {
    const row = [...document.querySelectorAll("#accounts-table tr[data-account-id]")].find((r) => r.dataset.accountId === accountId);
    return row ? row.querySelector(`button[data-action="${action}"]`) : null;
  }

  async function refresh(account, button) {
    let message, kind = "ok";
    try {
      const updated = await api("POST", `/api/accounts/${encodeURIComponent(account.id)}/refresh`);
      const changed = updated.changed.length ? updated.changed.join(", ") : "unchanged";
      message = `${changed} (Meta's)` +
        (updated.currency !== account.currency ? `; its rules' amounts are now read in ${updated.currency}: check them` : "");
    } catch (err) {
      message = "could not re-read from Meta: " + err.message;
      kind = "error";
    }
    await load();
    say(rowButton(account.id, "refresh") || button, message, kind);
  }

  async function remove(account, button) {
    if (!window.confirm(`Remove ${account.id} and forget its token?`)) return;
    try {
      await api("DELETE", "/api/accounts/" + encodeURIComponent(account.id));
      say($("account-register"), `${account.id} removed`, "ok");
      offerSandbox();
    } catch (err) {
      failed(err, "could not remove " + account.id, button);  // a 409's message names the active rules
      return;
    }
    load();
  }

  function showErrors(errors) {
    const byPath = { id: "account-id", token: "account-token", name: "account-name", currency: "account-currency", timezone: "account-timezone" };
    for (const input of document.querySelectorAll("#account-form input")) input.removeAttribute("aria-invalid");
    $("account-errors").replaceChildren(...errors.map((e) => {
      const input = byPath[e.path] && $(byPath[e.path]);
      if (input) input.setAttribute("aria-invalid", "true");
      return el("li", { dataset: { path: e.path } }, el("code", {}, e.path || "body"), " ", e.message);
    }));
  }

  async function register(event) {
    event.preventDefault();
    const body = { id: $("account-id").value.trim(), token: $("account-token").value };
    for (const key of ["name", "currency", "timezone"]) {
      const value = $("account-" + key).value.trim();
      if (value) body[key] = value;
    }
    $("account-token").value = "";  // sent once; never kept in the page
    try {
      const added = await api("POST", "/api/accounts", body);
      showErrors([]);
      $("account-form").reset();
      say($("account-register"), `${added.id} registered in ${added.currency}, ${added.timezone} (token fingerprint ${added.token_fingerprint})` +
        (added.unchecked ? "; not checked with Meta, which could not be asked" : ""), "ok");
      load();
      offerSandbox();
    } catch (err) {
      showErrors((err.body && err.body.errors) || []);
      failed(err, "could not register the account", $("account-register"));
    }
  }

  /* Only where the web app's Graph URL is a sandbox on this machine (404 elsewhere: nothing shown). */
  async function offerSandbox() {
    let offer;
    try {
      offer = await api("GET", "/api/accounts/sandbox");
    } catch (_err) {
      return;
    }
    $("sandbox-accounts").replaceChildren(...offer.items.map((a) =>
      el("button", { type: "button", class: "small secondary", dataset: { sandboxAccount: a.id },
        title: `${a.name} · ${a.currency} · ${a.timezone}`,
        onclick: () => fill(a) }, a.id + (a.registered ? " (registered)" : ""))));
    $("sandbox-offer").classList.toggle("hidden", offer.items.length === 0);
  }

  function fill(account) {
    $("account-id").value = account.id;
    $("account-name").value = account.name;
    $("account-currency").value = account.currency;
    $("account-timezone").value = account.timezone;
    $("account-token").focus();
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("account-form").addEventListener("submit", register);
    load();
    offerSandbox();
  });
})();
