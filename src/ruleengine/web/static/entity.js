/* Entity timeline screen (/entities/{id}): the entity's budget as steps and its paused
 * periods as bands, each change marked with who made it (a rule and its version, a
 * follow-up, or "outside the engine"), spend per day and the acting rule's first metric as
 * lines on a second axis, the budget schedules it was given (their windows shaded, and a
 * table of them: the budget in each window, who made it, who deleted it) and the executions
 * on the entity (GET /api/entities/{id}/timeline).
 *
 * Spend per day comes from Insights (GET /api/entities/{id}/insights: the history cache the
 * backtest uses) where the token may read it, so the whole period is drawn and not only the
 * moments rules ran; otherwise from what the runs saw. Money is in the account's currency
 * (RE.money); an ad has no budget of its own, and its chart says so.
 *
 * Drawn by uPlot (static/vendor/uplot). The CSP refuses style attributes, so positions
 * are set through the CSSOM; every name is inserted as text through RE.el().
 */
"use strict";

(() => {
  const { api, el, failed, timeCell, changeText, fieldChange, fieldName, words, accountText } = RE;
  const $ = (id) => document.getElementById(id);
  const entityId = decodeURIComponent(location.pathname.split("/").filter(Boolean)[1] || "");
  const COLOURS = { budget: "#0072B2", spend: "#E69F00", metric: "#009E73", paused: "rgba(107,115,133,0.16)",
    scheduled: "rgba(0,114,178,0.12)" };
  const LEVEL_WORDS = { campaign: "campaign", adset: "ad set", ad: "ad" };
  const INSIGHTS = "GET /api/entities/{id}/insights";
  const state = { chart: null, currency: null };

  const secs = (iso) => new Date(iso).getTime() / 1000;
  const money = (minor) => RE.money(minor, state.currency);

  /* Spend per day from Insights: {series, note}; series null where it could not be read. */
  async function insightsSpend(days) {
    await RE.whoami();
    const refused = RE.refusal(INSIGHTS);
    if (refused) return { series: null, note: `spend per day is what the rules saw (Insights ${refused})` };
    try {
      const answer = await api("GET", `/api/entities/${encodeURIComponent(entityId)}/insights?days=${days}`);
      return { series: answer.series, note: answer.problem ? "Insights: " + answer.problem : null };
    } catch (err) {
      return { series: null, note: "spend per day is what the rules saw (Insights: " + err.message + ")" };
    }
  }

  /* The value of a step series at each x (the last step at or before it). */
  function stepsAt(steps, xs) {
    return xs.map((x) => {
      let value = null;
      for (const s of steps) if (secs(s.at) <= x) value = s.value;
      return value;
    });
  }

  function paused(steps, end) {
    const bands = [];
    steps.forEach((s, i) => {
      if (s.value !== "ACTIVE") bands.push([secs(s.at), i + 1 < steps.length ? secs(steps[i + 1].at) : end]);
    });
    return bands;
  }

  /* Spend per day at noon UTC of each day: Insights' where read, else the most a run saw. */
  function spendPoints(body, insights) {
    const days = new Map(body.spend.map((d) => [d.date, Number(d.spend)]));
    for (const d of insights || []) days.set(d.date, Number(d.spend));
    return [...days.entries()].sort().map(([date, spend]) => [secs(date + "T12:00:00Z"), spend]);
  }

  function chartData(body, now, insights) {
    const budget = body.fields.daily_budget || body.fields.lifetime_budget || { steps: [], changes: [] };
    const spend = spendPoints(body, insights);
    const metric = body.metric ? body.metric.points.filter((p) => p.value !== null).map((p) => [secs(p.at), Number(p.value)]) : [];
    const xs = [...new Set([...budget.steps.map((s) => secs(s.at)), ...spend.map((p) => p[0]), ...metric.map((p) => p[0]), now])].sort((a, b) => a - b);
    const at = (points) => xs.map((x) => { const p = points.find((q) => q[0] === x); return p ? p[1] : null; });
    const budgets = stepsAt(budget.steps, xs).map((v) => (v === null ? null : Number(v) / RE.minorPerUnit(state.currency)));
    return { xs, budget, series: [xs, budgets, at(spend), at(metric)] };
  }

  /* Change markers: a labelled element per change over the plot, placed from the x scale. */
  function placeMarkers(u, changes) {
    u.over.querySelectorAll(".change-marker").forEach((n) => n.remove());
    changes.forEach((ch, i) => {
      const label = el("span", { class: "change-label" }, ch.by.label);
      label.style.top = 2 + (i % 8) * 15 + "px";  // changes minutes apart would overlap: stagger
      const marker = el("div", { class: "change-marker by-" + ch.by.kind,
        title: `${fieldName(ch.field)}: ${fieldChange(ch.field, ch.before, ch.after, state.currency)}`,
        dataset: { kind: ch.by.kind, field: ch.field } }, label);
      const left = u.valToPos(secs(ch.at), "x");
      marker.style.left = Math.round(left) + "px";  // CSSOM: allowed by the CSP
      if (left > u.over.clientWidth * 0.6) marker.classList.add("label-left");  // stay inside the plot
      u.over.append(marker);
    });
  }

  function drawBands(u, bands, colour) {
    const ctx = u.ctx;
    ctx.save();
    ctx.fillStyle = colour || COLOURS.paused;
    for (const [from, to] of bands) {
      const left = u.valToPos(from, "x", true);
      const right = u.valToPos(to, "x", true);
      ctx.fillRect(left, u.bbox.top, Math.max(1, right - left), u.bbox.height);
    }
    ctx.restore();
  }

  /* What the chart shows, in words: its caption, and its legend's entries. */
  function chartWords(body, hasBudget) {
    const what = LEVEL_WORDS[body.level] || "entity";
    const metric = body.metric ? `${body.metric.metric}${body.metric.period ? " (" + body.metric.period + ")" : ""}` : null;
    const lines = ["spend per day", metric ? metric + ", as the acting rule saw it" : null].filter(Boolean).join(" and ");
    const caption = hasBudget
      ? `Budget of the ${what} (steps, left axis; paused periods shaded), each change marked with who made it; ${lines} (right axis)`
      : `The ${what}'s ${lines} (right axis; paused periods shaded), each change marked with who made it — ${body.level === "ad" ? "an ad has no budget of its own" : "it has no budget of its own"}`;
    const legend = [hasBudget ? ["budget", COLOURS.budget] : null, ["spend per day", COLOURS.spend],
      metric ? [metric, COLOURS.metric] : null, ["paused", COLOURS.paused],
      (body.schedules || []).length ? ["scheduled budget", COLOURS.scheduled] : null].filter(Boolean);
    return { caption, legend, metric };
  }

  function render(body, insights) {
    const node = $("entity-chart");
    const now = Date.now() / 1000;
    const { xs, budget, series } = chartData(body, now, insights);
    const status = body.fields.status || { steps: [], changes: [] };
    const bands = paused(status.steps, now);
    // a schedule's window, until an undo deleted it (the rest of it was not raised)
    const windows = (body.schedules || []).map((w) => [secs(w.time_start),
      w.deleted_at ? Math.min(secs(w.time_end), secs(w.deleted_at)) : secs(w.time_end)]);
    const changes = [...Object.entries(body.fields)].flatMap(([field, f]) => f.changes.map((ch) => ({ ...ch, field })));
    const hasBudget = budget.steps.length > 0;
    const shown = chartWords(body, hasBudget);
    if (state.chart) state.chart.destroy();
    const opts = {
      width: Math.max(320, Math.floor(node.getBoundingClientRect().width) || 900), height: 300,
      legend: { show: false },
      cursor: { drag: { x: false, y: false } },
      scales: { x: { time: true, range: [secs(body.since), now] }, y: {}, y2: {} },
      axes: [{ stroke: "#5e6678" }, { stroke: COLOURS.budget, size: 70, show: hasBudget },
        { stroke: "#5e6678", scale: "y2", side: 1, size: 60, grid: { show: false } }],
      series: [{},
        { label: "budget", scale: "y", stroke: COLOURS.budget, width: 2, paths: uPlot.paths.stepped({ align: 1 }), spanGaps: true, points: { show: false }, show: hasBudget },
        { label: "spend per day", scale: "y2", stroke: COLOURS.spend, width: 1.5, spanGaps: true, points: { show: true, size: 5 } },
        { label: shown.metric || "metric", scale: "y2", stroke: COLOURS.metric, width: 1.5, dash: [4, 3], spanGaps: true, points: { show: true, size: 4 }, show: !!shown.metric }],
      hooks: {
        drawClear: [(u) => drawBands(u, bands), (u) => drawBands(u, windows, COLOURS.scheduled)],
        draw: [(u) => placeMarkers(u, changes)],
        setCursor: [(u) => {
          const i = u.cursor.idx;
          $("entity-readout").textContent = i === null || i === undefined ? "\u00a0" : readout(xs[i], series, i, hasBudget);
        }],
      },
    };
    state.chart = new uPlot(opts, series, node);
    $("entity-caption").textContent = shown.caption;
    node.setAttribute("aria-label", `${hasBudget ? "Budget" : "Spend per day"} of ${body.entity_name || body.entity_id} over ${body.days} days: `
      + `${changes.length} change(s), listed in the Changes table below.`);
    $("entity-legend").replaceChildren(...shown.legend.map(([label, colour]) => el("span", { class: "legend-item" }, swatch(colour), label)));
    renderChanges(changes);
    renderSchedules(body.schedules || []);
    renderExecutions(body.executions);
  }

  function renderSchedules(items) {
    const rows = [...items].reverse().map((w) =>
      el("tr", { class: "schedule-row", dataset: { scheduleId: w.schedule_id } },
        el("td", {}, RE.fmtTime(w.time_start) + " – " + RE.fmtTime(w.time_end)),
        el("td", { class: "change" }, fieldChange("budget_schedules", w.before, w.after, state.currency)),
        el("td", {}, w.by.label),
        el("td", {}, w.deleted_at ? `deleted ${RE.fmtTime(w.deleted_at)} (${w.deleted_by.label})` : "—")));
    $("schedules-table").querySelector("tbody").replaceChildren(...(rows.length ? rows
      : [el("tr", {}, el("td", { colspan: "4", class: "muted" }, "No budget schedule in the period."))]));
  }

  function readout(x, series, i, hasBudget) {
    const when = RE.fmtTime(new Date(x * 1000).toISOString());
    const spend = series[2][i] === null ? null : "spend that day " + RE.amount(series[2][i], state.currency);
    const budget = hasBudget ? "budget " + (series[1][i] === null ? "—" : money(Math.round(series[1][i] * RE.minorPerUnit(state.currency)))) : null;
    return when + ": " + [budget, spend].filter(Boolean).join(", ");
  }

  function swatch(colour) {
    const node = el("span", { class: "swatch", "aria-hidden": "true" });
    node.style.background = colour;
    return node;
  }

  function renderChanges(changes) {
    const rows = [...changes].sort((a, b) => secs(b.at) - secs(a.at)).map((ch) =>
      el("tr", { class: "change-row by-" + ch.by.kind, dataset: { kind: ch.by.kind } },
        timeCell(ch.at), el("td", {}, fieldName(ch.field)),
        el("td", { class: "change" }, fieldChange(ch.field, ch.before, ch.after, state.currency)),
        el("td", {}, ch.by.label)));
    $("changes-table").querySelector("tbody").replaceChildren(...(rows.length ? rows
      : [el("tr", {}, el("td", { colspan: "4", class: "muted" }, "No change in the period."))]));
  }

  function renderExecutions(items) {
    $("entity-executions").querySelector("tbody").replaceChildren(...items.map((r) =>
      el("tr", { class: "outcome-" + r.outcome, dataset: { batchId: r.batch_id || "" } },
        timeCell(r.created_at),
        el("td", {}, `${r.rule_name || r.rule_id} v${r.rule_version}`),
        el("td", {}, r.kind), el("td", {}, RE.outcomeBadge(r.outcome), r.reason ? el("div", { class: "muted", title: r.reason }, words(r.reason)) : null),
        el("td", { class: "change" }, changeText(r, state.currency)),
        el("td", {}, r.batch_id ? el("a", { href: "/logs?" + new URLSearchParams({ batch: r.batch_id }).toString(), title: "this batch in Rule Logs" }, r.batch_id) : ""))));
  }

  async function load() {
    const days = $("entity-days").value;
    try {
      const [body, insights] = await Promise.all([
        api("GET", `/api/entities/${encodeURIComponent(entityId)}/timeline?days=${days}`),
        insightsSpend(days),
      ]);
      state.currency = body.currency || null;
      $("entity-title").textContent = `${body.entity_name || ""} (${body.entity_id})`;
      const where = body.account ? `${LEVEL_WORDS[body.level] || "entity"} of ${accountText(body.account_name, body.account)}` +
        (body.currency ? `, money in ${body.currency}` : "") + `, last ${body.days} days` : "";
      $("entity-summary").textContent = where + (body.truncated ? " (the oldest records left out)" : "");
      $("entity-insights-note").textContent = insights.note || "";
      $("entity-empty").classList.toggle("hidden", body.executions.length > 0);
      render(body, insights.series);
    } catch (err) {
      failed(err, "loading the timeline");
    }
  }

  $("entity-days").addEventListener("change", load);
  load();
})();
