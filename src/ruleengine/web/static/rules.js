/* Rules screen: list with conflict badges, JSON editor with live validation, save (and the
   conflicts it reports), conflict check, pause/activate, versions, preview (the Backtest
   panel is backtest.js, the form view beside the JSON is builder.js). */
"use strict";

(() => {
  const { api, el, badge, say, failed, fmtTime, fmtNextRun, zonedTimeCell, debounce } = RE;
  const $ = (id) => document.getElementById(id);
  const state = { current: null, isNew: false, seq: 0, conflicts: {} };
  const VALIDATE_AFTER_MS = 800;  // a pause in typing, not a keystroke

  const NEW_RULE = {
    name: "New rule",
    format: 2,
    status: "PAUSED",
    level: "campaign",
    ad_accounts: ["act_1001"],
    filters: [{ field: "effective_status", operator: "IN", value: ["ACTIVE"] }],
    schedule: { mode: "interval", every_minutes: 15 },
    timezone: "UTC",
    tasks: [{
      id: "main",
      match: "all",
      conditions: [{ metric: "spend", period: "today", operator: ">", value: 50 }],
      action: { type: "pause" },
      cooldown_minutes: 60,
    }],
  };

  // ---------------------------------------------------------------- list

  const PAGE = 500;  // the API's largest page: the screen lists every rule, page by page

  async function fetchRules() {
    const items = [];
    for (let skip = 0; ; skip += PAGE) {
      const page = await api("GET", `/api/rules?limit=${PAGE}&skip=${skip}`);
      items.push(...page.items);
      if (!page.items.length || items.length >= page.total) return items;
    }
  }

  async function loadConflicts() {
    try {
      // the counts only: the findings themselves are paged, and need a token
      state.conflicts = (await api("GET", "/api/rules/conflicts/counts")).conflicting_rules;
    } catch (_err) {
      state.conflicts = {};  // the list still shows; only the badges are missing
    }
  }

  async function loadRules() {
    let items;
    try {
      items = await fetchRules();
    } catch (err) {
      failed(err, "could not load the rules");
      return;
    }
    const show = () => {
      $("rules-table").tBodies[0].replaceChildren(...items.map(ruleRow));
      $("rules-empty").classList.toggle("hidden", items.length > 0);
      markSelected();
    };
    show();
    await loadConflicts();  // the badges follow: a big rule set takes longer to analyse
    show();
    await loadFires(items.map((r) => r.id));
  }

  // fires per day: the sparkline of each listed rule
  const TREND_DAYS = 14;

  function loadFires(ids) {
    return RE.fillTrends("/api/trends/rules/fires", ids, {
      days: TREND_DAYS, table: $("rules-table"), cellSelector: "td.fires-cell",
      options: (item, first, last) => ({
        label: `fires per day, last ${TREND_DAYS} days`,
        title: `${item.values.reduce((a, b) => a + b, 0)} action(s) applied from ${first} to ${last} (UTC days)`,
      }),
    });
  }

  function issueLine(rule) {
    return rule.issue ? el("div", { class: "issue" }, rule.issue.message) : null;
  }

  function conflictBadge(rule) {
    const count = state.conflicts[rule.id];
    if (!count) return null;
    return el("span", { class: "badge conflict", dataset: { conflicts: count },
      title: `fights ${count} time(s) with other rules or itself: open the rule and “Check conflicts”` },
    count === 1 ? "conflict" : count + " conflicts");
  }

  function ruleRow(rule) {
    const next = rule.status === "ACTIVE" ? rule.next_execute_at : null;
    const idle = { ACTIVE: "—", PAUSED: "paused", HAS_ISSUES: "held: has issues" }[rule.status] || "—";
    const open = async () => {
      await selectRule(rule.id);
      $("rule-detail").scrollIntoView({ block: "start" });
    };
    return el("tr", { class: "clickable", dataset: { ruleId: rule.id }, onclick: open },
      el("td", {}, el("a", { href: "/rules/" + encodeURIComponent(rule.id), onclick: (e) => e.preventDefault() }, rule.name),
        conflictBadge(rule), issueLine(rule)),
      el("td", {}, badge(rule.status)),
      el("td", {}, rule.schedule || "—", el("span", { class: "muted" }, rule.timezone ? " · " + rule.timezone : "")),
      next ? zonedTimeCell(next, rule.timezone, fmtNextRun) : el("td", { class: "muted" }, idle),
      zonedTimeCell(rule.last_execute_at, rule.timezone),
      el("td", { class: "fires-cell", dataset: { ruleId: rule.id } }),
      el("td", { class: "num" }, rule.version === null ? "—" : "v" + rule.version));
  }

  function markSelected() {
    for (const row of $("rules-table").tBodies[0].rows) {
      row.classList.toggle("selected", !!state.current && row.dataset.ruleId === state.current.id);
    }
  }

  // ---------------------------------------------------------------- detail

  async function selectRule(id) {
    let rule;
    try {
      rule = await api("GET", "/api/rules/" + encodeURIComponent(id));
    } catch (err) {
      failed(err, "could not load the rule");
      return;
    }
    state.current = rule;
    state.isNew = false;
    history.replaceState(null, "", "/rules/" + encodeURIComponent(id));
    showDetail();
    $("rule-editor").value = JSON.stringify(rule.definition, null, 2);
    $("rule-editor").scrollTop = 0;
    document.dispatchEvent(new CustomEvent("ruleeditor:loaded"));  // the form view follows
    markSelected();
    validateNow();
    loadVersions();
  }

  function showDetail() {
    const rule = state.current;
    $("rule-detail").classList.remove("hidden");
    $("preview-block").classList.add("hidden");
    $("conflicts-block").classList.add("hidden");
    $("detail-title").textContent = state.isNew ? "New rule" : rule.name;
    $("detail-status").replaceChildren(state.isNew ? "" : badge(rule.status));
    const issue = !state.isNew && rule.issue;
    $("detail-issue").classList.toggle("hidden", !issue);
    $("detail-issue").textContent = issue ? "This rule cannot run: " + rule.issue.message +
      ". Save a corrected definition, roll back to a good version, or activate it once the cause is fixed." : "";
    $("detail-version").textContent = state.isNew ? "not saved yet"
      : `version ${rule.version} of ${rule.latest_version} · ${rule.schedule || "schedule unknown"} (${rule.definition.timezone || "UTC"}) · next run ${rule.status === "ACTIVE" ? fmtNextRun(rule.next_execute_at) || "—" : rule.status === "PAUSED" ? "— (paused)" : "— (held)"}`
        + (rule.updated_by ? ` · last changed by ${rule.updated_by}` : "");
    $("pause-rule").classList.toggle("hidden", state.isNew || rule.status !== "ACTIVE");
    $("activate-rule").classList.toggle("hidden", state.isNew || rule.status === "ACTIVE");
    $("versions-block").classList.toggle("hidden", state.isNew);
    $("save-rule").textContent = state.isNew ? "Create" : "Save";
    document.dispatchEvent(new CustomEvent("ruleeditor:shown", { detail: { isNew: state.isNew, id: rule ? rule.id : null } }));
  }

  async function newRule() {
    state.current = null;
    state.isNew = true;
    const draft = structuredClone(NEW_RULE);
    try {
      const accounts = await api("GET", "/api/accounts");
      if (accounts.items.length) draft.ad_accounts = [accounts.items[0].id];
    } catch (_err) {
      // keep the placeholder account; validation will say if it is not registered
    }
    history.replaceState(null, "", "/rules");
    showDetail();
    $("rule-editor").value = JSON.stringify(draft, null, 2);
    document.dispatchEvent(new CustomEvent("ruleeditor:loaded"));
    markSelected();
    validateNow();
  }

  // ---------------------------------------------------------------- validation

  /* Where each JSON path starts in the editor text, e.g. "tasks[0].action.percent" → offset. */
  function locatePaths(text) {
    const spots = new Map();
    let i = 0;
    const ws = () => { while (i < text.length && /\s/.test(text[i])) i++; };
    const str = () => {
      const start = i++;
      while (i < text.length && text[i] !== '"') i += text[i] === "\\" ? 2 : 1;
      i++;
      return JSON.parse(text.slice(start, i));
    };
    const value = (path, at) => {
      ws();
      spots.set(path, at === undefined ? i : at);
      if (text[i] === "{") {
        i++; ws();
        while (text[i] !== "}") {
          ws(); const keyAt = i; const key = str(); ws(); i++;
          value(path ? path + "." + key : key, keyAt); ws();
          if (text[i] === ",") i++;
          ws();
        }
        i++;
      } else if (text[i] === "[") {
        i++; ws();
        for (let n = 0; text[i] !== "]"; n++) {
          value(path + "[" + n + "]"); ws();
          if (text[i] === ",") i++;
          ws();
        }
        i++;
      } else if (text[i] === '"') str();
      else while (i < text.length && !/[,\]}\s]/.test(text[i])) i++;
    };
    try { value(""); } catch (_err) { /* only called on valid JSON; partial map is fine */ }
    return spots;
  }

  function parentPath(path) {
    const match = path.match(/^(.*?)(\.[^.[\]]+|\[\d+\])$/);
    return match ? match[1] : "";
  }

  function lineOf(text, path) {
    const spots = locatePaths(text);
    let probe = path;
    while (probe && !spots.has(probe)) probe = parentPath(probe);  // a missing field: its parent
    const offset = spots.get(probe) || 0;
    return { line: text.slice(0, offset).split("\n").length, offset };
  }

  function showErrors(errors) {
    const text = $("rule-editor").value;
    const list = $("field-errors");
    list.replaceChildren(...errors.map((e) => {
      const where = lineOf(text, e.path);
      return el("li", { class: "field-error", dataset: { path: e.path }, title: "go to line " + where.line,
        onclick: () => focusOffset(where.offset) },
      el("code", { class: "path" }, e.path || "(whole rule)"),
      el("span", { class: "line" }, "line " + where.line),
      el("span", { class: "message" }, e.message));
    }));
    document.dispatchEvent(new CustomEvent("ruleeditor:errors", { detail: { errors } }));  // to the form's fields
    const valid = errors.length === 0;
    $("validity").textContent = valid ? "✓ valid" : `✗ ${errors.length} problem${errors.length > 1 ? "s" : ""}`;
    $("validity").className = "validity " + (valid ? "ok" : "bad");
  }

  function focusOffset(offset) {
    const editor = $("rule-editor");
    editor.focus();
    const end = editor.value.indexOf("\n", offset);
    editor.setSelectionRange(offset, end < 0 ? editor.value.length : end);
  }

  function parseEditor() {
    try {
      return { value: JSON.parse($("rule-editor").value) };
    } catch (err) {
      return { error: { path: "", message: "not valid JSON: " + err.message } };
    }
  }

  async function validateNow() {
    const seq = ++state.seq;
    const parsed = parseEditor();
    if (parsed.error) {
      showErrors([parsed.error]);
      return;
    }
    try {
      await api("POST", "/api/rules/validate", parsed.value);
      if (seq === state.seq) showErrors([]);
    } catch (err) {
      if (seq !== state.seq) return;  // an older answer arriving late
      if (err.status === 422) showErrors(err.body.errors || []);
      else failed(err, "could not validate");
    }
  }

  // ---------------------------------------------------------------- actions

  async function save() {
    const parsed = parseEditor();
    if (parsed.error) {
      showErrors([parsed.error]);
      return;
    }
    const button = $("save-rule");
    say(button, "saving…");
    try {
      let rule, done;
      if (state.isNew) {
        rule = await api("POST", "/api/rules", parsed.value);
        done = `created “${rule.name}” (version 1)`;
      } else {
        const id = encodeURIComponent(state.current.id);
        rule = await api("PUT", "/api/rules/" + id, parsed.value, { "If-Match": String(state.current.version) });
        done = rule.new_version ? `saved as version ${rule.version}` : "no change: the definition is identical, no new version";
      }
      await loadRules();
      await selectRule(rule.id);
      say(button, done, "ok");
      renderConflicts(rule.warnings || [], "found when saving, against the active rules");
    } catch (err) {
      if (err.status === 422) {
        showErrors(err.body.errors || []);
        say(button, `not saved: ${(err.body.errors || []).length || "some"} problem(s), listed at their fields`, "error");
        return;
      }
      if (err.status === 409 && err.body.conflicts) renderConflicts(err.body.conflicts, "not saved");
      failed(err, "not saved", button);
    }
  }

  // ---------------------------------------------------------------- conflicts

  const SCOPE = { overlap: "same entities", may_overlap: "scopes may overlap" };
  const FIRE = {
    can_fire_together: "can fire together",
    may_fire_together: "may fire together",
    cannot_fire_together: "cannot fire together",
  };

  function conflictItem(f) {
    const [a, b] = f.rules;
    const side = (s) => el("span", {}, el("strong", {}, s.name), ` · ${s.task_id} (${s.does})`);
    const entities = (f.entities || []).map((e) => e.error ? `${e.ad_account}: ${e.error}` : `${e.name} (${e.id})`);
    return el("li", { class: "severity-" + f.severity, dataset: { field: f.field, kind: f.kind } },
      el("div", {}, el("span", { class: "badge " + (f.severity === "conflict" ? "conflict" : "") },
        f.severity === "conflict" ? "conflict" : "note"), `${f.field}: `, side(a), " ↔ ", side(b)),
      el("div", { class: "why" }, `${f.kind.replace(/_/g, " ")} · ${SCOPE[f.scope]} · ${FIRE[f.conditions]}` +
        (f.both_active ? "" : " · not both active") + " — " + f.why),
      entities.length ? el("div", { class: "why" }, "now in both scopes: " + entities.join(", ")) : null);
  }

  function renderConflicts(findings, when) {
    const conflicts = findings.filter((f) => f.severity === "conflict").length;
    $("conflicts-meta").textContent = findings.length
      ? `${conflicts} conflict(s), ${findings.length - conflicts} note(s) · ${when}`
      : `none · ${when}`;
    $("conflicts-list").replaceChildren(...findings.map(conflictItem));
    $("conflicts-block").classList.remove("hidden");
  }

  async function checkConflicts() {
    const parsed = parseEditor();
    if (parsed.error) {
      showErrors([parsed.error]);
      return;
    }
    const query = state.isNew ? "" : "&rule_id=" + encodeURIComponent(state.current.id);
    const button = $("check-conflicts");
    button.disabled = true;
    say(button, "checking…");
    try {
      // live entities are listed at Meta, which an editor may ask; a viewer gets the findings
      const live = RE.hasRole("editor");
      const result = await api("POST", "/api/rules/conflicts?" + (live ? "live=1" + query : query.slice(1)), parsed.value);
      const when = live ? "this definition against the active rules, with live entities"
        : "this definition against the active rules (live entities need the editor role)";
      renderConflicts(result.findings, when);
      say(button, `${result.findings.length} finding(s), listed below`, "ok");
    } catch (err) {
      if (err.status === 422) showErrors(err.body.errors || []);
      failed(err, "conflict check failed", button);
    } finally {
      button.disabled = false;
      RE.applyRoles(button);
    }
  }

  async function setStatus(action) {
    // the note goes beside Save: Pause and Activate swap places once it is done
    const anchor = $("save-rule");
    try {
      const rule = await api("POST", `/api/rules/${encodeURIComponent(state.current.id)}/${action}`);
      await loadRules();
      await selectRule(state.current.id);
      say(anchor, action === "pause" ? "rule paused" : "rule activated", "ok");
      if (rule.warnings && rule.warnings.length) renderConflicts(rule.warnings, "found when activating");
    } catch (err) {
      if (err.status === 409 && err.body && err.body.conflicts) renderConflicts(err.body.conflicts, "not activated");
      failed(err, action + " failed", anchor);
    }
  }

  async function loadVersions() {
    const id = state.current.id;
    let data;
    try {
      data = await api("GET", `/api/rules/${encodeURIComponent(id)}/versions`);
    } catch (err) {
      failed(err, "could not load the versions");
      return;
    }
    $("versions-table").tBodies[0].replaceChildren(...data.items.map((v) => el("tr", { class: v.active ? "selected" : "" },
      el("td", {}, "v" + v.version, v.active ? el("span", { class: "badge status-active" }, "active") : null),
      el("td", { title: v.created_at }, fmtTime(v.created_at)),
      el("td", {}, v.author, el("span", { class: "muted" }, " · " + v.source)),
      el("td", { title: v.checksum }, el("code", {}, v.checksum.slice(0, 10))),
      el("td", {}, v.active ? "" : el("button", { type: "button", class: "small secondary", dataset: { version: v.version, needs: "POST /api/rules/{id}/rollback" },
        onclick: () => rollback(v.version) }, "Roll back")))));
  }

  async function rollback(version) {
    try {
      const rule = await api("POST", `/api/rules/${encodeURIComponent(state.current.id)}/rollback`,
        { version, expected_version: state.current.version });
      await loadRules();
      await selectRule(rule.id);
      say($("versions-table"), `rolled back: version ${rule.version} is active`, "ok");
      if (rule.warnings && rule.warnings.length) renderConflicts(rule.warnings, "found when rolling back");
    } catch (err) {
      if (err.status === 409 && err.body && err.body.conflicts) renderConflicts(err.body.conflicts, "not rolled back");
      failed(err, "rollback failed", $("versions-table"));
    }
  }

  // ---------------------------------------------------------------- preview

  async function preview() {
    const parsed = parseEditor();
    if (parsed.error) {
      showErrors([parsed.error]);
      return;
    }
    const stored = state.current && JSON.stringify(state.current.definition) === JSON.stringify(parsed.value);
    const path = state.isNew ? "/api/rules/preview" : `/api/rules/${encodeURIComponent(state.current.id)}/preview`;
    const button = $("preview-rule");
    button.disabled = true;
    say(button, "running the preview…");
    $("preview-meta").textContent = "running…";
    $("preview-block").classList.remove("hidden");
    try {
      const [result, unitOf] = await Promise.all([api("POST", path, stored ? undefined : parsed.value), RE.metricUnits()]);
      renderPreview(result, unitOf);
      say(button, `${result.summary.would_apply} would apply: see the Preview below`, "ok");
    } catch (err) {
      $("preview-meta").textContent = "";
      if (err.status === 422) showErrors(err.body.errors || []);
      failed(err, "preview failed", button);
    } finally {
      button.disabled = false;
      RE.applyRoles(button);
    }
  }

  /* The order a preview lists its rows in: what would change first, then what holds it back. */
  const PREVIEW_ORDER = ["would_apply", "awaiting_approval", "held_out", "failed", "skipped", "no_change", "not_matched"];

  function previewRank(record) {
    const rank = PREVIEW_ORDER.indexOf(record.outcome);
    return rank < 0 ? PREVIEW_ORDER.length : rank;
  }

  function renderPreview(result, unitOf) {
    const s = result.summary;
    $("preview-meta").textContent = `${result.draft ? "unsaved draft" : "version " + result.rule_version} · ` +
      `${s.evaluated} evaluated, ${s.matched} matched, ${s.would_apply} would apply` +
      (s.would_await_approval ? `, ${s.would_await_approval} would wait for approval` : "") + " · " +
      `${result.graph.counted_calls} Graph calls · nothing was written`;
    $("preview-errors").replaceChildren(...Object.entries(result.errors).map(([account, message]) =>
      el("li", { class: "error-line" }, el("code", {}, account), " " + message)));
    const records = result.records.map((r, i) => [r, i])
      .sort(([a, i], [b, j]) => previewRank(a) - previewRank(b) || i - j).map(([r]) => r);
    $("preview-table").tBodies[0].replaceChildren(...records.map((r) => el("tr", { class: "outcome-" + r.outcome, dataset: { outcome: r.outcome } },
      el("td", {}, el("div", {}, r.entity_name || r.entity_id),
        el("div", { class: "muted" }, r.entity_id + " · " + RE.accountText(r.account_name, r.account))),
      el("td", {}, r.task_id),
      el("td", {}, RE.conditionList(r.conditions, { unitOf, currency: r.currency })),
      el("td", { class: "change" }, RE.changeText(r, r.currency)),
      el("td", {}, RE.outcomeBadge(r.outcome)),
      el("td", { title: r.reason || "" }, RE.words(r.reason)))));
  }

  // ---------------------------------------------------------------- for the Backtest panel

  /* backtest.js reads the rule being edited and points its errors at the editor's lines;
     builder.js walks an error's JSON path up to a form field with parentPath. */
  window.RuleEditor = { parse: parseEditor, lineOf, focusOffset, parentPath };

  // ---------------------------------------------------------------- wiring

  document.addEventListener("DOMContentLoaded", async () => {
    $("new-rule").addEventListener("click", newRule);
    $("save-rule").addEventListener("click", save);
    $("preview-rule").addEventListener("click", preview);
    $("check-conflicts").addEventListener("click", checkConflicts);
    $("pause-rule").addEventListener("click", () => setStatus("pause"));
    $("activate-rule").addEventListener("click", () => setStatus("activate"));
    // live validation after a pause in typing (not per keystroke), and not while a value is
    // half typed in the form (a metric name being searched for): it asks again once complete
    const later = debounce(() => { if (!window.RuleBuilder || !window.RuleBuilder.typing()) validateNow(); }, VALIDATE_AFTER_MS);
    $("rule-editor").addEventListener("input", later);
    document.addEventListener("ruleeditor:complete", later);
    await loadRules();
    const wanted = document.body.dataset.ruleId;
    if (wanted) await selectRule(wanted);
  });
})();
