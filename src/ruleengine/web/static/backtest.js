/* Rules screen: the Backtest panel — what the rule being edited would have done over the
 * last N days (POST /api/backtests, then GET /api/backtests/{id} until done or failed).
 *
 * Charts are drawn by uPlot (static/vendor/uplot, served by the app itself). Every name
 * from a rule, a user or Meta is inserted as text through RE.el(), never as HTML.
 */
"use strict";

const Backtest = (() => {
  const { el } = RE;
  const $ = (id) => document.getElementById(id);
  const POLL_MS = 700;
  // Okabe–Ito: told apart with the common colour-vision deficiencies.
  const PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#7F7F7F", "#F0E442"];
  const STAGES = { listing: "listing the entities", history: "fetching Insights history", lag: "learning the attribution lag",
    replay: "replaying the runs", done: "done" };

  const state = {
    ruleKey: null,      // which rule the panel belongs to (its id, or "new")
    poll: 0,            // bumped to stop a polling loop (panel closed, new run, other rule)
    result: null,       // the last result shown
    view: null,         // "matured" | "as_seen"
    tasks: [],          // task ids of the rule that was run, in the rule's order
    currencies: new Map(), // account id → its currency (the result's, else GET /api/accounts)
    accounts: null,     // GET /api/accounts, id → account (fetched once)
    charts: [],
  };

  // ---------------------------------------------------------------- formatting

  const intFmt = new Intl.NumberFormat(undefined, { maximumFractionDigits: 0 });
  const numFmt = new Intl.NumberFormat(undefined, { maximumFractionDigits: 2 });

  /* An amount in `currency` (its symbol and decimals); without one, a plain number. */
  function money(value, signed, currency) {
    if (value === null || value === undefined || !Number.isFinite(Number(value))) return "—";
    const options = { maximumFractionDigits: 2 };
    if (signed) options.signDisplay = "exceptZero";
    if (currency) Object.assign(options, { style: "currency", currency });
    else options.minimumFractionDigits = 2;
    try {
      return new Intl.NumberFormat(undefined, options).format(Number(value));
    } catch (_err) {  // a currency code this browser does not know
      return numFmt.format(Number(value)) + (currency ? " " + currency : "");
    }
  }

  /* The currencies a view's per-day money is kept in (one amount each, never summed). */
  function currenciesOf(perDay) {
    const codes = new Set();
    for (const day of perDay) for (const key of ["budget_delta", "budget_total"]) {
      const byCode = day[key];
      if (byCode && typeof byCode === "object") for (const code of Object.keys(byCode)) codes.add(code);
    }
    return [...codes].sort();
  }

  /* Each currency's amount, formatted: "+$12.50 · +¥1,500". */
  function amounts(byCode, codes, signed) {
    return codes.length ? codes.map((code) => money((byCode || {})[code], signed, code)).join(" · ") : money(0, signed);
  }

  function count(n, one, many) {
    return intFmt.format(n) + " " + (n === 1 ? one : many || one + "s");
  }

  function shortDate(iso) {
    return String(iso).slice(5);  // "2026-11-20" → "11-20"
  }

  // ---------------------------------------------------------------- the panel

  function isOpen() {
    return !$("backtest-block").classList.contains("hidden");
  }

  function open() {
    $("backtest-block").classList.remove("hidden");
    $("backtest-toggle").setAttribute("aria-expanded", "true");
    syncAccounts();
    if (state.result) renderView();  // charts need the panel visible to know their width
    $("bt-days").focus();
  }

  function close() {
    state.poll++;  // stops any polling
    $("backtest-block").classList.add("hidden");
    $("backtest-toggle").setAttribute("aria-expanded", "false");
    $("bt-run").disabled = false;
    $("bt-progress").classList.add("hidden");
    $("bt-result").classList.remove("stale");
  }

  function toggle() {
    if (isOpen()) {
      close();
      $("backtest-toggle").focus();
    } else open();
  }

  /* Another rule was loaded in the editor: its backtest starts afresh. */
  function ruleShown(event) {
    const key = event.detail.isNew ? "new" : event.detail.id;
    if (key === state.ruleKey) return;
    state.ruleKey = key;
    close();
    state.result = null;
    destroyCharts();
    $("bt-result").classList.add("hidden");
    $("bt-errors").replaceChildren();
    $("bt-failed").classList.add("hidden");
    $("bt-status").textContent = "";
  }

  /* The account checkboxes follow the editor's ad_accounts; all are checked by default. */
  function syncAccounts() {
    const parsed = RuleEditor.parse();
    const wanted = parsed.value && Array.isArray(parsed.value.ad_accounts)
      ? parsed.value.ad_accounts.filter((a) => typeof a === "string") : [];
    const box = $("bt-accounts");
    const had = new Map([...box.querySelectorAll("input")].map((i) => [i.value, i.checked]));
    if (had.size === wanted.length && wanted.every((a) => had.has(a))) return;
    box.replaceChildren(...wanted.map((account) => el("label", { class: "check" },
      el("input", { type: "checkbox", name: "bt-account", value: account, checked: had.has(account) ? had.get(account) : true }),
      account)));
    $("bt-accounts-none").classList.toggle("hidden", wanted.length > 0);
  }

  async function accountsById() {
    if (state.accounts === null) {
      try {
        const data = await RE.api("GET", "/api/accounts");
        state.accounts = new Map(data.items.map((a) => [a.id, a]));
      } catch (_err) {
        state.accounts = new Map();  // no currency then; the numbers are still right
      }
    }
    return state.accounts;
  }

  // ---------------------------------------------------------------- running

  function requestBody() {
    const parsed = RuleEditor.parse();
    if (parsed.error) return { errors: [{ path: "rule", message: parsed.error.message }] };
    syncAccounts();
    const boxes = [...$("bt-accounts").querySelectorAll("input")];
    const checked = boxes.filter((b) => b.checked).map((b) => b.value);
    if (boxes.length && !checked.length) {
      return { errors: [{ path: "accounts", message: "choose at least one account" }] };
    }
    const days = Number($("bt-days").value);
    if (!Number.isInteger(days) || days < 1 || days > 90) {
      return { errors: [{ path: "days", message: "needs a whole number of days from 1 to 90" }] };
    }
    const body = { rule: parsed.value, days };
    if (checked.length < boxes.length) body.accounts = checked;
    body.as_seen = { auto: null, on: true, off: false }[$("bt-as-seen").value];
    return { body };
  }

  async function run(event) {
    event.preventDefault();
    const poll = ++state.poll;
    $("bt-errors").replaceChildren();
    $("bt-failed").classList.add("hidden");
    const { body, errors } = requestBody();
    if (errors) {
      showErrors(errors);
      return;
    }
    state.tasks = Array.isArray(body.rule.tasks) ? body.rule.tasks.map((t) => t && t.id).filter((id) => typeof id === "string") : [];
    $("bt-run").disabled = true;
    $("bt-result").classList.add("stale");  // the last result stays, dimmed, until this one
    showProgress({ days_done: 0, days_total: body.days, stage: "starting" }, "starting");
    let job;
    try {
      job = await RE.api("POST", "/api/backtests", body);
    } catch (err) {
      $("bt-run").disabled = false;
      $("bt-progress").classList.add("hidden");
      if (err.status === 422) showErrors((err.body && err.body.errors) || [{ path: "", message: err.message }]);
      else showFailure(err.status === 401 ? err.message + " — paste the API token in the box at the top" : err.message);
      return;
    }
    $("backtest-block").dataset.backtestId = job.id;  // which backtest is shown (GET /api/backtests/{id})
    await follow(job.id, poll);
  }

  async function follow(id, poll) {
    for (let misses = 0; ;) {
      let job;
      try {
        job = await RE.api("GET", "/api/backtests/" + encodeURIComponent(id));
        misses = 0;
      } catch (err) {
        if (poll !== state.poll) return;
        // a web app restarting answers nothing for a moment: try again, 3 times
        if (err.status === 0 && ++misses < 4) {
          await new Promise((resolve) => setTimeout(resolve, POLL_MS));
          continue;
        }
        $("bt-run").disabled = false;
        $("bt-progress").classList.add("hidden");
        showFailure("could not read the backtest: " + err.message);
        return;
      }
      if (poll !== state.poll) return;  // closed, or another run started
      if (job.status === "done" || job.status === "failed") {
        $("bt-run").disabled = false;
        $("bt-progress").classList.add("hidden");
        if (job.status === "failed") showFailure(job.error || "the backtest failed");
        else await show(job.result);
        return;
      }
      showProgress(job.progress || {}, job.status);
      await new Promise((resolve) => setTimeout(resolve, POLL_MS));
      if (poll !== state.poll) return;
    }
  }

  function showProgress(progress, status) {
    const total = Number(progress.days_total) || 0;
    const done = Math.min(Number(progress.days_done) || 0, total);
    $("bt-progress").classList.remove("hidden");
    const bar = $("bt-progress-bar");
    bar.max = Math.max(total, 1);
    bar.value = done;
    const stage = status === "queued" ? "queued (backtests run one at a time)"
      : STAGES[progress.stage] || progress.stage || status;
    $("bt-progress-text").textContent = `${stage} · ${intFmt.format(done)} of ${count(total, "day")}`;
  }

  function showErrors(errors) {
    const text = $("rule-editor").value;
    $("bt-errors").replaceChildren(...errors.map((e) => {
      const path = e.path || "";
      const inRule = path === "rule" || path.startsWith("rule.") || path.startsWith("rule[");
      const rulePath = inRule ? path.replace(/^rule\.?/, "") : null;
      const where = inRule ? RuleEditor.lineOf(text, rulePath) : null;
      const attrs = { class: "field-error", dataset: { path } };
      if (where) {
        Object.assign(attrs, { tabindex: "0", title: "go to line " + where.line,
          onclick: () => RuleEditor.focusOffset(where.offset),
          onkeydown: (ev) => { if (ev.key === "Enter") RuleEditor.focusOffset(where.offset); } });
      }
      return el("li", attrs,
        el("code", { class: "path" }, path || "(request)"),
        el("span", { class: "line" }, where ? "line " + where.line : ""),
        el("span", { class: "message" }, e.message));
    }));
    $("bt-result").classList.add("hidden");
    $("bt-status").textContent = `the backtest was not started: ${count(errors.length, "problem")}`;
  }

  function showFailure(message) {
    const box = $("bt-failed");
    box.textContent = "The backtest failed: " + message;
    box.classList.remove("hidden");
    $("bt-result").classList.add("hidden");
    $("bt-status").textContent = "";
  }

  // ---------------------------------------------------------------- the result

  async function show(result) {
    const known = result.currencies || {};
    const accounts = Object.keys(known).length ? new Map() : await accountsById();
    state.currencies = new Map((result.accounts || []).map((a) => [a, known[a] || (accounts.get(a) && accounts.get(a).currency) || null]));
    state.result = result;
    state.view = result.views && result.views[result.view] ? result.view : "matured";
    $("bt-result").classList.remove("hidden", "stale");
    renderView();
    const fires = viewOf(result, state.view).fires.length;
    $("bt-status").textContent = `backtest done: ${count(fires, "fire")} in ${count(result.days, "day")}`;
  }

  function viewOf(result, name) {
    const view = result.views && result.views[name];
    if (view) return view;
    return { runs: result.runs, fires: result.fires || [], per_day: result.per_day || [], entities: result.entities || [] };
  }

  /* Why there is no as-seen view: each account's reason, from the lag model. */
  function asSeenWhy(result) {
    const accounts = (result.as_seen && result.as_seen.accounts) || {};
    const reasons = Object.entries(accounts).filter(([, a]) => a && a.why).map(([id, a]) => id + ": " + a.why);
    return reasons.length ? reasons.join("; ") : "no as-seen numbers for this backtest";
  }

  function renderView() {
    const result = state.result;
    const view = viewOf(result, state.view);
    const asSeen = result.views && result.views.as_seen;
    for (const button of $("bt-view").querySelectorAll("button")) {
      button.setAttribute("aria-pressed", String(button.dataset.view === state.view));
    }
    $("bt-view-as_seen").disabled = !asSeen;
    $("bt-view-why").textContent = asSeen ? "" : "As seen is off: " + asSeenWhy(result);
    $("bt-view-as_seen").title = asSeen ? "the numbers as each run would have seen them" : asSeenWhy(result);

    const perDay = view.per_day || [];
    const sum = (key) => perDay.reduce((s, d) => s + (Number(d[key]) || 0), 0);
    const codes = currenciesOf(perDay);
    const moved = Object.fromEntries(codes.map((code) => [code, perDay.reduce((s, d) => s + (Number((d.budget_delta || {})[code]) || 0), 0)]));
    $("bt-summary").replaceChildren(
      el("strong", {}, `${result.since} – ${result.until}`),
      ` (${count(result.days, "day")}, ${(result.accounts || []).join(", ")}) · `,
      `${count(view.runs, "run")} · ${count(view.fires.length, "fire")} · budget moved ${amounts(moved, codes, true)} · `,
      `${intFmt.format(sum("paused"))} paused, ${intFmt.format(sum("activated"))} activated · `,
      el("span", { class: "muted" }, `${count(result.graph_calls, "Graph call")}, ${count(result.cache_hits, "cache hit")}`));

    const empty = view.fires.length === 0;
    $("bt-empty").classList.toggle("hidden", !empty);
    $("bt-empty").textContent = empty
      ? `The rule would not have fired in these ${intFmt.format(result.days)} days` +
        ` (${intFmt.format(view.runs)} scheduled runs evaluated, ${state.view === "as_seen" ? "as-seen" : "matured"} numbers).` : "";
    $("bt-fired").classList.toggle("hidden", empty);
    destroyCharts();
    if (!empty) {
      renderFiresChart(perDay);
      renderBudgetChart(perDay);
      renderDays(perDay);
      renderEntities(view.entities || [], result.differs_as_seen || []);
    }
    renderDiffers(result.differs_as_seen || [], !!asSeen);
    $("bt-caveats").replaceChildren(...(result.caveats || []).map((c) => el("li", {}, c)));
  }

  function taskOrder(perDay) {
    const tasks = [...state.tasks];
    for (const day of perDay) for (const task of Object.keys(day.by_task || {})) if (!tasks.includes(task)) tasks.push(task);
    return tasks;
  }

  function chartWidth(node) {
    return Math.max(320, Math.floor(node.getBoundingClientRect().width) || 560);
  }

  function dayAxis(labels) {
    return {
      stroke: "#5e6678",
      grid: { show: false },
      incrs: [1, 2, 5, 7, 14, 30],
      values: (u, splits) => splits.map((i) => (Number.isInteger(i) && labels[i] ? shortDate(labels[i]) : "")),
    };
  }

  function renderFiresChart(perDay) {
    const node = $("bt-fires-chart");
    const tasks = taskOrder(perDay);
    const labels = perDay.map((d) => d.date);
    const own = tasks.map((t) => perDay.map((d) => Number((d.by_task || {})[t]) || 0));
    // Stacked: each task's bar reaches the sum of the tasks below it and itself; the
    // tallest is drawn first so the ones below cover it.
    const stacked = own.map((_, i) => labels.map((_d, j) => own.slice(0, i + 1).reduce((s, row) => s + row[j], 0)));
    const order = tasks.map((_, i) => i).reverse();
    const colour = (i) => PALETTE[i % PALETTE.length];
    const bars = uPlot.paths.bars({ size: [0.7, 48], align: 0 });
    const max = Math.max(1, ...perDay.map((d) => Number(d.fires) || 0));
    const opts = {
      width: chartWidth(node), height: 220,
      legend: { show: false },
      cursor: { drag: { x: false, y: false }, points: { show: false } },
      scales: { x: { time: false, range: [-0.5, labels.length - 0.5] }, y: { range: [0, max * 1.1] } },
      axes: [dayAxis(labels), { stroke: "#5e6678", size: 44, incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000],
        values: (u, splits) => splits.map((v) => intFmt.format(v)) }],
      series: [{}, ...order.map((i) => ({ label: tasks[i], fill: colour(i), stroke: colour(i), width: 0, paths: bars, points: { show: false } }))],
      hooks: { setCursor: [(u) => readout("bt-fires-readout", u.cursor.idx, (j) =>
        shortDate(labels[j]) + ": " + tasks.map((t, i) => `${t} ${intFmt.format(own[i][j])}`).join(", "))] },
    };
    const data = [labels.map((_, j) => j), ...order.map((i) => stacked[i])];
    state.charts.push(new uPlot(opts, data, node));
    node.setAttribute("aria-label", "Fires per day by task: " + tasks.map((t, i) =>
      `${t} ${intFmt.format(own[i].reduce((a, b) => a + b, 0))}`).join(", ") + ". The same numbers are in the per-day table below.");
    $("bt-fires-legend").replaceChildren(...tasks.map((t, i) => el("span", { class: "legend-item", dataset: { task: t } },
      swatch(colour(i)), t + " ",
      el("span", { class: "muted" }, "(" + intFmt.format(own[i].reduce((a, b) => a + b, 0)) + ")"))));
  }

  function swatch(colour) {
    const node = el("span", { class: "swatch", "aria-hidden": "true" });
    node.style.background = colour;  // through the CSSOM: the page's CSP refuses style attributes
    return node;
  }

  /* One line per currency, each on its own scale (amounts of two currencies are never
     added, nor drawn against one axis). */
  function renderBudgetChart(perDay) {
    const node = $("bt-budget-chart");
    const labels = perDay.map((d) => d.date);
    const codes = currenciesOf(perDay);
    const totals = codes.map((code) => perDay.map((d) => {
      const value = (d.budget_total || {})[code];
      return value === null || value === undefined ? null : Number(value);
    }));
    $("bt-budget-title").textContent = "Daily budget of the affected entities" + (codes.length ? `, per currency (${codes.join(", ")})` : "");
    const none = totals.every((line) => line.every((v) => !v)) && perDay.every((d) => codes.every((c) => !Number((d.budget_delta || {})[c])));
    $("bt-budget-none").classList.toggle("hidden", !none);
    node.classList.toggle("hidden", none);
    if (none) return;  // nothing to draw: say so rather than a flat line at 0
    const colour = (i) => PALETTE[i % PALETTE.length];
    const opts = {
      width: chartWidth(node), height: 220,
      legend: { show: false },
      cursor: { drag: { x: false, y: false } },
      scales: Object.assign({ x: { time: false, range: [-0.5, labels.length - 0.5] } }, ...codes.map((code) => ({ [code]: {} }))),
      axes: [dayAxis(labels), ...codes.slice(0, 2).map((code, i) => ({ scale: code, side: i ? 1 : 3, stroke: colour(i), size: 80,
        values: (u, splits) => splits.map((v) => money(v, false, code)) }))],
      series: [{}, ...codes.map((code, i) => ({ label: code, scale: code, stroke: colour(i), width: 2, points: { show: true, size: 4 } }))],
      hooks: { setCursor: [(u) => readout("bt-budget-readout", u.cursor.idx, (j) =>
        shortDate(labels[j]) + ": " + codes.map((code, i) => money(totals[i][j], false, code)).join(" · "))] },
    };
    state.charts.push(new uPlot(opts, [labels.map((_, j) => j), ...totals], node));
    const words = codes.map((code, i) => {
      const known = totals[i].filter((v) => v !== null);
      return known.length ? `${code} from ${money(known[0], false, code)} to ${money(known[known.length - 1], false, code)}` : `${code} unknown`;
    });
    node.setAttribute("aria-label", `Daily budget of the affected entities per currency, ${labels[0]} to ${labels[labels.length - 1]}: ${words.join("; ")}.`);
    $("bt-budget-legend").replaceChildren(...(codes.length > 1 ? codes.map((code, i) => el("span", { class: "legend-item" }, swatch(colour(i)), code)) : []));
  }

  function readout(id, idx, text) {
    $(id).textContent = idx === null || idx === undefined ? "\u00a0" : text(idx);
  }

  function destroyCharts() {
    for (const chart of state.charts) chart.destroy();
    state.charts = [];
  }

  function renderDays(perDay) {
    const tasks = taskOrder(perDay);
    const codes = currenciesOf(perDay);  // a column per currency: two are never added
    $("bt-days-table").tHead.rows[0].replaceChildren(el("th", {}, "Day"), el("th", { class: "num" }, "Fires"),
      ...tasks.map((t) => el("th", { class: "num" }, t)),
      ...codes.map((code) => el("th", { class: "num" }, `Budget moved (${code})`)),
      ...codes.map((code) => el("th", { class: "num" }, `Budget at day end (${code})`)),
      el("th", { class: "num" }, "Paused"), el("th", { class: "num" }, "Activated"));
    $("bt-days-table").tBodies[0].replaceChildren(...perDay.map((d) => el("tr", { dataset: { date: d.date } },
      el("td", {}, d.date), el("td", { class: "num" }, intFmt.format(d.fires)),
      ...tasks.map((t) => el("td", { class: "num" }, intFmt.format(Number((d.by_task || {})[t]) || 0))),
      ...codes.map((code) => el("td", { class: "num" }, money((d.budget_delta || {})[code], true, code))),
      ...codes.map((code) => el("td", { class: "num" }, money((d.budget_total || {})[code], false, code))),
      el("td", { class: "num" }, intFmt.format(d.paused)), el("td", { class: "num" }, intFmt.format(d.activated)))));
  }

  function change(before, after, format) {
    const f = format || ((v) => (v === null || v === undefined ? "—" : String(v)));
    if (JSON.stringify(before) === JSON.stringify(after)) return el("span", { class: "muted" }, f(before));
    return el("span", { class: "changed" }, f(before) + " → " + f(after));
  }

  function renderEntities(entities, differs) {
    const differing = new Set(differs.map((d) => d.account + "|" + d.entity_id));
    $("bt-entities").tBodies[0].replaceChildren(...entities.map((e) => {
      const b = e.before || {};
      const a = e.after || {};
      const odd = differing.has(e.account + "|" + e.entity_id);
      return el("tr", { class: odd ? "differs" : "", dataset: { entityId: e.entity_id } },
        el("td", {}, el("div", {}, e.entity_name || e.entity_id),
          el("div", { class: "muted" }, e.entity_id), odd ? el("span", { class: "badge status-skipped" }, "differs as seen") : null),
        el("td", {}, e.account),
        el("td", { class: "num" }, intFmt.format(e.fires)),
        el("td", {}, change(b.status, a.status)),
        el("td", { class: "num" }, change(b.daily_budget, a.daily_budget, (v) => money(v, false, e.currency || state.currencies.get(e.account)))),
        el("td", {}, change(b.name, a.name)));
    }));
  }

  function renderDiffers(differs, haveAsSeen) {
    $("bt-differs-block").classList.toggle("hidden", !haveAsSeen);
    $("bt-differs-none").classList.toggle("hidden", differs.length > 0);
    $("bt-differs-wrap").classList.toggle("hidden", differs.length === 0);
    $("bt-differs-count").textContent = differs.length ? `(${intFmt.format(differs.length)})` : "";
    $("bt-differs").tBodies[0].replaceChildren(...differs.map((d) => el("tr", { class: "differs", dataset: { entityId: d.entity_id } },
      el("td", { title: d.time }, RE.fmtTime(d.time)),
      el("td", {}, el("div", {}, d.entity_name || d.entity_id), el("div", { class: "muted" }, d.entity_id + " · " + d.account)),
      el("td", {}, d.task), el("td", {}, d.action),
      el("td", {}, el("span", { class: "badge status-skipped" }, d.only_in === "as_seen" ? "as seen only" : "matured only")))));
  }

  function setView(name) {
    if (!state.result || name === state.view) return;
    if (name === "as_seen" && !(state.result.views && state.result.views.as_seen)) return;
    state.view = name;
    renderView();
  }

  function resize() {
    if (state.result && isOpen() && state.charts.length) renderView();
  }

  // ---------------------------------------------------------------- wiring

  document.addEventListener("ruleeditor:shown", ruleShown);
  document.addEventListener("DOMContentLoaded", () => {
    $("backtest-toggle").addEventListener("click", toggle);
    $("bt-close").addEventListener("click", () => {
      close();
      $("backtest-toggle").focus();
    });
    $("backtest-block").addEventListener("keydown", (event) => {
      if (event.key === "Escape") {
        close();
        $("backtest-toggle").focus();
      }
    });
    $("backtest-form").addEventListener("submit", run);
    for (const button of $("bt-view").querySelectorAll("button")) {
      button.addEventListener("click", () => setView(button.dataset.view));
    }
    $("rule-editor").addEventListener("input", RE.debounce(() => { if (isOpen()) syncAccounts(); }, 400));
    window.addEventListener("resize", RE.debounce(resize, 200));
  });

  return { show, isOpen };
})();
