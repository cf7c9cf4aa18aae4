/* The rule page's Impact panel: per task the counts, then per currency the measured effect
   with its 95 % interval (or why there is none) in that currency, the entities it rests on,
   and a chart of the mean profit above baseline of acted and held-out entities since their
   decision, with bands (GET /api/rules/{id}/impact, docs/impact.md). Amounts in two
   currencies are never added. Charts are drawn by uPlot (static/vendor/uplot). */
"use strict";

(() => {
  const { api, el, failed, fmtMoney } = RE;
  const $ = (id) => document.getElementById(id);
  const state = { ruleId: null, charts: [], seq: 0 };
  const plain = new Intl.NumberFormat(undefined, { minimumFractionDigits: 2, maximumFractionDigits: 2, signDisplay: "exceptZero" });
  const MONEY = new Set(["profit", "spend", "revenue", "cpa"]);  // the others: a count, a ratio
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

  /* A metric's value as people read it: money in the part's currency, with its decimals. */
  function shown(part, metric, value) {
    return MONEY.has(metric) ? fmtMoney(value, part.currency, part.decimals, true) : plain.format(value);
  }

  function effectLine(part, effect) {
    const m = effect.metric;
    return el("tr", { dataset: { metric: m } },
      el("th", { scope: "row" }, LABELS[m] || m),
      el("td", { class: "num strong" }, shown(part, m, effect.effect)),
      el("td", { class: "num" }, shown(part, m, effect.low) + " … " + shown(part, m, effect.high)),
      el("td", { class: "num" }, shown(part, m, effect.acted_mean)),
      el("td", { class: "num" }, shown(part, m, effect.held_out_mean)),
      el("td", { class: "num" }, `${effect.acted_entities} / ${effect.held_out_entities}`));
  }

  function effectsTable(part) {
    const order = ["profit", "spend", "revenue", "purchases", "roas", "cpa"];
    const rows = order.filter((m) => part.effects[m]).map((m) => effectLine(part, part.effects[m]));
    return el("table", { class: "grid compact impact-effects" },
      el("caption", { class: "muted" }, `Per entity, in ${part.currency}`),
      el("thead", {}, el("tr", {}, ["Metric", "Effect", "95 % interval", "Acted change", "Held-out change", "Entities (acted / held out)"].map((h) => el("th", { scope: "col" }, h)))),
      el("tbody", {}, ...rows));
  }

  function chart(part, node, bucket) {
    const c = part.chart;
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
        { stroke: "#5e6678", size: 64, label: "profit above baseline, " + part.currency },
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

  /* What became of acted entities' changes, where not all were simply made. */
  function caveats(counts) {
    const said = Object.entries(counts.approvals || {}).map(([status, n]) => `${n} proposal(s) ${status}`);
    if (counts.undone) said.push(`${counts.undone} undone`);
    if (counts.switched_groups) said.push(`${counts.switched_groups} decided in both groups (counted in their first)`);
    if (counts.unread) said.push(`${counts.unread} without delivery read`);
    return said.length ? "Of the acted: " + said.join(", ") + "." : "";
  }

  function currencyBlock(part) {
    const counts = part.counts;
    const parts = [
      el("h5", {}, part.currency),
      el("p", { class: "impact-counts" },
        `Measured so far: ${counts.acted_complete} changed and ${counts.held_out_complete} held-out entities whose window since the decision has passed` +
        (counts.outside_history ? ` (${counts.outside_history} more reach outside the hours read)` : "") + "."),
      el("p", { class: part.enough_data ? "impact-note" : "impact-note muted", role: "note" }, part.note),
    ];
    const profit = part.effects.profit;
    if (profit) {
      const money = (v) => fmtMoney(v, part.currency, part.decimals, true);
      const [low, high] = part.total_profit_interval || [null, null];
      parts.push(el("p", { class: "impact-headline" },
        el("strong", {}, money(profit.effect) + " profit per entity"),
        ` (95 % interval ${money(profit.low)} … ${money(profit.high)}; ${profit.acted_entities} acted and ${profit.held_out_entities} held-out entities)`,
        part.total_profit_effect !== null ? `; about ${money(part.total_profit_effect)} (${money(low)} … ${money(high)}) over the ${profit.acted_entities} entities acted on` : ""));
      parts.push(effectsTable(part));
    }
    if ((part.chart.acted || []).length) {
      const figure = el("figure", { class: "impact-chart" });
      const node = el("div", { role: "img", "aria-label": `Mean profit above baseline since the decision in ${part.currency}, acted and held-out entities, with 95 % bands` });
      const legend = el("div", { class: "legend" },
        el("span", { class: "legend-item" }, swatch(ACTED), "acted"),
        el("span", { class: "legend-item" }, swatch(HELD), "held out"),
        el("span", { class: "muted" }, "bands: 95 % of the mean"));
      figure.append(el("figcaption", {}, `Mean profit above baseline (${part.currency}), by ` + (part.chart.bucket || "hour") + " since the decision"), legend, node);
      parts.push(figure);
      requestAnimationFrame(() => chart(part, node, part.chart.bucket));
    }
    return el("section", { class: "impact-currency", dataset: { currency: part.currency } }, ...parts);
  }

  function taskBlock(task) {
    const counts = task.counts;
    const share = task.holdout_percent ? `holdout ${task.holdout_percent} %` : "no holdout";
    const head = el("h4", {}, "Task ", el("code", {}, task.task_id), " ", el("span", { class: "muted" }, share));
    const countLine = el("p", { class: "impact-counts" },
      `${counts.acted} decision(s) changed ${counts.acted_entities} entities; ${counts.held_out} left ${counts.held_out_entities} unchanged to compare with (held out).`);
    const parts = [head, countLine];
    const more = caveats(counts);
    if (more) parts.push(el("p", { class: "impact-caveats muted" }, more));
    if (task.currencies.length !== 1) {
      parts.push(el("p", { class: task.enough_data ? "impact-note" : "impact-note muted", role: "note" }, task.note));
    }
    parts.push(...task.currencies.map(currencyBlock));
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
        failed(err, "could not measure the rule's impact");
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
