/* Benchmark screen: the slow-rule report (p95 with a 4-stage bar), rules by measured effect, daily rollups, batch rows with Graph cost. */
"use strict";

(() => {
  const { api, el, badge, failed, timeCell, fmtSeconds, pager } = RE;
  const $ = (id) => document.getElementById(id);
  const STAGES = ["cooldown", "fetch", "evaluate", "act"];
  const LIMIT = 25;
  const DAILY_LIMIT = 50;
  const state = { offset: 0 };
  const daily = { offset: 0, ruleId: null, ruleName: "" };

  /* The mean batch split into its stages; the bar's length is relative to the slowest rule. */
  function stageBar(stages, longest) {
    const total = STAGES.reduce((sum, s) => sum + (stages[s] || 0), 0);
    const bar = el("div", { class: "stackbar", title: STAGES.map((s) => `${s} ${fmtSeconds(stages[s] || 0)}`).join(" · ") });
    bar.style.width = (longest > 0 ? Math.max(2, (100 * total) / longest) : 0) + "%";
    for (const stage of STAGES) {
      const seg = el("span", { class: "seg stage-" + stage, dataset: { stage } });
      seg.style.width = (total > 0 ? (100 * (stages[stage] || 0)) / total : 0) + "%";
      bar.append(seg);
    }
    return el("div", { class: "stackbar-track" }, bar);
  }

  async function loadSlowRules() {
    let report;
    try {
      report = await api("GET", "/api/benchmark/slow-rules?since_hours=" + $("since-hours").value);
    } catch (err) {
      failed(err, "could not load the slow-rule report");
      return;
    }
    const totals = report.rules.map((r) => STAGES.reduce((sum, s) => sum + (r.stages_mean_s[s] || 0), 0));
    const longest = Math.max(0, ...totals);
    $("slow-table").tBodies[0].replaceChildren(...report.rules.map((r, i) => el("tr", { dataset: { ruleId: r.rule_id } },
      el("td", { class: "num" }, i + 1),
      el("td", {}, el("a", { href: "/rules/" + encodeURIComponent(r.rule_id) }, r.rule_name)),
      el("td", { class: "num" }, r.count),
      el("td", { class: "num" }, fmtSeconds(r.p50_s)),
      el("td", { class: "num strong" }, fmtSeconds(r.p95_s)),
      el("td", { class: "num" }, fmtSeconds(r.max_s)),
      el("td", { class: "bar-cell" }, stageBar(r.stages_mean_s, longest)),
      el("td", { class: "num" }, r.graph_calls_mean.toFixed(1)),
      el("td", { class: "num" }, r.http_requests_mean.toFixed(1)),
      el("td", { class: "p95-cell", dataset: { ruleId: r.rule_id } }),
      el("td", {}, el("button", { type: "button", class: "secondary small", dataset: { daily: r.rule_id },
        onclick: () => showDaily(r.rule_id, r.rule_name) }, "Days")))));
    $("slow-empty").classList.toggle("hidden", report.rules.length > 0);
    await loadP95(report.rules.map((r) => r.rule_id));
  }

  // p95 per day: the sparkline of each ranked rule
  const TREND_DAYS = 14;

  function loadP95(ids) {
    return RE.fillTrends("/api/trends/rules/p95", ids, {
      days: TREND_DAYS, table: $("slow-table"), cellSelector: "td.p95-cell",
      options: (_item, first, last) => ({
        label: `p95 batch duration per day, last ${TREND_DAYS} days`,
        title: `p95 batch duration per UTC day from ${first} to ${last}`,
        format: fmtSeconds, kind: "line",
      }),
    });
  }

  function showDaily(ruleId, ruleName) {
    Object.assign(daily, { offset: 0, ruleId, ruleName: ruleName || "" });
    loadDaily();
  }

  async function loadDaily() {
    const query = new URLSearchParams({ days: $("daily-days").value, limit: DAILY_LIMIT, offset: daily.offset });
    if (daily.ruleId) query.set("rule_id", daily.ruleId);
    let page;
    try {
      page = await api("GET", "/api/benchmark/daily?" + query);
    } catch (err) {
      failed(err, "could not load the daily rollups");
      return;
    }
    $("daily-rule").textContent = daily.ruleId ? "· " + (daily.ruleName || daily.ruleId) : "";
    $("daily-all").classList.toggle("hidden", !daily.ruleId);
    $("daily-table").tBodies[0].replaceChildren(...page.items.map((d) => el("tr", { dataset: { ruleId: d.rule_id, day: d.day } },
      el("td", {}, d.day),
      el("td", {}, el("a", { href: "/rules/" + encodeURIComponent(d.rule_id) }, d.rule_name)),
      el("td", { class: "num" }, d.batches),
      el("td", { class: "num" }, d.failed),
      el("td", { class: "num" }, d.abandoned),
      el("td", { class: "num" }, d.evaluated),
      el("td", { class: "num" }, d.applied),
      el("td", { class: "num" }, d.change_budget ?? 0),
      el("td", { class: "num" }, fmtSeconds(d.duration_p50_s)),
      el("td", { class: "num strong" }, fmtSeconds(d.duration_p95_s)),
      el("td", { class: "num" }, fmtSeconds(d.duration_max_s)),
      el("td", { class: "num" }, d.graph_calls))));
    $("daily-empty").classList.toggle("hidden", page.items.length > 0);
    pager($("daily-info"), daily.offset, DAILY_LIMIT, page.total);
    $("daily-prev").disabled = daily.offset === 0;
    $("daily-next").disabled = daily.offset + DAILY_LIMIT >= page.total;
  }

  /* Rules with a holdout, ranked by their measured effect per currency (GET
     /api/benchmark/impact): amounts of two currencies are never compared or added. */
  async function loadImpact() {
    if (!RE.token()) {  // the ranking reads Insights: it needs a token, so do not ask without one
      $("impact-empty").textContent = "Paste the API token at the top to see the rules' measured effects.";
      $("impact-empty").classList.remove("hidden");
      return;
    }
    $("impact-empty").textContent = "No rule held an entity out in the last 14 days.";
    let report;
    try {
      report = await api("GET", "/api/benchmark/impact?days=14&window=" + $("impact-rank-window").value);
    } catch (err) {
      failed(err, "could not load the measured effects");
      return;
    }
    const money = (r, v) => RE.fmtMoney(v, r.currency, r.decimals, true);
    $("impact-table").tBodies[0].replaceChildren(...report.items.map((r, i) => {
      const counts = r.counts || {};
      const acted = r.profit ? r.profit.acted_entities : counts.acted_complete;
      const held = r.profit ? r.profit.held_out_entities : counts.held_out_complete;
      return el("tr", { dataset: { ruleId: r.rule_id, task: r.task_id, currency: r.currency || "" } },
        el("td", { class: "num" }, i + 1),
        el("td", {}, el("a", { href: "/rules/" + encodeURIComponent(r.rule_id) }, r.rule_name)),
        el("td", {}, r.task_id),
        el("td", {}, r.currency || "—"),
        el("td", { class: "num" }, r.holdout_percent + " %"),
        el("td", { class: "num" }, acted === undefined ? "—" : acted),
        el("td", { class: "num" }, held === undefined ? "—" : held),
        el("td", { class: "num strong" }, r.profit ? money(r, r.profit.effect) : "—"),
        el("td", { class: r.profit ? "" : "muted" }, r.profit ? money(r, r.profit.low) + " … " + money(r, r.profit.high) : "not enough data yet"),
        el("td", { class: "num" }, r.total_profit_effect === null ? "—" : money(r, r.total_profit_effect)));
    }));
    $("impact-empty").classList.toggle("hidden", report.items.length > 0);
  }

  async function loadBatches() {
    let page;
    try {
      page = await api("GET", `/api/batches?limit=${LIMIT}&offset=${state.offset}`);
    } catch (err) {
      failed(err, "could not load the batches");
      return;
    }
    $("bench-batches").tBodies[0].replaceChildren(...page.items.map((b) => {
      const graph = b.graph || {};
      const perEntity = b.evaluated_count ? (graph.counted_calls || 0) / b.evaluated_count : null;
      return el("tr", { dataset: { batchId: b.batch_id } },
        timeCell(b.started_at),
        el("td", {}, b.rule_name || b.rule_id, el("span", { class: "muted" }, " v" + b.rule_version)),
        el("td", {}, b.account),
        el("td", {}, badge(b.status)),
        el("td", { class: "num" }, b.evaluated_count ?? "—"),
        el("td", { class: "num" }, b.change_budget_count ?? "—"),
        el("td", { class: "num" }, fmtSeconds(b.duration_s)),
        el("td", { class: "num" }, graph.http_requests ?? "—"),
        el("td", { class: "num" }, graph.counted_calls ?? "—"),
        el("td", { class: "num" }, perEntity === null ? "—" : perEntity.toFixed(2)));
    }));
    pager($("page-info"), state.offset, LIMIT, page.total);
    $("prev-page").disabled = state.offset === 0;
    $("next-page").disabled = state.offset + LIMIT >= page.total;
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("since-hours").addEventListener("change", loadSlowRules);
    $("daily-days").addEventListener("change", () => { daily.offset = 0; loadDaily(); });
    $("daily-all").addEventListener("click", () => showDaily(null, ""));
    $("daily-prev").addEventListener("click", () => { daily.offset = Math.max(0, daily.offset - DAILY_LIMIT); loadDaily(); });
    $("daily-next").addEventListener("click", () => { daily.offset += DAILY_LIMIT; loadDaily(); });
    $("prev-page").addEventListener("click", () => { state.offset = Math.max(0, state.offset - LIMIT); loadBatches(); });
    $("next-page").addEventListener("click", () => { state.offset += LIMIT; loadBatches(); });
    $("impact-rank-window").addEventListener("change", loadImpact);
    loadSlowRules();
    loadImpact();
    loadDaily();
    loadBatches();
  });
})();
