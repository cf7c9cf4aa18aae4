/* Entity timeline screen (/entities/{id}): the entity's budget as steps and its paused
 * periods as bands, each change marked with who made it (a rule and its version, a
 * follow-up, or "outside the engine"), spend and the main metric as lines on a second
 * axis, and the executions on the entity (GET /api/entities/{id}/timeline).
 *
 * Drawn by uPlot (static/vendor/uplot). The CSP refuses style attributes, so positions
 * are set through the CSSOM; every name is inserted as text through RE.el().
 */
"use strict";

(() => {
  const { api, el, badge, failed, timeCell, changeText } = RE;
  const $ = (id) => document.getElementById(id);
  const entityId = decodeURIComponent(location.pathname.split("/").filter(Boolean)[1] || "");
  // Meta's zero-decimal currencies (budgets are whole units there); others are in cents.
  const ZERO_DECIMAL = new Set(["CLP", "COP", "CRC", "HUF", "ISK", "IDR", "JPY", "KRW", "PYG", "TWD", "VND"]);
  const COLOURS = { budget: "#0072B2", spend: "#E69F00", metric: "#009E73", paused: "rgba(107,115,133,0.16)" };
  const state = { chart: null, currency: null };

  const secs = (iso) => new Date(iso).getTime() / 1000;
  const offset = () => (ZERO_DECIMAL.has((state.currency || "").toUpperCase()) ? 1 : 100);

  function money(minor) {
    if (minor === null || minor === undefined) return "—";
    const value = Number(minor) / offset();
    try {
      return new Intl.NumberFormat(undefined, state.currency ? { style: "currency", currency: state.currency } : {}).format(value);
    } catch (_err) {
      return String(value);
    }
  }

  function fieldValue(field, value) {
    return field.endsWith("budget") ? money(value) : value === null || value === undefined ? "—" : String(value);
  }

  async function currencyOf(account) {
    try {
      const accounts = await api("GET", "/api/accounts");
      const found = accounts.items.find((a) => a.id === account);
      return found ? found.currency : null;
    } catch (_err) {
      return null;  // without it budgets are shown as numbers
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

  function chartData(body, now) {
    const budget = body.fields.daily_budget || body.fields.lifetime_budget || { steps: [], changes: [] };
    const spend = body.spend.map((d) => [secs(d.date + "T12:00:00Z"), Number(d.spend)]);
    const metric = body.metric ? body.metric.points.filter((p) => p.value !== null).map((p) => [secs(p.at), Number(p.value)]) : [];
    const xs = [...new Set([...budget.steps.map((s) => secs(s.at)), ...spend.map((p) => p[0]), ...metric.map((p) => p[0]), now])].sort((a, b) => a - b);
    const at = (points) => xs.map((x) => { const p = points.find((q) => q[0] === x); return p ? p[1] : null; });
    const budgets = stepsAt(budget.steps, xs).map((v) => (v === null ? null : Number(v) / offset()));
    return { xs, budget, series: [xs, budgets, at(spend), at(metric)] };
  }

  /* Change markers: a labelled element per change over the plot, placed from the x scale. */
  function placeMarkers(u, changes) {
    u.over.querySelectorAll(".change-marker").forEach((n) => n.remove());
    changes.forEach((ch, i) => {
      const label = el("span", { class: "change-label" }, ch.by.label);
      label.style.top = 2 + (i % 8) * 15 + "px";  // changes minutes apart would overlap: stagger
      const marker = el("div", { class: "change-marker by-" + ch.by.kind, title: `${ch.field}: ${fieldValue(ch.field, ch.before)} → ${fieldValue(ch.field, ch.after)}`,
        dataset: { kind: ch.by.kind, field: ch.field } }, label);
      const left = u.valToPos(secs(ch.at), "x");
      marker.style.left = Math.round(left) + "px";  // CSSOM: allowed by the CSP
      if (left > u.over.clientWidth * 0.6) marker.classList.add("label-left");  // stay inside the plot
      u.over.append(marker);
    });
  }

  function drawBands(u, bands) {
    const ctx = u.ctx;
    ctx.save();
    ctx.fillStyle = COLOURS.paused;
    for (const [from, to] of bands) {
      const left = u.valToPos(from, "x", true);
      const right = u.valToPos(to, "x", true);
      ctx.fillRect(left, u.bbox.top, Math.max(1, right - left), u.bbox.height);
    }
    ctx.restore();
  }

  function render(body) {
    const node = $("entity-chart");
    const now = Date.now() / 1000;
    const { xs, budget, series } = chartData(body, now);
    const status = body.fields.status || { steps: [], changes: [] };
    const bands = paused(status.steps, now);
    const changes = [...Object.entries(body.fields)].flatMap(([field, f]) => f.changes.map((ch) => ({ ...ch, field })));
    const metricName = body.metric ? `${body.metric.metric} (${body.metric.period})` : "main metric";
    if (state.chart) state.chart.destroy();
    const opts = {
      width: Math.max(320, Math.floor(node.getBoundingClientRect().width) || 900), height: 300,
      legend: { show: false },
      cursor: { drag: { x: false, y: false } },
      scales: { x: { time: true, range: [secs(body.since), now] }, y: {}, y2: {} },
      axes: [{ stroke: "#5e6678" }, { stroke: COLOURS.budget, size: 70 },
        { stroke: "#5e6678", scale: "y2", side: 1, size: 60, grid: { show: false } }],
      series: [{},
        { label: "budget", scale: "y", stroke: COLOURS.budget, width: 2, paths: uPlot.paths.stepped({ align: 1 }), spanGaps: true, points: { show: false } },
        { label: "spend per day", scale: "y2", stroke: COLOURS.spend, width: 1.5, spanGaps: true, points: { show: true, size: 5 } },
        { label: metricName, scale: "y2", stroke: COLOURS.metric, width: 1.5, dash: [4, 3], spanGaps: true, points: { show: true, size: 4 } }],
      hooks: {
        drawClear: [(u) => drawBands(u, bands)],
        draw: [(u) => placeMarkers(u, changes)],
        setCursor: [(u) => {
          const i = u.cursor.idx;
          $("entity-readout").textContent = i === null || i === undefined ? "\u00a0"
            : `${RE.fmtTime(new Date(xs[i] * 1000).toISOString())}: budget ${series[1][i] === null ? "—" : money(series[1][i] * offset())}`;
        }],
      },
    };
    state.chart = new uPlot(opts, series, node);
    node.setAttribute("aria-label", `Budget of ${body.entity_name || body.entity_id} over ${body.days} days: `
      + `${budget.changes.length} change(s), listed in the Changes table below.`);
    $("entity-legend").replaceChildren(...[["budget", COLOURS.budget], ["spend per day", COLOURS.spend], [metricName, COLOURS.metric], ["paused", COLOURS.paused]]
      .map(([label, colour]) => el("span", { class: "legend-item" }, swatch(colour), label)));
    renderChanges(changes);
    renderExecutions(body.executions);
  }

  function swatch(colour) {
    const node = el("span", { class: "swatch", "aria-hidden": "true" });
    node.style.background = colour;
    return node;
  }

  function renderChanges(changes) {
    const rows = [...changes].sort((a, b) => secs(b.at) - secs(a.at)).map((ch) =>
      el("tr", { class: "change-row by-" + ch.by.kind, dataset: { kind: ch.by.kind } },
        timeCell(ch.at), el("td", {}, ch.field),
        el("td", {}, fieldValue(ch.field, ch.before) + " → " + fieldValue(ch.field, ch.after)),
        el("td", {}, ch.by.label)));
    $("changes-table").querySelector("tbody").replaceChildren(...(rows.length ? rows
      : [el("tr", {}, el("td", { colspan: "4", class: "muted" }, "No change in the period."))]));
  }

  function renderExecutions(items) {
    $("entity-executions").querySelector("tbody").replaceChildren(...items.map((r) =>
      el("tr", { class: "outcome-" + r.outcome, dataset: { batchId: r.batch_id || "" } },
        timeCell(r.created_at),
        el("td", {}, `${r.rule_name || r.rule_id} v${r.rule_version}`),
        el("td", {}, r.kind), el("td", {}, badge(r.outcome), r.reason ? el("div", { class: "muted" }, r.reason) : null),
        el("td", {}, changeText(r)),
        el("td", {}, el("a", { href: "/logs", title: "Rule Logs (find this batch there)" }, r.batch_id || "")))));
  }

  async function load() {
    const days = $("entity-days").value;
    try {
      const body = await api("GET", `/api/entities/${encodeURIComponent(entityId)}/timeline?days=${days}`);
      if (body.account && state.currency === null) state.currency = await currencyOf(body.account);
      $("entity-title").textContent = `${body.entity_name || ""} (${body.entity_id})`;
      $("entity-summary").textContent = body.account ? `${body.level || "entity"} of ${body.account}, last ${body.days} days` + (body.truncated ? " (the oldest records left out)" : "") : "";
      $("entity-empty").classList.toggle("hidden", body.executions.length > 0);
      render(body);
    } catch (err) {
      failed(err, "loading the timeline");
    }
  }

  $("entity-days").addEventListener("change", load);
  load();
})();
