/* Approvals screen: the changes rules planned and that wait for a person (rule, entity,
 * before → after, age, expiry), with Approve and Reject; below, the decided ones with who
 * decided and what the write found (applied, changed by someone else, expired).
 *
 * /approvals/{id} (the link of a proposal's notification) highlights that one.
 */
"use strict";

(() => {
  const { api, el, badge, failed, say, fmtTime, fmtRelative, fieldChange, fieldValue, fieldName, accountText } = RE;
  const $ = (id) => document.getElementById(id);
  const focusId = document.body.dataset.ruleId || "";
  const REFRESH_MS = 15000;

  /* "daily budget $120.00 → $108.00 (−10 %)", in the account's currency. */
  function change(item) {
    return el("td", { class: "change" }, el("span", { class: "field" }, fieldName(item.field || "")), " ",
      el("strong", {}, fieldChange(item.field, item.before, item.after, item.currency) + RE.windowText(item.schedule)));
  }

  function changeWords(item) {
    return `${fieldName(item.field)} ${fieldChange(item.field, item.before, item.after, item.currency)}${RE.windowText(item.schedule)}`;
  }

  function ruleCell(item) {
    return el("td", {}, el("a", { href: "/rules/" + encodeURIComponent(item.rule.id) }, item.rule.name || item.rule.id),
      el("span", { class: "muted" }, ` v${item.rule.version} · ${item.task_id}`));
  }

  function entityCell(item) {
    return el("td", {}, el("a", { href: "/entities/" + encodeURIComponent(item.entity.id) }, item.entity.name || item.entity.id),
      el("code", { class: "muted" }, " " + item.entity.id),
      el("div", { class: "muted account" }, accountText(item.account_name, item.account)));
  }

  function pendingRow(item) {
    const what = `${item.entity.name || item.entity.id}: ${changeWords(item)}`;
    const row = el("tr", { dataset: { approvalId: item.id }, class: item.id === focusId ? "focused" : "" },
      ruleCell(item), entityCell(item), change(item),
      el("td", { title: item.created_at }, fmtRelative(item.created_at)),
      el("td", { title: item.expires_at }, fmtTime(item.expires_at), el("span", { class: "muted ago" }, fmtRelative(item.expires_at))),
      el("td", { class: "actions" },
        el("button", { type: "button", class: "small", dataset: { action: "approve", needs: "POST /api/approvals/{id}/approve" },
          "aria-label": "Approve " + what, onclick: (event) => decide(item, "approve", event.currentTarget) }, "Approve"),
        el("button", { type: "button", class: "small ghost", dataset: { action: "reject", needs: "POST /api/approvals/{id}/reject" },
          "aria-label": "Reject " + what, onclick: (event) => decide(item, "reject", event.currentTarget) }, "Reject")));
    return row;
  }

  function decidedRow(item) {
    const found = item.status === "changed_by_someone_else" && item.live !== null && item.live !== undefined
      ? el("div", { class: "muted" }, "live value " + fieldValue(item.field, item.live, item.currency)) : null;
    // an approved change whose write met a transient failure: tried again until it lands or expires
    const retrying = item.status === "approved" && item.last_error
      ? el("div", { class: "muted" }, `attempt ${item.attempts}: ${item.last_error.reason}, tried again ${fmtRelative(item.retry_at)}`)
      : null;
    return el("tr", { dataset: { approvalId: item.id }, class: item.id === focusId ? "focused" : "" },
      el("td", {}, badge(item.status), found, retrying),
      ruleCell(item), entityCell(item), change(item),
      el("td", {}, item.decided_by || el("span", { class: "muted" }, item.status === "expired" ? "nobody (expired)" : "—")),
      el("td", { title: item.decided_at || "" }, fmtTime(item.decided_at || item.created_at)));
  }

  /* The decision's outcome is said where the row goes: beside its row in the Decided table. */
  async function decide(item, verb, button) {
    try {
      await api("POST", `/api/approvals/${encodeURIComponent(item.id)}/${verb}`);
    } catch (err) {
      failed(err, `could not ${verb}`, button);
      return;
    }
    await load();
    const row = [...document.querySelectorAll("#decided-table tr[data-approval-id]")].find((r) => r.dataset.approvalId === item.id);
    const anchor = row ? row.querySelector(".badge") : $("decided-title");
    say(anchor, verb === "approve"
      ? `${changeWords(item)} is written by a worker`
      : `${item.entity.name || item.entity.id} stays at ${fieldValue(item.field, item.before, item.currency)}`, "ok");
  }

  async function load() {
    let pending, all;
    try {
      [pending, all] = await Promise.all([
        api("GET", "/api/approvals?status=pending&limit=500"),
        api("GET", "/api/approvals?limit=100"),
      ]);
    } catch (err) {
      failed(err, "could not load the approvals");
      return;
    }
    $("pending-table").tBodies[0].replaceChildren(...pending.items.map(pendingRow));
    $("pending-empty").classList.toggle("hidden", pending.items.length > 0);
    const decided = all.items.filter((i) => i.status !== "pending");
    $("decided-table").tBodies[0].replaceChildren(...decided.map(decidedRow));
    $("decided-empty").classList.toggle("hidden", decided.length > 0);
  }

  load();
  setInterval(load, REFRESH_MS);
})();
