/* Rule Logs screen: one row per batch, filters, pagination, live progress, per-entity detail,
 * and under each execution with a `then` its follow-up (live status from /api/followups).
 * A batch with applied changes can be undone: Undo shows the plan (a dry run of
 * POST /api/batches/{id}/undo: what will be set back, what is skipped and why, the live
 * values), Confirm queues the undo; the batches link each other (?batch=ID shows one). An
 * undo that could not set every change back (Meta's limits, a failed write) says so on both
 * rows, and "Undo what is left…" asks a second undo of just those executions. */
"use strict";

(() => {
  const { api, el, badge, failed, timeCell, fmtSeconds, fmtTime, pager, accountText, fieldChange, fieldValue, fieldName, words } = RE;
  const $ = (id) => document.getElementById(id);
  const LIMIT = 25;
  const REFRESH_MS = 3000;
  const state = { offset: 0, total: 0, rules: new Map(), unitOf: () => null };
  const LEVELS = { campaign: "campaigns", adset: "ad sets", ad: "ads" };
  const UNDO_ROUTE = "POST /api/batches/{batch_id}/undo";

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

  /* ?batch=ID: only that batch (the links between a batch and its undo lead here). */
  function onlyBatch() {
    return new URLSearchParams(window.location.search).get("batch");
  }

  function batchLink(batchId) {
    return el("a", { href: "/logs?" + new URLSearchParams({ batch: batchId }).toString() }, batchId);
  }

  async function loadBatches() {
    let page;
    try {
      const only = onlyBatch();
      page = only
        ? { items: [await api("GET", "/api/batches/" + encodeURIComponent(only))], total: 1 }
        : await api("GET", "/api/batches?" + filters().toString());
    } catch (err) {
      failed(err, "could not load the batches");
      return;
    }
    state.total = page.total;
    $("only-batch").classList.toggle("hidden", !onlyBatch());
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
      // While big-account Insights run as async reports, the bar shows the reports' percent.
      const fetching = progress.phase === "fetch";
      const pct = fetching ? Math.round(progress.percent || 0)
        : progress.total ? Math.round((100 * progress.done) / progress.total) : 0;
      const label = fetching ? `fetching Insights ${pct}%` : `${progress.done}/${progress.total}`;
      const bar = el("div", { class: "bar" });
      bar.style.width = pct + "%";  // CSSOM, allowed by the Content-Security-Policy
      cell.append(el("div", { class: "progress", title: fetching ? label : `${label} entities`, role: "progressbar",
        "aria-valuenow": pct, "aria-valuemin": 0, "aria-valuemax": 100 }, bar),
      el("span", { class: "muted" }, ` ${label}`));
    } else if (batch.error) {
      cell.append(el("div", { class: "error-line" }, batch.error));
    }
    const missing = notSetBack(batch);
    if (missing) cell.append(el("div", { class: "warn-line undo-incomplete" }, missing));
    if (batch.execute_count > 1) cell.append(el("div", { class: "muted" }, `delivered ${batch.execute_count}×`));
    return cell;
  }

  /* An undo batch that could not set everything back, or a batch whose undos could not:
   * the warning its row shows (null when there is none). */
  function notSetBack(batch) {
    if (batch.kind === "undo" && batch.complete === false) {
      return `incomplete: ${batch.not_reverted_count} change(s) not set back`;
    }
    const left = (batch.not_undone || []).length;
    return left ? `undo incomplete: ${left} change(s) not set back` : null;
  }

  function batchCells(batch) {
    return [
      timeCell(batch.started_at),
      el("td", {}, batch.rule_name || state.rules.get(batch.rule_id) || batch.rule_id, el("span", { class: "muted" }, " v" + batch.rule_version)),
      el("td", { class: "level" }, LEVELS[batch.level] || batch.level || "—"),
      el("td", { class: "account" }, accountText(batch.account_name, batch.account)),
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
    const cell = el("td", { colspan: 9 }, el("span", { class: "muted" }, "loading…"));
    row.after(el("tr", { class: "detail-row", dataset: { batchId: row.dataset.batchId } }, cell));
    try {
      const batchId = row.dataset.batchId;
      const path = `/api/batches/${encodeURIComponent(batchId)}`;
      const [batch, acted, data] = await Promise.all([
        api("GET", path),
        api("GET", path + "/executions?acted=1&limit=5000"),
        api("GET", path + "/executions?limit=" + PAGE),
      ]);
      const live = acted.items.some((r) => r.followup && r.followup.key) ? await liveFollowups(batchId) : new Map();
      const more = moreButton(path, data, live, batch.currency);
      // replaceChildren would print a null as the text "null"
      cell.replaceChildren(...[undoBlock(batch, acted.items), executionsTable(data.items, live, batch.currency), more].filter(Boolean));
    } catch (err) {
      cell.replaceChildren(el("span", { class: "error-line" }, err.message));
    }
  }

  /* The batch's follow-ups as they are now (key → follow-up), or null when they cannot be read. */
  async function liveFollowups(batchId) {
    try {
      const page = await api("GET", "/api/followups?" + new URLSearchParams({ batch_id: batchId, limit: 500 }).toString());
      return new Map(page.items.map((f) => [f.id, f]));
    } catch (_err) {
      return null;  // the rows say the status shown is the one recorded
    }
  }

  /* Rows per page of a batch's evaluations: a big batch (thousands of entities) comes in pages. */
  const PAGE = 200;

  /* "Show more" under a page of a batch's evaluations, while the batch has more. */
  function moreButton(path, data, live, currency) {
    const shown = data.offset + data.items.length;
    if (shown >= data.total) return null;
    const button = el("button", { type: "button", class: "more-executions" },
      `Show ${Math.min(PAGE, data.total - shown)} more (${shown} of ${data.total} shown)`);
    button.addEventListener("click", async () => {
      button.disabled = true;
      try {
        const next = await api("GET", `${path}/executions?limit=${PAGE}&offset=${shown}`);
        const table = executionsTable(next.items, live, currency);
        const body = button.parentElement.querySelector("table.executions tbody");
        if (body && table.tBodies && table.tBodies[0]) body.append(...table.tBodies[0].children);
        const again = moreButton(path, next, live, currency);
        if (again) button.replaceWith(again);
        else button.remove();
      } catch (err) {
        button.replaceWith(el("span", { class: "error-line" }, err.message));
      }
    });
    return button;
  }

  function executionsTable(items, live, currency) {
    if (!items.length) return el("p", { class: "muted" }, "No execution records (yet) for this batch.");
    const runs = new Map();  // follow-up key → its execution records in this batch
    for (const r of items.filter((r) => r.kind === "followup")) {
      runs.set(r.followup_key, [...(runs.get(r.followup_key) || []), r]);
    }
    const rows = [];
    for (const r of items.filter((r) => r.kind !== "followup")) {
      rows.push(executionRow(r, currency));
      if (!r.followup) continue;
      rows.push(followupRow(r, live, runs.get(r.followup.key) || [], currency));
      runs.delete(r.followup.key);
    }
    for (const orphans of runs.values()) rows.push(...orphans.map((run) => followupRecordRow(run, currency)));
    return el("table", { class: "grid compact executions" },
      el("thead", {}, el("tr", {}, ["Entity", "Task", "Conditions", "Before → after", "Outcome", "Reason", "Next allowed"].map((h) => el("th", {}, h)))),
      el("tbody", {}, rows));
  }

  function entityCell(r) {
    return el("td", {}, el("div", {}, r.entity_name || r.entity_id), el("div", { class: "muted" }, r.entity_id),
      el("a", { class: "timeline-link", href: "/entities/" + encodeURIComponent(r.entity_id) }, "timeline"));
  }

  /* A change that completed an oscillation of its field (docs/rules.md "Rules that fight"). */
  function oscillationMark(o) {
    const text = `⇅ oscillation: ${o.swings} swings by ${o.rules.length} rule(s)` + (o.hold ? ", field held" : "");
    return el("div", { class: "oscillation", title: "rules " + o.rules.join(", ") + " — see Errors" }, text);
  }

  function executionRow(r, currency) {
    return el("tr", { class: "outcome-" + r.outcome, dataset: { entityId: r.entity_id } },
      entityCell(r),
      el("td", {}, r.task_id, el("div", { class: "muted" }, "match " + r.match)),
      el("td", {}, RE.conditionList(r.conditions, { unitOf: state.unitOf, currency })),
      el("td", { class: "change" }, RE.changeText(r, currency), r.clamped_by && r.clamped_by.length ? el("div", { class: "muted" }, "clamped by " + r.clamped_by.join(", ")) : null),
      el("td", {}, RE.outcomeBadge(r.outcome)),
      el("td", { title: r.reason || "" }, words(r.reason), r.error ? el("div", { class: "error-line" }, r.error.message || JSON.stringify(r.error)) : null,
        r.oscillation ? oscillationMark(r.oscillation) : null),
      el("td", { title: r.next_execute_at || "" }, r.next_execute_at ? fmtTime(r.next_execute_at) : "—"));
  }

  /* Under an execution: what its `then` will do and when, where it stands now, and how it ran. */
  function followupRow(record, live, runs, currency) {
    const snapshot = record.followup;
    const body = snapshot.key
      ? [followupPlan(snapshot, live), ...runs.map((run) => runLine(run, currency))]
      : [el("div", { class: "error-line" }, "the follow-up could not be stored: " + (snapshot.error || "unknown error"))];
    return el("tr", { class: "followup-row", dataset: { followupKey: snapshot.key || "", entityId: record.entity_id } },
      el("td", { class: "muted followup-arrow" }, "↳ follow-up"),
      el("td", { colspan: 6 }, body));
  }

  function followupPlan(snapshot, live) {
    const current = live ? live.get(snapshot.key) : null;
    const followup = current || snapshot;
    let note = null;
    if (!live) note = "status as recorded when it was scheduled (live status unavailable)";
    else if (!current) note = "replaced by a later run of this rule (status as recorded)";
    else if (current.overdue) note = "overdue: its timer did not fire — is a worker running, is Redis up?";
    return el("div", { class: "followup-plan" },
      el("strong", {}, "then: " + followup.do), " · due ",
      el("span", { class: "due", title: followup.due_at || "" }, fmtTime(followup.due_at)),
      el("span", { class: "muted" }, " (" + RE.fmtRelative(followup.due_at) + ") "),
      badge(followup.status),
      followup.reason ? el("span", { class: "reason" }, followup.reason) : null,
      note ? el("div", { class: current && current.overdue ? "warn-line" : "muted" }, note) : null);
  }

  function lateText(lateS) {
    if (lateS === null || lateS === undefined) return "";
    return Number(lateS) < 60 ? "ran on time" : "ran " + RE.fmtDuration(lateS) + " late";
  }

  /* "then: activate — done, ran 25 min late · status: PAUSED → ACTIVE" or "… — skipped: changed_by_someone_else". */
  function runText(run, currency) {
    const what = String((run.action && run.action.type) || "then").replace(/^then:/, "then: ");
    const result = { applied: "done", no_change: "done (nothing to change)" }[run.outcome]
      || words(run.outcome) + (run.reason ? ": " + words(run.reason) : "");
    const parts = [what + " — " + result, lateText(run.late_s)].filter(Boolean);
    const change = RE.changeText(run, currency);
    return [parts.join(", "), change !== "—" ? el("span", { class: "muted" }, " · " + change) : null,
      run.error ? el("div", { class: "error-line" }, run.error.message || JSON.stringify(run.error)) : null];
  }

  function runLine(run, currency) {
    return el("div", { class: "followup-run outcome-" + run.outcome }, runText(run, currency));
  }

  /* A follow-up's execution record whose original execution is not in this batch's list. */
  function followupRecordRow(run, currency) {
    return el("tr", { class: "followup-record outcome-" + run.outcome, dataset: { entityId: run.entity_id, followupKey: run.followup_key } },
      entityCell(run),
      el("td", {}, run.task_id, el("div", { class: "muted" }, "follow-up")),
      el("td", { colspan: 5 }, runLine(run, currency)));
  }

  /* Every undo of a batch (older rows name only the first). */
  function undosOf(batch) {
    return batch.undos || (batch.undone_by ? [batch.undone_by] : []);
  }

  /* The undo links of a batch and its Undo button (with the plan panel it opens): "Undo…"
   * before any undo, "Undo what is left…" while some change an undo tried is not set back. */
  function undoBlock(batch, items) {
    const block = el("div", { class: "undo-block" });
    if (batch.undoes) {
      block.append(el("p", { class: "undo-link" }, `Undo by ${batch.by || "?"} of batch `, batchLink(batch.undoes)));
    }
    for (const undoId of undosOf(batch)) {
      block.append(el("p", { class: "undo-link" }, "Undone by ", batchLink(undoId)));
    }
    const left = batch.not_undone || [];
    if (left.length) {
      block.append(el("p", { class: "warn-line undo-left" },
        `${left.length} change(s) could not be set back (Meta's limits or a failed write; the undo's records say why).`));
    }
    const applied = items.some((r) => r.kind !== "followup" && r.outcome === "applied");
    if (applied && !batch.undoes && (!undosOf(batch).length || left.length)) {
      const rest = left.length ? left : null;
      const button = el("button", { type: "button", class: "undo-open", "aria-expanded": "false",
        dataset: { needs: UNDO_ROUTE }, onclick: () => openPlan(batch, items, block, button, false, rest) }, rest ? "Undo what is left…" : "Undo…");
      block.append(button);
    }
    return block;
  }

  /* The plan of undoing the batch (only `executions` when given), and its Confirm. */
  async function openPlan(batch, items, block, button, pauseCopies = false, executions = null) {
    const panel = el("section", { class: "undo-plan", "aria-label": `Undo plan of batch ${batch.batch_id}` },
      el("span", { class: "muted" }, "reading the live values…"));
    block.querySelector(".undo-plan")?.remove();
    block.append(panel);
    button.setAttribute("aria-expanded", "true");
    const path = `/api/batches/${encodeURIComponent(batch.batch_id)}/undo`;
    const chosen = executions ? { executions } : {};
    let plan;
    try {
      plan = await api("POST", path, { ...chosen, dry_run: true, pause_copies: pauseCopies });
    } catch (err) {
      panel.replaceChildren(el("p", { class: "error-line", role: "alert" }, err.message));
      return;
    }
    const close = () => { panel.remove(); button.setAttribute("aria-expanded", "false"); button.focus(); };
    const confirm = el("button", { type: "button", class: "undo-confirm", dataset: { needs: UNDO_ROUTE },
      disabled: plan.will_revert === 0 && !plan.followups.some((f) => f.will_cancel) },
      `Confirm undo (${plan.will_revert} to set back)`);
    const cancel = el("button", { type: "button", class: "undo-cancel secondary", onclick: close }, "Cancel");
    confirm.addEventListener("click", async () => {
      confirm.disabled = true;
      cancel.disabled = true;
      try {
        const queued = await api("POST", path, { ...chosen, pause_copies: pauseCopies });
        panel.replaceChildren(el("p", { role: "status", class: "undo-status" }, "Undo ", batchLink(queued.undo_batch_id),
          ` ${String(queued.status).toLowerCase()}…`));
        await waitForUndo(batch.batch_id, queued.undo_batch_id, panel, block, items);
      } catch (err) {
        panel.append(el("p", { class: "error-line", role: "alert" }, err.message));
      }
    });
    const children = [
      el("h2", { class: "undo-title" }, `Undo batch ${batch.batch_id}?`),
      el("p", { class: "muted undo-account" }, "Ad account " + accountText(plan.account_name, plan.account) +
        (plan.currency ? ", amounts in " + plan.currency : "")),
      el("p", {}, `${plan.will_revert} change(s) will be set back; ${plan.skipped} will not.`),
      planTable(plan),
    ];
    const copies = plan.changes.some((c) => c.action === "pause_copy" || c.reason === "copy_kept");
    if (copies) {
      const box = el("input", { type: "checkbox", id: `pause-copies-${batch.batch_id}`, checked: pauseCopies,
        onchange: () => openPlan(batch, items, block, button, box.checked, executions) });
      children.push(el("p", {}, box, el("label", { for: box.id }, " Pause the copies this batch made (copies are never deleted)")));
    }
    if (plan.followups.length) {
      children.push(el("p", {}, `${plan.followups.filter((f) => f.will_cancel).length} follow-up(s) not yet run will be cancelled.`));
    }
    children.push(el("p", { class: "undo-actions" }, confirm, " ", cancel));
    panel.replaceChildren(...children);
    confirm.focus();
  }

  const WHY = {
    changed_by_someone_else: "changed by someone else since",
    notification_cannot_be_undone: "a message cannot be taken back",
    copy_kept: "copies are not deleted",
    already_paused: "already paused",
    live_read_failed: "the live value could not be read",
    not_revertible: "cannot be set back",
    already_undone: "an earlier undo set it back",
  };

  function planTable(plan) {
    const rows = plan.changes.map((c) => el("tr", { class: c.will_revert ? "will-revert" : "will-skip" },
      el("td", {}, c.entity_name || c.entity_id, el("div", { class: "muted" }, c.entity_id)),
      el("td", {}, c.field ? fieldName(c.field) : "—"),
      el("td", { class: "change" }, fieldChange(c.field, c.before, c.after, plan.currency) + RE.windowText(c.schedule)),
      el("td", {}, typeof c.live === "object" && c.live !== null ? "—" : fieldValue(c.field, c.live, plan.currency)),
      el("td", {}, c.will_revert ? "set back to " + fieldValue(c.field, c.before, plan.currency)
        : `skipped: ${WHY[c.reason] || words(c.reason)}`)));
    return el("table", { class: "grid compact undo-changes" },
      el("caption", {}, "What the undo will do, from the values Meta holds now"),
      el("thead", {}, el("tr", {}, ["Entity", "Field", "The batch changed", "Live now", "Undo"].map((h) => el("th", { scope: "col" }, h)))),
      el("tbody", {}, rows));
  }

  /* What a finished undo did: how many set back, and how many it could not. */
  function undoOutcome(undo, undoId) {
    const missed = undo.complete === false
      ? ` ${undo.not_reverted_count} could not be set back (Meta's limits or a failed write): see its records.` : "";
    return el("p", { role: "status", class: "undo-status" + (missed ? " warn-line" : "") },
      `Undo ${undo.status.toLowerCase()}${missed ? ", incomplete" : ""}: `, `${undo.reverted_count ?? undo.applied_count ?? 0} set back.${missed} `,
      batchLink(undoId));
  }

  /* Poll until the worker has carried the undo out (the batch lists its undo once it starts),
   * then show the batch's undo links again. */
  async function waitForUndo(batchId, undoId, panel, block, items) {
    for (let i = 0; i < 600; i++) {
      try {
        const batch = await api("GET", "/api/batches/" + encodeURIComponent(batchId));
        const undo = undosOf(batch).includes(undoId) ? await api("GET", "/api/batches/" + encodeURIComponent(undoId)) : null;
        if (undo && undo.status !== "RUNNING") {
          panel.replaceChildren(undoOutcome(undo, undoId));
          const next = undoBlock(await api("GET", "/api/batches/" + encodeURIComponent(batchId)), items);
          next.append(panel);
          block.replaceWith(next);
          return;
        }
      } catch (_err) {
        // transient: the next poll tries again
      }
      await new Promise((resolve) => setTimeout(resolve, 1000));
    }
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
    state.unitOf = await RE.metricUnits();
    await loadFilters();
    await loadBatches();
    setInterval(refreshRunning, REFRESH_MS);
  });
})();
