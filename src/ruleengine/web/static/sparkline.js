/* Sparklines: a small uPlot chart in a table cell (no axes, no cursor), whose numbers are
   also its text alternative (role="img" with an aria-label listing them). */
"use strict";

(() => {
  const STROKE = "#3b6fd8";
  const FILL = "rgba(59, 111, 216, 0.25)";

  /* A <span> holding the chart of `values` (null: no value). `label` leads the text
     alternative ("fires per day, last 14 days"), `format` writes one value, `kind` is
     "bars" (counts) or "line" (a measure; gaps where null). */
  function sparkline(values, { label, title, format = String, kind = "bars", width = 112, height = 26 }) {
    const text = values.map((v) => (v === null || v === undefined ? "none" : format(v))).join(", ");
    const node = RE.el("span", { class: "sparkline", role: "img", "aria-label": `${label}: ${text}`,
      title: title || label, dataset: { values: values.map((v) => (v === null ? "" : v)).join(",") } });
    if (typeof uPlot === "undefined") return node;  // the numbers are still in the label
    const numbers = values.map((v) => (v === null || v === undefined ? null : Number(v)));
    const max = Math.max(0, ...numbers.filter((v) => v !== null));
    const series = kind === "bars"
      ? { stroke: STROKE, fill: STROKE, width: 0, paths: uPlot.paths.bars({ size: [0.8, 8], align: 0 }), points: { show: false } }
      : { stroke: STROKE, fill: FILL, width: 1.5, spanGaps: false, points: { show: true, size: 3, fill: STROKE } };
    const opts = {
      width, height, pxAlign: false,
      legend: { show: false }, cursor: { show: false }, select: { show: false },
      padding: [2, 2, 1, 2],
      scales: { x: { time: false, range: [-0.5, values.length - 0.5] }, y: { range: [0, max > 0 ? max * 1.05 : 1] } },
      axes: [{ show: false }, { show: false }],
      series: [{}, series],
    };
    new uPlot(opts, [numbers.map((_, i) => i), numbers], node);
    for (const canvas of node.querySelectorAll("canvas")) canvas.setAttribute("aria-hidden", "true");
    return node;
  }

  const TREND_IDS = 100;

  /* Fill the cells `cellSelector` (each with data-rule-id) under `table` with the series of
     `path` (/api/trends/rules/…) for rules `ids`, asked 100 rules at a time over `days`
     days; `options(item, first, last)` gives each sparkline's options. A failed request
     leaves the cells empty: the screen still shows, only the sparklines are missing. */
  async function fillTrends(path, ids, { days, table, cellSelector, options }) {
    for (let i = 0; i < ids.length; i += TREND_IDS) {
      const query = new URLSearchParams({ days });
      for (const id of ids.slice(i, i + TREND_IDS)) query.append("rule_id", id);
      let answer;
      try {
        answer = await RE.api("GET", `${path}?${query}`);
      } catch (_err) {
        return;
      }
      const first = answer.days[0], last = answer.days[answer.days.length - 1];
      for (const item of answer.items) {
        const cell = table.querySelector(`${cellSelector}[data-rule-id="${CSS.escape(item.rule_id)}"]`);
        if (cell) cell.replaceChildren(sparkline(item.values, options(item, first, last)));
      }
    }
  }

  // deferred: the page scripts call these once the page has loaded
  RE.sparkline = sparkline;
  RE.fillTrends = fillTrends;
})();
