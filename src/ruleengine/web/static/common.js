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
    whoLoading = null;  // another token: ask again who it is
    if (document.readyState !== "loading") whoami();
    else showTokenState();
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

  /* "2026-12-01 09:15" in the time zone `zone` (an IANA name); the browser's own when the
   * browser does not know it. */
  function fmtZoned(iso, zone) {
    if (!iso) return "—";
    const d = new Date(iso);
    if (Number.isNaN(d.getTime())) return String(iso);
    try {
      const parts = Object.fromEntries(new Intl.DateTimeFormat("en-CA", { timeZone: zone, hourCycle: "h23",
        year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit" })
        .formatToParts(d).map((p) => [p.type, p.value]));
      return `${parts.year}-${parts.month}-${parts.day} ${parts.hour}:${parts.minute}`;
    } catch (_err) {
      return fmtTime(iso);
    }
  }

  /* A cell with the time in `zone`, the zone named beside it, and how long from now. */
  function zonedTimeCell(iso, zone, relative) {
    if (!iso) return el("td", { class: "muted" }, "—");
    return el("td", { title: iso }, fmtZoned(iso, zone), el("span", { class: "muted zone" }, " " + (zone || "UTC")),
      el("span", { class: "muted ago" }, (relative || fmtAgo)(iso)));
  }

  /* When a rule runs next, from now: "in 14 min", "due now" (the dispatcher takes it at its
   * next tick), "overdue by 12 min" — never "1 s ago". */
  function fmtNextRun(iso) {
    if (!iso) return "";
    const seconds = (new Date(iso).getTime() - Date.now()) / 1000;
    if (!Number.isFinite(seconds)) return "";
    if (seconds > 0) return "in " + fmtDuration(seconds);
    return seconds > -120 ? "due now" : "overdue by " + fmtDuration(seconds);
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

  /* ---- money, as a person reads it: the twin of rules/language/money.py (format_minor, format_change,
   * format_value, format_field_change) — the same text for the same input, which a test checks
   * on generated amounts. Amounts come as Meta stores them (minor units: 12000 is $120.00 in
   * USD, ¥12,000 in JPY); the arithmetic is BigInt, exact like the server's. */
  const MINOR_UNIT_FIELDS = new Set(["daily_budget", "lifetime_budget", "bid_amount",
    "daily_spend_cap", "daily_min_spend_target", "lifetime_spend_cap", "lifetime_min_spend_target",
    "budget_schedules"]);
  // Meta's currencies with offset 1 (rules/entity.py ZERO_DECIMAL); every other has 100.
  const ZERO_DECIMAL = new Set(["CLP", "COP", "CRC", "HUF", "ISK", "IDR", "JPY", "KRW", "PYG", "TWD", "VND"]);
  const CURRENCY_SYMBOLS = new Map(Object.entries({
    USD: "$", EUR: "€", GBP: "£", JPY: "¥", INR: "₹", AUD: "A$", CAD: "CA$", NZD: "NZ$", BRL: "R$",
    MXN: "MX$", KRW: "₩", IDR: "Rp", CNY: "CN¥", HKD: "HK$", TWD: "NT$",
  }));
  const MINUS = "\u2212";
  const NO_VALUE = "—";

  function wholeMinor(value) {
    if (typeof value === "number") return Number.isInteger(value) ? BigInt(value) : null;
    if (typeof value === "string" && /^-?[0-9]{1,18}$/.test(value)) return BigInt(value);
    return null;
  }

  function groupDigits(text) {
    return text.replace(/\B(?=(\d{3})+(?!\d))/g, ",");
  }

  /* `scaled` hundredths (or whole units of a zero-decimal currency) with symbol or code. */
  function moneyText(scaled, code, signed) {
    const negative = scaled < 0n;
    const abs = negative ? -scaled : scaled;
    const digits = ZERO_DECIMAL.has(code) ? groupDigits(abs.toString())
      : groupDigits((abs / 100n).toString()) + "." + (abs % 100n).toString().padStart(2, "0");
    const sign = negative ? "-" : signed && abs > 0n ? "+" : "";
    const symbol = CURRENCY_SYMBOLS.get(code);
    return sign + (symbol ? symbol + digits : digits + " " + code);
  }

  /* Minor units per currency unit: 1 for Meta's zero-decimal currencies, else 100. */
  function minorPerUnit(currency) {
    return ZERO_DECIMAL.has(String(currency || "").toUpperCase()) ? 1 : 100;
  }

  /* 12000, "USD" → "$120.00"; 12000, "JPY" → "¥12,000"; no currency: the number as stored. */
  function money(minor, currency) {
    if (minor === null || minor === undefined) return NO_VALUE;
    const whole = wholeMinor(minor);
    if (whole === null) return String(minor);
    if (!currency) return whole.toString();
    return moneyText(whole, String(currency).toUpperCase(), false);
  }

  /* A number as the exact decimal its shortest text is (as Python's Decimal(str(x))). */
  function decimalOf(value) {
    const match = /^(-?)(\d+)(?:\.(\d+))?(?:e([+-]\d+))?$/.exec(String(value));
    if (!match) return null;
    const fraction = match[3] || "";
    return { digits: BigInt(match[1] + match[2] + fraction), exp: Number(match[4] || 0) - fraction.length };
  }

  /* An amount in currency units (not minor units): 1234.5, "USD" → "$1,234.50", rounded half
   * up to the currency's decimals (format_amount's twin); `signed`: "+" before a gain. */
  function amount(value, currency, signed) {
    if (value === null || value === undefined || value === "") return NO_VALUE;
    const exact = decimalOf(Number(value));
    if (!exact || !currency) return exact ? plainNumber(Number(value), 2) : String(value);
    const code = String(currency).toUpperCase();
    const shift = exact.exp + (ZERO_DECIMAL.has(code) ? 0 : 2);
    let scaled;
    if (shift >= 0) scaled = exact.digits * 10n ** BigInt(shift);
    else {
      const unit = 10n ** BigInt(-shift);
      const abs = exact.digits < 0n ? -exact.digits : exact.digits;
      const rounded = abs / unit + ((abs % unit) * 2n >= unit ? 1n : 0n);
      scaled = exact.digits < 0n ? -rounded : rounded;
    }
    return moneyText(scaled, code, signed);
  }

  function plainNumber(value, decimals) {
    return Number(value).toLocaleString("en-US", { maximumFractionDigits: decimals });
  }

  /* "−10 %", "+7.5 %", "0 %", "+<0.1 %": to a tenth, rounded half away from zero. */
  function percentChange(before, after) {
    const diff = after - before;
    const abs = diff < 0n ? -diff : diff;
    const tenths = (abs * 2000n + before) / (2n * before);
    const sign = diff > 0n ? "+" : diff < 0n ? MINUS : "";
    if (tenths === 0n && diff !== 0n) return sign + "<0.1 %";
    const tenth = tenths % 10n;
    return sign + groupDigits((tenths / 10n).toString()) + (tenth ? "." + tenth.toString() : "") + " %";
  }

  /* "$120.00 → $108.00 (−10 %)" (no percentage when the amount before is not above 0). */
  function moneyChange(before, after, currency) {
    const text = money(before, currency) + " → " + money(after, currency);
    const low = wholeMinor(before);
    const high = wholeMinor(after);
    if (low === null || high === null || low <= 0n) return text;
    return text + " (" + percentChange(low, high) + ")";
  }

  /* One value of an entity's field: money for a budget or a bid, else its text. */
  function fieldValue(field, value, currency) {
    if (MINOR_UNIT_FIELDS.has(field)) return money(value, currency);
    return value === null || value === undefined ? NO_VALUE : String(value);
  }

  function fieldChange(field, before, after, currency) {
    if (MINOR_UNIT_FIELDS.has(field)) return moneyChange(before, after, currency);
    return fieldValue(field, before, null) + " → " + fieldValue(field, after, null);
  }

  /* "Demo Store US (act_1001)", or the id alone when the account is not registered. */
  function accountText(name, id) {
    return name && name !== id ? `${name} (${id})` : String(id || NO_VALUE);
  }

  /* An amount in currency units with the currency's symbol and decimals (``decimals`` is
     implied by the currency): ``amount`` by the name the Impact panel uses. */
  function fmtMoney(value, currency, _decimals, signed) {
    return amount(value, currency, signed);
  }

  function badge(status) {
    const text = status === null || status === undefined ? "—" : String(status);
    return el("span", { class: "badge status-" + text.toLowerCase().replace(/[^a-z_]/g, "") }, text);
  }

  function pretty(value) {
    return el("pre", { class: "json" }, value === undefined ? "" : JSON.stringify(value, null, 2));
  }

  /* ---- the rule vocabulary (GET /api/rules/vocabulary, loaded once): metrics' units. */
  let vocabLoading = null;

  function vocabulary() {
    if (!vocabLoading) vocabLoading = api("GET", "/api/rules/vocabulary").catch(() => null);
    return vocabLoading;
  }

  /* name → unit ("money", "percent", …) from the vocabulary, patterns included
   * ("actions.omni_purchase" is an "actions.<action_type>"); null when unknown. */
  async function metricUnits() {
    const vocab = await vocabulary();
    const exact = new Map();
    const patterns = [];
    for (const group of (vocab && vocab.metrics) || []) {
      for (const metric of group.metrics) {
        if (metric.pattern) patterns.push([metric.name.split("<")[0], metric.unit]);
        else exact.set(metric.name, metric.unit);
      }
    }
    return (name) => {
      if (exact.has(name)) return exact.get(name);
      const found = patterns.find(([head]) => head && String(name).startsWith(head));
      return found ? found[1] : null;
    };
  }

  /* A metric's value with its unit: money in the account's currency, "1.23 %", "2.5×". */
  function metricValue(value, unit, currency) {
    if (value === null || value === undefined) return NO_VALUE;
    if (Array.isArray(value)) return value.map((v) => metricValue(v, unit, currency)).join(" to ");  /* IN_RANGE */
    if (typeof value !== "number") return String(value);  // a ranking's label
    if (unit === "money") return amount(value, currency);
    if (unit === "percent") return plainNumber(value, 2) + " %";
    if (unit === "multiple") return plainNumber(value, 2) + "×";
    if (unit === "hours") return plainNumber(value, 1) + " h";
    if (unit === "count") return plainNumber(value, Number.isInteger(value) ? 0 : 2);
    return plainNumber(value, Math.abs(value) < 1 ? 3 : 2);
  }

  /* Codes as words: outcomes and reasons of a record, a condition's reason. */
  const WORDS = {
    not_matched: "conditions not met", no_data: "no data", would_apply: "would apply",
    awaiting_approval: "waits for approval", held_out: "held out (not written)", no_change: "nothing to change",
    next_execute_not_reached: "cooling down", execution_count_limit: "done its number of times",
    changed_by_someone_else: "changed by someone else", approval_pending: "an approval is open",
    approval_required: "needs approval", account_currency_mismatch: "account currency not Meta's",
    learning_phase: "ad set in its learning phase", entity_gone: "no longer exists",
  };

  function words(code) {
    if (code === null || code === undefined || code === "") return "";
    return WORDS[code] || String(code).replace(/_/g, " ");
  }

  /* A record's outcome as a badge, in words ("conditions not met"; the code on hover). */
  function outcomeBadge(outcome) {
    const code = outcome === null || outcome === undefined ? "" : String(outcome);
    return el("span", { class: "badge status-" + code.toLowerCase().replace(/[^a-z_]/g, ""), title: code }, words(code) || "—");
  }

  /* "actions:offsite_conversion.fb_pixel_purchase" → "results counted as website purchases (pixel)". */
  const ACTION_WORDS = { omni_purchase: "purchases", purchase: "purchase events", link_click: "link clicks",
    lead: "leads", add_to_cart: "adds to cart", initiate_checkout: "checkouts initiated",
    complete_registration: "registrations", landing_page_view: "landing page views",
    view_content: "content views", mobile_app_install: "app installs" };

  function indicatorWords(indicator) {
    const type = String(indicator).replace(/^[a-z_]+:/, "");
    let text = ACTION_WORDS[type];
    if (!text) {
      const pixel = /^offsite_conversion\.fb_pixel_(.+)$/.exec(type);
      const app = /^app_custom_event\.fb_mobile_(.+)$/.exec(type);
      const onsite = /^onsite_conversion\.(.+)$/.exec(type);
      if (pixel) text = "website " + pixel[1].replace(/_/g, " ") + " (pixel)";
      else if (app) text = "app " + app[1].replace(/_/g, " ");
      else if (onsite) text = onsite[1].replace(/_/g, " ") + " on Meta";
      else text = type.replace(/[._]/g, " ");
    }
    return "results counted as " + text;
  }

  /* One execution record's conditions: the numbers seen (with the metric's unit, money in
   * `currency`) and pass/fail, as a list. `unitOf`: metric name → unit (metricUnits()). */
  function conditionList(conditions, options) {
    const opts = options || {};
    const unitOf = opts.unitOf || (() => null);
    if (!conditions || !conditions.length) return el("span", { class: "muted" }, "not evaluated");
    return el("ul", { class: "conditions" }, conditions.map((c) => {
      const shown = (v, metric) => metricValue(v, unitOf(metric || c.metric), opts.currency);
      const target = c.compare_to
        ? c.compare_to + (c.expected === null ? "" : " = " + shown(c.expected))
        : shown(c.expected);
      const seen = c.actual === null || c.actual === undefined;
      const reason = c.reason && !(seen && c.reason === "no_data") ? words(c.reason) : null;
      return el("li", { class: c.passed ? "pass" : "fail", dataset: { metric: c.metric } },
        el("span", { class: "mark", "aria-label": c.passed ? "passed" : "failed" }, c.passed ? "✓" : "✗"),
        " ", el("code", {}, c.metric + (c.period ? " (" + c.period + ")" : "")),
        " " + c.operator + " " + target + " · seen ",
        el("strong", {}, seen ? "no data" : shown(c.actual)),
        c.indicator ? el("span", { class: "muted indicator", title: c.indicator }, " (" + indicatorWords(c.indicator) + ")") : null,
        reason ? el("span", { class: "reason" }, " " + reason) : null);
    }));
  }

  /* What a field is called where people read it. */
  const FIELD_WORDS = {
    daily_budget: "daily budget", lifetime_budget: "lifetime budget", bid_amount: "bid",
    daily_spend_cap: "daily spend cap", daily_min_spend_target: "daily minimum spend",
    lifetime_spend_cap: "lifetime spend cap", lifetime_min_spend_target: "lifetime minimum spend",
    budget_schedules: "scheduled daily budget",
  };

  function fieldName(field) {
    return FIELD_WORDS[field] || String(field);
  }

  /* "daily budget: $100.00 → $120.00 (+20 %)" in the account's currency, "status: ACTIVE →
   * PAUSED", or "—" when nothing was (or would be) changed. */
  function changeText(record, currency) {
    const none = (v) => v === null || v === undefined;
    if (none(record.field) && none(record.before) && none(record.after)) return "—";
    const field = record.field;
    const change = (field ? fieldName(field) + ": " : "") + fieldChange(field, record.before, record.after, currency)
      + windowText(record.schedule);
    // a held-out change was planned and never written: it must not read like an applied one
    return record.outcome === "held_out" ? "held out (not written): " + change : change;
  }

  /* A budget schedule's window: " in 2026-12-05 18:00:00 – 22:00:00" (deleted: an undo's). */
  function windowText(schedule) {
    if (!schedule || !schedule.time_start) return "";
    const at = (seconds) => fmtTime(new Date(seconds * 1000).toISOString());
    const start = at(schedule.time_start);
    const end = at(schedule.time_end);
    const shown = start.slice(0, 10) === end.slice(0, 10) ? start + " – " + end.slice(11) : start + " – " + end;
    return (schedule.op === "delete" ? ", window deleted: " : " in the window ") + shown;
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

  /* A failure, said beside `anchor` (the control that was used) when given, else at the top. */
  function failed(err, what, anchor) {
    let message = err && err.message ? err.message : String(err);
    if (err && err.status === 401) message += " — paste the API token in the box at the top";
    if (err && err.status === 403) message += " — ask an admin for a token with that role";
    const text = (what ? what + ": " : "") + message;
    if (anchor) say(anchor, text, "error");
    else flash(text, "error");
  }

  /* ---- who the token is (GET /api/whoami), and what its role may do.
   * A button that calls a route says so: data-needs="POST /api/rules" (el(…, {needs: …}) or
   * in a template). Where the token's role is below the route's least role — or there is no
   * token — the button is disabled, with the reason on hover, instead of ending in a 403. */
  const who = { known: false, name: null, role: null, roles: [], routes: {}, problem: null };
  let whoLoading = null;

  function leastRole(needs) {
    if (Object.prototype.hasOwnProperty.call(who.routes, needs)) return who.routes[needs];
    return /^(POST|PUT|PATCH|DELETE) /.test(needs) ? "admin" : "viewer";
  }

  /* Why the token cannot do `needs` ("METHOD /route"), or null when it can (or is not known yet). */
  function refusal(needs) {
    if (!who.known) return null;
    if (!who.role) return who.problem || "needs an API token: paste one in the box at the top";
    const least = leastRole(needs);
    if (who.roles.indexOf(who.role) >= who.roles.indexOf(least)) return null;
    return `needs the ${least} role; the token '${who.name}' is a ${who.role} token`;
  }

  function may(needs) {
    return refusal(needs) === null;
  }

  /* Whether the token holds `role` or a higher one (what a handler asks beyond its route). */
  function hasRole(role) {
    return !!who.role && who.roles.indexOf(who.role) >= who.roles.indexOf(role);
  }

  function applyRole(node) {
    const why = refusal(node.dataset.needs);
    if (why) {
      if (!node.classList.contains("role-disabled")) node.dataset.titleBefore = node.getAttribute("title") || "";
      node.disabled = true;
      node.classList.add("role-disabled");
      node.title = why;
    } else if (node.classList.contains("role-disabled")) {
      node.disabled = false;
      node.classList.remove("role-disabled");
      node.title = node.dataset.titleBefore || "";
    }
  }

  function applyRoles(root) {
    const scope = root || document;
    if (scope.matches && scope.matches("[data-needs]")) applyRole(scope);
    if (scope.querySelectorAll) scope.querySelectorAll("[data-needs]").forEach(applyRole);
  }

  async function loadWho() {
    const value = token();
    let answer = null;
    let problem = null;
    if (value) {
      try {
        answer = await api("GET", "/api/whoami");
      } catch (err) {
        problem = err.status === 401 ? "the API token was not accepted: " + err.message : null;
        if (!problem) answer = { name: null, role: null, roles: [], routes: {} };  // unknown: leave buttons be
      }
    }
    Object.assign(who, { known: !!(answer && answer.role) || !value || !!problem, name: null, role: null,
      roles: [], routes: {}, problem }, answer || {});
    showTokenState();
    applyRoles(document);
    document.dispatchEvent(new CustomEvent("ruleengine:who", { detail: who }));
    return who;
  }

  /* Who the token is, loaded once per token (a promise). */
  function whoami() {
    if (!whoLoading) whoLoading = loadWho();
    return whoLoading;
  }

  function showTokenState() {
    const state = document.getElementById("token-state");
    if (!state) return;
    let text = token() ? "token set" : "no token (read-only)";
    let good = !!token();
    if (who.role) text = `${who.name} · ${who.role}`;
    else if (who.problem) {
      text = "token not accepted";
      good = false;
    }
    state.textContent = text;
    state.title = who.role ? `the API token '${who.name}' has the ${who.role} role` : who.problem || "";
    state.className = "token-state " + (good ? "ok" : "warn");
    state.dataset.role = who.role || "";
  }

  /* ---- a message beside what caused it: after the button (or inside the element) that was
   * used; the next message from the same place replaces it, so no stale error stays. */
  function say(anchor, message, kind) {
    if (!anchor || !anchor.isConnected) {
      flash(message, kind);
      return null;
    }
    const key = anchor.id || anchor.dataset.noteKey || (anchor.dataset.noteKey = "n" + Math.random().toString(36).slice(2));
    const holder = anchor.closest(".note-host") || anchor.parentElement;
    let note = holder.querySelector(`:scope > .inline-note[data-for="${key}"]`);
    if (!message) {
      if (note) note.remove();
      return null;
    }
    if (!note) {
      note = el("span", { class: "inline-note", dataset: { for: key } });
      if (anchor.nextSibling) anchor.parentNode.insertBefore(note, anchor.nextSibling);
      else anchor.parentNode.append(note);
    }
    note.textContent = message;
    note.className = "inline-note " + (kind || "info");
    note.setAttribute("role", kind === "error" ? "alert" : "status");
    return note;
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
      say(clearButton, token() ? "API token saved in this browser" : "API token cleared");
    });
    clearButton.addEventListener("click", () => {
      setToken("");
      say(clearButton, "API token cleared");
    });
    showTokenState();
  }

  /* Buttons added later (rows, panels) get their role check as they are added. */
  function watchRoles() {
    new MutationObserver((changes) => {
      if (!who.known) return;
      for (const change of changes) {
        for (const node of change.addedNodes) if (node.nodeType === 1) applyRoles(node);
      }
    }).observe(document.body, { childList: true, subtree: true });
    whoami();
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
  document.addEventListener("DOMContentLoaded", watchRoles);

  return {
    api, el, badge, pretty, flash, failed, fmtTime, fmtAgo, fmtDuration, fmtRelative, fmtSeconds,
    fmtValue, fmtMoney, timeCell, fmtZoned, zonedTimeCell, fmtNextRun,
    pager, debounce, token, ApiFailure, conditionList, changeText, windowText,
    money, moneyChange, fieldValue, fieldChange, fieldName, accountText,
    whoami, may, hasRole, refusal, applyRoles, say,
    amount, metricValue, metricUnits, vocabulary, words, indicatorWords, minorPerUnit, outcomeBadge,
  };
})();
