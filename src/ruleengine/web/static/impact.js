/* The rule page's Impact panel: per task the measured effect with its 95 % interval (or why
   there is none), the counts, and a chart of the mean profit above baseline of acted and
   held-out entities since the decision, with bands (GET /api/rules/{id}/impact, docs/impact.md).
   Charts are drawn by uPlot (static/vendor/uplot). */
"use strict";

(() => {
  const { api, el, failed } = RE;
  const $ = (id) => document.getElementById(id);
  const state = { ruleId: null, charts: [], seq: 0 };
  const money = new Intl.NumberFormat(undefined, { minimumFractionDigits: 2, maximumFractionDigits: 2, signDisplay: "always" });
  const ACTED = "#2f6fde";
  const HELD = "#c2571a";
  const LABELS = { profit: "Profit", spend: "Spend", revenue: "Revenue", purchases: "Purchases", roas: "ROAS", cpa: "CPA" };

  function swatch(colour) {
    const node = el("span", { class: "swatch", "aria-hidden": "true" });
    node.style.background = colour;  // through the CSSOM: the page's CSP refuses style attributes
    return node;
  }

  function destroyCharts() {
    for (const chart of state.charts) chart.destroy();
    state.charts = [];
  }

  function effectLine(effect) {
    return el("tr", { dataset: { metric: effect.metric } },
      el("th", { scope: "row" }, LABELS[effect.metric] || effect.metric),
      el("td", { class: "num strong" }, money.format(effect.effect)),
      el("td", { class: "num" }, money.format(effect.low) + " … " + money.format(effect.high)),
      el("td", { class: "num" }, money.format(effect.acted_mean)),
      el("td", { class: "num" }, money.format(effect.held_out_mean)));
  }

  function effectsTable(task) {
    const order = ["profit", "spend", "revenue", "purchases", "roas", "cpa"];
    const rows = order.filter((m) => task.effects[m]).map((m) => effectLine(task.effects[m]));
    return el("table", { class: "grid compact impact-effects" },
      el("thead", {}, el("tr", {}, ["Per decision", "Effect", "95 % interval", "Acted change", "Held-out change"].map((h) => el("th", {}, h)))),
      el("tbody", {}, ...rows));
  }

  function chart(task, node, bucket) {
    const c = task.chart;
    const xs = (c.acted || []).map((_, i) => i + 1);
    if (!xs.length || typeof uPlot === "undefined") return;
    const band = (fill) => ({ fill, width: 0, points: { show: false } });
    const opts = {
      width: Math.max(320, Math.floor(node.getBoundingClientRect().width) || 640), height: 240,
      legend: { show: false },
      cursor: { drag: { x: false, y: false } },
      scales: { x: { time: false } },
      axes: [
        { stroke: "#5e6678", label: bucket === "day" ? "days since the decision" : "hours since the decision" },
        { stroke: "#5e6678", size: 56, label: "profit above baseline" },
      ],
      series: [
        {},
        { label: "acted", stroke: ACTED, width: 2 },
        Object.assign({ label: "acted 95 % low" }, band(null)),
        Object.assign({ label: "acted 95 % high" }, band(null)),
        { label: "held out", stroke: HELD, width: 2 },
        Object.assign({ label: "held-out 95 % low" }, band(null)),
        Object.assign({ label: "held-out 95 % high" }, band(null)),
      ],
      bands: [
        { series: [3, 2], fill: "rgba(47, 111, 222, 0.15)" },
        { series: [6, 5], fill: "rgba(194, 87, 26, 0.15)" },
      ],
    };
    const data = [xs, c.acted, c.acted_low, c.acted_high, c.held_out, c.held_out_low, c.held_out_high];
    state.charts.push(new uPlot(opts, data, node));
  }

  const plural = (n, one, many) => `${n} ${n === 1 ? one : many}`;

  /* The counts as a media buyer reads them: how many decisions changed an entity, how many
   * left one unchanged to compare with, and how many of each are measured yet (their window
   * since the decision has passed). */
  function countWords(counts) {
    const chosen = $("impact-window").selectedOptions[0];
    const window = chosen ? chosen.textContent : "window";
    return `${plural(counts.acted, "decision", "decisions")} changed an entity, ` +
      `${counts.held_out} left one unchanged to compare with (held out). ` +
      `Measured so far (${window} since the decision have passed): ` +
      `${counts.acted_complete} of the changed, ${counts.held_out_complete} of the held out.`;
  }

  function taskBlock(task) {
    const counts = task.counts;
    const share = task.holdout_percent ? `holdout ${task.holdout_percent} %` : "no holdout";
    const head = el("h4", {}, "Task ", el("code", {}, task.task_id), " ", el("span", { class: "muted" }, share));
    const countLine = el("p", { class: "impact-counts" }, countWords(counts));
    const note = el("p", { class: task.enough_data ? "impact-note" : "impact-note muted", role: "note" }, task.note);
    const parts = [head, countLine, note];
    if (task.enough_data) {
      const profit = task.effects.profit;
      if (profit) {
        parts.push(el("p", { class: "impact-headline" },
          el("strong", {}, money.format(profit.effect) + " profit per decision"),
          ` (95 % interval ${money.format(profit.low)} … ${money.format(profit.high)})`,
          task.total_profit_effect !== null ? `; about ${money.format(task.total_profit_effect)} over ${counts.acted} decisions acted on` : ""));
      }
      parts.push(effectsTable(task));
    }
    const figure = el("figure", { class: "impact-chart" });
    if (task.measured && (task.chart.acted || []).length) {
      const node = el("div", { role: "img", "aria-label": "Mean profit above baseline since the decision, acted and held-out entities, with 95 % bands" });
      const legend = el("div", { class: "legend" },
        el("span", { class: "legend-item" }, swatch(ACTED), "acted"),
        el("span", { class: "legend-item" }, swatch(HELD), "held out"),
        el("span", { class: "muted" }, "bands: 95 % of the mean"));
      figure.append(el("figcaption", {}, "Mean profit above baseline, by " + (task.chart.bucket || "hour") + " since the decision"), legend, node);
      parts.push(figure);
      requestAnimationFrame(() => chart(task, node, task.chart.bucket));
    }
    return el("section", { class: "impact-task", dataset: { task: task.task_id } }, ...parts);
  }

  async function load() {
    if (!state.ruleId) return;
    if (!RE.token()) {  // the report reads Insights: it needs a token, so do not ask without one
      $("impact-tasks").replaceChildren(el("p", { class: "muted" }, "Paste the API token at the top to measure this rule's impact."));
      return;
    }
    const seq = ++state.seq;
    const query = new URLSearchParams({ days: $("impact-days").value || "14", window: $("impact-window").value });
    $("impact-status").textContent = "Measuring…";
    let report;
    try {
      report = await api("GET", `/api/rules/${encodeURIComponent(state.ruleId)}/impact?` + query);
    } catch (err) {
      if (seq === state.seq) {
        $("impact-status").textContent = "";
        failed(err, "could not measure the rule's impact", $("impact-run"));
      }
      return;
    }
    if (seq !== state.seq) return;  // another rule was opened meanwhile
    destroyCharts();
    $("impact-tasks").replaceChildren(...report.tasks.map(taskBlock));
    $("impact-status").textContent = "Impact measured";
  }

  function setOpen(open) {
    $("impact-block").classList.toggle("hidden", !open);
    $("impact-toggle").setAttribute("aria-expanded", String(open));
    if (!open) {
      destroyCharts();
      $("impact-tasks").replaceChildren();
    }
  }

  /* The report reads Insights: it is measured when asked for (the Impact button), not on
     every rule shown. */
  function ruleShown(event) {
    const { isNew, id } = event.detail;
    state.ruleId = isNew ? null : id;
    setOpen(false);
    $("impact-toggle").classList.toggle("hidden", isNew);
  }

  function toggle() {
    const open = $("impact-block").classList.contains("hidden");
    setOpen(open);
    if (open) {
      $("impact-days").focus();
      load();
    }
  }

  document.addEventListener("ruleeditor:shown", ruleShown);
  document.addEventListener("DOMContentLoaded", () => {
    $("impact-toggle").addEventListener("click", toggle);
    $("impact-close").addEventListener("click", () => {
      setOpen(false);
      $("impact-toggle").focus();
    });
    $("impact-form").addEventListener("submit", (event) => {
      event.preventDefault();
      load();
    });
  });
})();
