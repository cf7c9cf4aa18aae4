/* ruleengine UI: shared helpers (API calls with the bearer token, DOM building, formatting).
 *
 * Everything that came from a user or from Meta is inserted with textContent
 * (through el()), never as HTML, so a campaign called "<script>" stays text.
 */
"use strict";

const RE = (() => {
  const TOKEN_KEY = "ruleengine.apiToken";

  function token() {
    try {
      return localStorage.getItem(TOKEN_KEY) || "";
    } catch (_err) {
      return "";  // storage disabled: behave as if no token was saved
    }
  }

  function setToken(value) {
    try {
      if (value) localStorage.setItem(TOKEN_KEY, value);
      else localStorage.removeItem(TOKEN_KEY);
    } catch (_err) {
      flash("this browser does not allow storing the token (localStorage is off)", "error");
    }
    showTokenState();
  }

  /* The all-in-one demo opens the UI as …#token=XYZ: keep the token, then drop it
   * from the address bar so it is not left in history or shared by copy-paste.
   * A link must not swap the token this browser keeps for another without asking:
   * anybody can send a link, and with their token every change would be made as them. */
  function takeTokenFromHash() {
    if (!location.hash || location.hash.length < 2) return;
    const params = new URLSearchParams(location.hash.slice(1));
    const value = params.get("token");
    if (!value) return;
    const kept = token();
    if (!kept) setToken(value);
    else if (kept !== value) {
      const replace = window.confirm(
        "This link carries an API token other than the one this browser keeps. " +
        "Replace the kept token with the link's? (Cancel keeps yours.)");
      if (replace) setToken(value);
      else flash("the link's API token was not taken: this browser keeps its own", "info");
    }
    params.delete("token");
    const rest = params.toString();
    history.replaceState(null, "", location.pathname + location.search + (rest ? "#" + rest : ""));
  }

  class ApiFailure extends Error {
    constructor(status, body) {
      super((body && body.error) || "HTTP " + status);
      this.status = status;
      this.body = body || {};
    }
  }

  async function api(method, path, body, extraHeaders) {
    const headers = Object.assign({ Accept: "application/json" }, extraHeaders || {});
    const value = token();
    if (value) headers.Authorization = "Bearer " + value;
    const init = { method, headers, cache: "no-store" };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = typeof body === "string" ? body : JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch(path, init);
    } catch (err) {
      throw new ApiFailure(0, { error: "the web app did not answer (" + err.message + ")" });
    }
    const text = await response.text();
    let data = null;
    if (text) {
      try {
        data = JSON.parse(text);
      } catch (_err) {
        data = { error: text.slice(0, 300) };
      }
    }
    if (!response.ok) throw new ApiFailure(response.status, data);
    return data;
  }

  /* el("td", {class: "num"}, "12") — attributes are set as attributes, children as text. */
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "class") node.className = value;
      else if (key === "dataset") Object.assign(node.dataset, value);
      else if (key.startsWith("on") && typeof value === "function") {
        node.addEventListener(key.slice(2), value);
      } else node.setAttribute(key, value === true ? "" : String(value));
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function pad(n) {
    return String(n).padStart(2, "0");
  }

  function fmtTime(iso) {
    if (!iso) return "—";
    const d = new Date(iso);
    if (Number.isNaN(d.getTime())) return String(iso);
    return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
      `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  }

  function fmtAgo(iso) {
    if (!iso) return "";
    const seconds = (new Date(iso).getTime() - Date.now()) / 1000;
    if (!Number.isFinite(seconds)) return "";
    const abs = Math.abs(seconds);
    const text = abs < 90 ? Math.round(abs) + " s" : abs < 5400 ? Math.round(abs / 60) + " min"
      : abs < 172800 ? Math.round(abs / 3600) + " h" : Math.round(abs / 86400) + " d";
    return seconds >= 0 ? "in " + text : text + " ago";
  }

  /* 7080 → "1 h 58 min", 180 → "3 min", 42 → "42 s", 97200 → "1 d 3 h". */
  function fmtDuration(seconds) {
    const abs = Math.abs(Number(seconds));
    if (!Number.isFinite(abs)) return "";
    if (abs < 60) return Math.round(abs) + " s";
    const minutes = Math.round(abs / 60);
    if (minutes < 60) return minutes + " min";
    const hours = Math.floor(minutes / 60);
    if (hours < 24) return hours + " h" + (minutes % 60 ? " " + (minutes % 60) + " min" : "");
    const days = Math.floor(hours / 24);
    return days + " d" + (hours % 24 ? " " + (hours % 24) + " h" : "");
  }

  /* "in 1 h 58 min" or "3 min ago", from now. */
  function fmtRelative(iso) {
    if (!iso) return "";
    const seconds = (new Date(iso).getTime() - Date.now()) / 1000;
    if (!Number.isFinite(seconds)) return "";
    return seconds >= 0 ? "in " + fmtDuration(seconds) : fmtDuration(seconds) + " ago";
  }

  function timeCell(iso) {
    return el("td", { title: iso || "" }, fmtTime(iso), iso ? el("span", { class: "muted ago" }, fmtAgo(iso)) : null);
  }

  function fmtSeconds(value) {
    if (value === null || value === undefined || !Number.isFinite(Number(value))) return "—";
    const s = Number(value);
    if (s < 1) return (s * 1000).toFixed(s < 0.01 ? 2 : 0) + " ms";
    return s.toFixed(s < 10 ? 2 : 1) + " s";
  }

  function fmtValue(value) {
    if (value === null || value === undefined) return "—";
    if (typeof value === "number") return Number.isInteger(value) ? String(value) : value.toFixed(4).replace(/0+$/, "").replace(/\.$/, "");
    if (Array.isArray(value)) return "[" + value.map(fmtValue).join(", ") + "]";  /* IN_RANGE's [low, high] */
    if (typeof value === "object") return JSON.stringify(value);
    return String(value);
  }

  /* An amount in a currency as a person reads it: the currency's symbol and its decimals
     (``decimals``: 0 for JPY and Meta's other zero-decimal currencies, as the API says;
     rules/money.py format_money is the server's twin). ``signed``: "+" before a gain. */
  const moneyFormats = new Map();
  function fmtMoney(value, currency, decimals, signed) {
    if (value === null || value === undefined) return "—";
    const places = decimals === undefined || decimals === null ? 2 : decimals;
    const key = [currency, places, Boolean(signed)].join("|");
    let format = moneyFormats.get(key);
    if (format === undefined) {
      const options = { minimumFractionDigits: places, maximumFractionDigits: places, signDisplay: signed ? "exceptZero" : "auto" };
      try {
        format = new Intl.NumberFormat(undefined, Object.assign({ style: "currency", currency, currencyDisplay: "narrowSymbol" }, options));
      } catch (_err) {  // a code this browser does not know: the number, then the code
        const plain = new Intl.NumberFormat(undefined, options);
        format = { format: (v) => plain.format(v) + " " + currency };
      }
      moneyFormats.set(key, format);
    }
    return format.format(Number(value));
  }

  function badge(status) {
    const text = status === null || status === undefined ? "—" : String(status);
    return el("span", { class: "badge status-" + text.toLowerCase().replace(/[^a-z_]/g, "") }, text);
  }

  function pretty(value) {
    return el("pre", { class: "json" }, value === undefined ? "" : JSON.stringify(value, null, 2));
  }

  /* One execution record's conditions: the numbers seen and pass/fail, as a list. */
  function conditionList(conditions) {
    if (!conditions || !conditions.length) return el("span", { class: "muted" }, "not evaluated");
    return el("ul", { class: "conditions" }, conditions.map((c) => {
      const target = c.compare_to
        ? c.compare_to + (c.expected === null ? "" : " = " + fmtValue(c.expected))
        : fmtValue(c.expected);
      return el("li", { class: c.passed ? "pass" : "fail", dataset: { metric: c.metric } },
        el("span", { class: "mark", "aria-label": c.passed ? "passed" : "failed" }, c.passed ? "✓" : "✗"),
        " ", el("code", {}, c.metric + (c.period ? " (" + c.period + ")" : "")),
        " " + c.operator + " " + target + " · seen ",
        el("strong", {}, c.actual === null || c.actual === undefined ? "no data" : fmtValue(c.actual)),
        c.indicator ? el("span", { class: "muted indicator" }, " (" + c.indicator + ")") : null,
        c.reason ? el("span", { class: "reason" }, " " + c.reason) : null);
    }));
  }

  /* "daily_budget: 10000 → 12000", or "—" when nothing was (or would be) changed. */
  function changeText(record) {
    const none = (v) => v === null || v === undefined;
    if (none(record.field) && none(record.before) && none(record.after)) return "—";
    return (record.field ? record.field + ": " : "") + fmtValue(record.before) + " → " + fmtValue(record.after);
  }

  let flashTimer = null;
  function flash(message, kind) {
    const box = document.getElementById("flash");
    if (!box) return;
    box.textContent = message;
    box.className = "flash " + (kind || "info");
    clearTimeout(flashTimer);
    flashTimer = setTimeout(() => box.classList.add("hidden"), kind === "error" ? 9000 : 4000);
  }

  function failed(err, what) {
    let message = err && err.message ? err.message : String(err);
    if (err && err.status === 401) message += " — paste the API token in the box at the top";
    if (err && err.status === 403) message += " — ask an admin for a token with that role";
    flash((what ? what + ": " : "") + message, "error");
  }

  function showTokenState() {
    const state = document.getElementById("token-state");
    if (!state) return;
    state.textContent = token() ? "token set" : "no token (read-only)";
    state.className = "token-state " + (token() ? "ok" : "warn");
  }

  function initTokenBox() {
    const form = document.getElementById("token-form");
    const input = document.getElementById("token-input");
    const clearButton = document.getElementById("token-clear");
    if (!form || !input) return;
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      setToken(input.value.trim());
      input.value = "";
      flash(token() ? "API token saved in this browser" : "API token cleared");
    });
    clearButton.addEventListener("click", () => {
      setToken("");
      flash("API token cleared");
    });
    showTokenState();
  }

  function pager(info, offset, limit, total) {
    const end = Math.min(offset + limit, total);
    info.textContent = total ? `${offset + 1}–${end} of ${total}` : "0 of 0";
  }

  function debounce(fn, ms) {
    let timer = null;
    return (...args) => {
      clearTimeout(timer);
      timer = setTimeout(() => fn(...args), ms);
    };
  }

  takeTokenFromHash();
  // a link to the same screen with only "#token=…" changed does not load the page again
  window.addEventListener("hashchange", takeTokenFromHash);
  document.addEventListener("DOMContentLoaded", initTokenBox);

  return {
    api, el, badge, pretty, flash, failed, fmtTime, fmtAgo, fmtDuration, fmtRelative, fmtSeconds,
    fmtValue, fmtMoney, timeCell,
    pager, debounce, token, ApiFailure, conditionList, changeText,
  };
})();
