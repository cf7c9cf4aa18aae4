/* Rule Logs screen: one row per batch, filters, pagination, live progress, per-entity detail. */
"use strict";

(() => {
  const { api, el, badge, failed, timeCell, fmtSeconds, fmtTime, pager } = RE;
  const $ = (id) => document.getElementById(id);
  const LIMIT = 25;
  const REFRESH_MS = 3000;
  const state = { offset: 0, total: 0, rules: new Map() };

  function filters() {
    const params = new URLSearchParams({ limit: LIMIT, offset: state.offset });
    for (const [name, id] of [["rule_id", "filter-rule"], ["account", "filter-account"], ["status", "filter-status"]]) {
      if ($(id).value) params.set(name, $(id).value);
    }
    return params;
  }

  async function loadFilters() {
    try {
      const [rules, accounts] = await Promise.all([api("GET", "/api/rules"), api("GET", "/api/accounts")]);
      for (const rule of rules.items) {
        state.rules.set(rule.id, rule.name);
        $("filter-rule").append(el("option", { value: rule.id }, rule.name));
      }
      for (const account of accounts.items) {
        $("filter-account").append(el("option", { value: account.id }, `${account.name} (${account.id})`));
      }
    } catch (err) {
      failed(err, "could not load the filters");
    }
  }

  async function loadBatches() {
    let page;
    try {
      page = await api("GET", "/api/batches?" + filters().toString());
    } catch (err) {
      failed(err, "could not load the batches");
      return;
    }
    state.total = page.total;
    $("batches-table").tBodies[0].replaceChildren(...page.items.map(batchRow));
    $("batches-empty").classList.toggle("hidden", page.items.length > 0);
    pager($("page-info"), state.offset, LIMIT, page.total);
    $("prev-page").disabled = state.offset === 0;
    $("next-page").disabled = state.offset + LIMIT >= page.total;
  }

  function progressCell(batch) {
    const cell = el("td", { class: "status-cell" }, badge(batch.status));
    if (batch.status === "RUNNING") {
      const progress = batch.progress || { done: 0, total: 0 };
      const pct = progress.total ? Math.round((100 * progress.done) / progress.total) : 0;
      const bar = el("div", { class: "bar" });
      bar.style.width = pct + "%";  // CSSOM, allowed by the Content-Security-Policy
      cell.append(el("div", { class: "progress", title: `${progress.done}/${progress.total} entities`, role: "progressbar",
        "aria-valuenow": pct, "aria-valuemin": 0, "aria-valuemax": 100 }, bar),
      el("span", { class: "muted" }, ` ${progress.done}/${progress.total}`));
    } else if (batch.error) {
      cell.append(el("div", { class: "error-line" }, batch.error));
    }
    if (batch.execute_count > 1) cell.append(el("div", { class: "muted" }, `delivered ${batch.execute_count}×`));
    return cell;
  }

  function batchCells(batch) {
    return [
      timeCell(batch.started_at),
      el("td", {}, batch.rule_name || state.rules.get(batch.rule_id) || batch.rule_id, el("span", { class: "muted" }, " v" + batch.rule_version)),
      el("td", {}, batch.account),
      progressCell(batch),
      el("td", { class: "num" }, batch.evaluated_count ?? "—"),
      el("td", { class: "num" }, batch.affected_count ?? "—"),
      el("td", { class: "num" }, batch.applied_count ?? "—"),
      el("td", { class: "num" }, fmtSeconds(batch.duration_s)),
    ];
  }

  function batchRow(batch) {
    const row = el("tr", { class: "clickable batch-row", dataset: { batchId: batch.batch_id, status: batch.status },
      onclick: () => toggle(row), title: "show the entities of this batch" }, ...batchCells(batch));
    return row;
  }

  async function toggle(row) {
    const next = row.nextElementSibling;
    if (next && next.classList.contains("detail-row")) {
      next.remove();
      row.classList.remove("expanded");
      return;
    }
    row.classList.add("expanded");
    const cell = el("td", { colspan: 8 }, el("span", { class: "muted" }, "loading…"));
    row.after(el("tr", { class: "detail-row", dataset: { batchId: row.dataset.batchId } }, cell));
    try {
      const data = await api("GET", `/api/batches/${encodeURIComponent(row.dataset.batchId)}/executions`);
      cell.replaceChildren(executionsTable(data.items));
    } catch (err) {
      cell.replaceChildren(el("span", { class: "error-line" }, err.message));
    }
  }

  function executionsTable(items) {
    if (!items.length) return el("p", { class: "muted" }, "No execution records (yet) for this batch.");
    return el("table", { class: "grid compact executions" },
      el("thead", {}, el("tr", {}, ["Entity", "Task", "Conditions", "Before → after", "Outcome", "Reason", "Next allowed"].map((h) => el("th", {}, h)))),
      el("tbody", {}, items.map((r) => el("tr", { class: "outcome-" + r.outcome, dataset: { entityId: r.entity_id } },
        el("td", {}, el("div", {}, r.entity_name || r.entity_id), el("div", { class: "muted" }, r.entity_id)),
        el("td", {}, r.task_id, el("div", { class: "muted" }, "match " + r.match)),
        el("td", {}, RE.conditionList(r.conditions)),
        el("td", {}, RE.changeText(r), r.clamped_by && r.clamped_by.length ? el("div", { class: "muted" }, "clamped by " + r.clamped_by.join(", ")) : null),
        el("td", {}, badge(r.outcome)),
        el("td", {}, r.reason || "", r.error ? el("div", { class: "error-line" }, r.error.message || JSON.stringify(r.error)) : null),
        el("td", { title: r.next_execute_at || "" }, r.next_execute_at ? fmtTime(r.next_execute_at) : "—")))));
  }

  /* Refresh only the RUNNING rows, in place, so expanded rows stay open. */
  async function refreshRunning() {
    const rows = [...document.querySelectorAll('tr.batch-row[data-status="RUNNING"]')];
    for (const row of rows) {
      try {
        const batch = await api("GET", "/api/batches/" + encodeURIComponent(row.dataset.batchId));
        row.replaceChildren(...batchCells(batch));
        row.dataset.status = batch.status;
      } catch (_err) {
        // transient: the next refresh tries again
      }
    }
  }

  document.addEventListener("DOMContentLoaded", async () => {
    for (const id of ["filter-rule", "filter-account", "filter-status"]) {
      $(id).addEventListener("change", () => { state.offset = 0; loadBatches(); });
    }
    $("prev-page").addEventListener("click", () => { state.offset = Math.max(0, state.offset - LIMIT); loadBatches(); });
    $("next-page").addEventListener("click", () => { state.offset += LIMIT; loadBatches(); });
    await loadFilters();
    await loadBatches();
    setInterval(refreshRunning, REFRESH_MS);
  });
})();
