/* Errors screen: grouped error log with counts, samples, and Resolve / Ignore / Re-activate. */
"use strict";

(() => {
  const { api, el, badge, failed, say, timeCell, fmtTime, pretty, pager } = RE;
  const $ = (id) => document.getElementById(id);
  const LIMIT = 25;
  const state = { offset: 0 };
  const ACTIONS = [["resolved", "Resolve"], ["ignored", "Ignore"], ["active", "Re-activate"]];

  async function load() {
    const params = new URLSearchParams({ limit: LIMIT, offset: state.offset });
    if ($("filter-status").value) params.set("status", $("filter-status").value);
    let page;
    try {
      page = await api("GET", "/api/errors?" + params.toString());
    } catch (err) {
      failed(err, "could not load the error log");
      return;
    }
    $("errors-table").tBodies[0].replaceChildren(...page.items.map(groupRow));
    $("errors-empty").classList.toggle("hidden", page.items.length > 0);
    pager($("page-info"), state.offset, LIMIT, page.total);
    $("prev-page").disabled = state.offset === 0;
    $("next-page").disabled = state.offset + LIMIT >= page.total;
  }

  function groupCells(group, row) {
    return [
      el("td", {}, el("code", {}, group.function)),
      el("td", { class: "message-cell", title: group.message }, group.message),
      el("td", { class: "num" }, group.count),
      el("td", { class: "hourly-cell" }, hourly(group)),
      timeCell(group.first_seen),
      timeCell(group.last_seen),
      el("td", { class: "group-status" }, badge(group.status),
        group.status_changed_by ? el("div", { class: "muted status-by" }, "by " + group.status_changed_by) : null),
      el("td", { class: "actions" },
        el("button", { type: "button", class: "small ghost", onclick: () => toggleSamples(row, group) }, `Samples (${group.samples.length})`),
        ACTIONS.filter(([status]) => status !== group.status).map(([status, label]) =>
          el("button", { type: "button", class: "small secondary", dataset: { action: status, needs: "PATCH /api/errors/{id}" },
            onclick: (event) => { event.stopPropagation(); setStatus(row, group, status, event.currentTarget); } }, label))),
    ];
  }

  /* occurrences per UTC hour, the last 48 hours, as a sparkline */
  function hourly(group) {
    const counts = (group.per_hour || {}).counts || [];
    const total = counts.reduce((a, b) => a + b, 0);
    return RE.sparkline(counts, {
      label: `occurrences per hour, last ${counts.length} hours`,
      title: `${total} occurrence(s) in the last ${counts.length} hours, from ${fmtTime(group.per_hour.since)}`,
    });
  }

  function groupRow(group) {
    const row = el("tr", { class: "group-row", dataset: { groupId: group.id, status: group.status } });
    row.append(...groupCells(group, row));
    return row;
  }

  async function setStatus(row, group, status, button) {
    try {
      const updated = await api("PATCH", "/api/errors/" + encodeURIComponent(group.id), { status });
      row.replaceChildren(...groupCells(updated, row));
      row.dataset.status = updated.status;
      say(row.querySelector(".group-status .badge"), `now ${updated.status}`, "ok");
    } catch (err) {
      failed(err, "could not change the status", button);
    }
  }

  async function loadHolds() {
    let page;
    try {
      page = await api("GET", "/api/holds?status=active&limit=100");
    } catch (err) {
      failed(err, "could not load the holds");
      return;
    }
    $("holds-table").tBodies[0].replaceChildren(...page.items.map((h) => el("tr", { dataset: { holdId: h.id } },
      el("td", {}, el("div", {}, h.entity.name || h.entity.id), el("div", { class: "muted" }, h.entity.id)),
      el("td", {}, el("code", {}, h.field)),
      el("td", {}, h.account || ""),
      el("td", {}, (h.rules || []).join(", ")),
      el("td", { class: "num" }, (h.changes || []).length),
      timeCell(h.placed_at),
      el("td", { class: "actions" }, el("button", { type: "button", class: "small secondary", dataset: { action: "clear-hold", needs: "DELETE /api/holds/{id}" },
        onclick: (event) => clearHold(h, event.currentTarget) }, "Clear hold")))));
    $("holds-empty").classList.toggle("hidden", page.items.length > 0);
  }

  async function clearHold(hold, button) {
    try {
      await api("DELETE", "/api/holds/" + encodeURIComponent(hold.id));
      say($("holds-table"), `hold on ${hold.field} of ${hold.entity.id} cleared`, "ok");
    } catch (err) {
      failed(err, "could not clear the hold", button);
      return;
    }
    loadHolds();
  }

  function toggleSamples(row, group) {
    const next = row.nextElementSibling;
    if (next && next.classList.contains("detail-row")) {
      next.remove();
      return;
    }
    const samples = group.samples.map((s) => el("div", { class: "sample" },
      el("div", { class: "sample-head" }, el("strong", {}, fmtTime(s.at)), " ", s.message),
      el("div", { class: "sample-grid" },
        el("div", {}, el("h4", {}, "Request / params"), pretty(s.params)),
        el("div", {}, el("h4", {}, "Response"), pretty(s.response))),
      s.context ? el("details", {}, el("summary", {}, "Context"), pretty(s.context)) : null,
      s.stack ? el("details", {}, el("summary", {}, "Stack"), el("pre", { class: "json" }, s.stack)) : null));
    row.after(el("tr", { class: "detail-row" }, el("td", { colspan: 8 },
      samples.length ? samples : el("p", { class: "muted" }, "No samples kept."))));
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("filter-status").addEventListener("change", () => { state.offset = 0; load(); });
    $("prev-page").addEventListener("click", () => { state.offset = Math.max(0, state.offset - LIMIT); load(); });
    $("next-page").addEventListener("click", () => { state.offset += LIMIT; load(); });
    load();
    loadHolds();
  });
})();
