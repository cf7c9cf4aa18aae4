/* Rule builder: the form view beside the rule editor's JSON view.
 *
 * The JSON text is the one source of truth. The form is drawn from the parsed document
 * and the rule's JSON Schema (GET /api/rules/vocabulary: the schema, the metric
 * catalogue, periods, operators, filter fields, timezones); every change made in the
 * form is written into the document and the document back into the JSON view, which
 * validates as if typed. Typing in the JSON view redraws the form once the text parses.
 * Fields the form does not draw stay in the document untouched. Server validation
 * errors are shown at the control whose data-path their JSON path names (or the
 * nearest enclosing one).
 */
"use strict";

(() => {
  const { api, el } = RE;
  const $ = (id) => document.getElementById(id);

  const B = {
    vocab: null,          // GET /api/rules/vocabulary
    accounts: [],         // GET /api/accounts items
    model: null,          // the parsed rule document
    errors: [],           // the last validation errors [{path, message}]
    writing: false,       // the form is writing the JSON view: do not redraw from it
    stash: new Map(),     // values a mode switch put aside, by path, to bring back
    ids: 0,
  };

  const DAYS = [["mon", "Monday"], ["tue", "Tuesday"], ["wed", "Wednesday"], ["thu", "Thursday"],
    ["fri", "Friday"], ["sat", "Saturday"], ["sun", "Sunday"]];
  const RANGE_OPERATORS = new Set(["IN_RANGE", "NOT_IN_RANGE"]);
  const LIST_FILTER_OPERATORS = new Set(["IN", "NOT_IN"]);
  const MONEY_FIELDS = new Set(["amount", "max_budget", "min_budget", "min_bid", "max_bid"]);
  // actions that take no "then": a rebalance moves a group, a schedule ends by itself
  const NO_THEN = new Set(["rebalance_budget", "schedule_budget"]);
  const FIELD_LABELS = {
    percent: "By (%)", max_budget: "At most", min_budget: "At least", amount: "Amount",
    direction: "Direction", min_bid: "Lowest bid", max_bid: "Highest bid", target: "Target",
    max_change_percent: "Largest change per run (%)", template: "Template", text: "Text",
    webhook: "Webhook (a name from the settings)", status_option: "Status of the copy",
    rename_suffix: "Suffix of the copy's name", deep_copy: "Copy what is under it too",
    metric: "Metric", period: "Period",
  };
  const THEN_DEFAULT = {
    pause: "activate", activate: "pause", increase_budget: "restore_budget",
    decrease_budget: "restore_budget", set_budget: "restore_budget", scale_to_target: "restore_budget",
    rename: "restore_name", append_to_name: "restore_name", prepend_to_name: "restore_name",
  };

  // ---------------------------------------------------------------- paths

  /* "tasks[0].action.type" → ["tasks", 0, "action", "type"] */
  function keysOf(path) {
    const keys = [];
    for (const part of path.match(/[^.[\]]+|\[\d+\]/g) || []) {
      keys.push(part.startsWith("[") ? Number(part.slice(1, -1)) : part);
    }
    return keys;
  }

  function pathOf(keys) {
    return keys.reduce((text, key) => typeof key === "number" ? `${text}[${key}]` : text ? `${text}.${key}` : key, "");
  }

  function getAt(keys, root = B.model) {
    let node = root;
    for (const key of keys) {
      if (node === null || typeof node !== "object") return undefined;
      node = node[key];
    }
    return node;
  }

  /* Set (or, with undefined, remove) the value at keys, creating objects on the way. */
  function setAt(keys, value) {
    let node = B.model;
    for (let i = 0; i < keys.length - 1; i++) {
      if (node[keys[i]] === null || typeof node[keys[i]] !== "object") node[keys[i]] = {};
      node = node[keys[i]];
    }
    const last = keys[keys.length - 1];
    if (value === undefined) {
      if (Array.isArray(node)) node.splice(last, 1);
      else delete node[last];
    } else node[last] = value;
  }

  // ---------------------------------------------------------------- schema

  function schemaDef(name) {
    return B.vocab.schema.$defs[name];
  }

  function deref(node) {
    return node && node.$ref ? schemaDef(node.$ref.split("/").pop()) : node;
  }

  /* A property's schema without its "or null". */
  function nonNull(prop) {
    if (prop && prop.anyOf) {
      const kinds = prop.anyOf.filter((p) => p.type !== "null");
      if (kinds.length === 1) return Object.assign({}, prop, { anyOf: undefined }, deref(kinds[0]), { nullable: true });
    }
    return deref(prop);
  }

  function isNumber(prop) {
    const kinds = prop.anyOf ? prop.anyOf.map((p) => p.type) : [prop.type];
    return kinds.length > 0 && kinds.every((k) => k === "number" || k === "integer");
  }

  function actionDef(type) {
    const mapping = schemaDef("Task").properties.action.discriminator.mapping;
    return mapping[type] ? deref({ $ref: mapping[type] }) : null;
  }

  function required(def, name) {
    return (def.required || []).includes(name);
  }

  // ---------------------------------------------------------------- vocabulary lookups

  function metricInfo(name) {
    if (!name) return null;
    for (const group of B.vocab.metrics) {
      for (const metric of group.metrics) {
        if (!metric.pattern && metric.name === name) return Object.assign({ group: group.group }, metric);
      }
    }
    for (const group of B.vocab.metrics) {  // "actions.anything" → the actions.<action_type> entry
      for (const metric of group.metrics) {
        const head = metric.name.split("<")[0];
        if (metric.pattern && head && name.startsWith(head) && name.length > head.length) {
          return Object.assign({ group: group.group }, metric, { name, pattern: false });
        }
      }
    }
    return null;
  }

  /* The currencies of the rule's accounts, sorted. */
  function accountCurrencies() {
    const chosen = new Set(B.model.ad_accounts || []);
    return [...new Set(B.accounts.filter((a) => chosen.has(a.id) && a.currency).map((a) => a.currency))].sort();
  }

  /* One currency's code, symbol and decimals (an input's step). */
  function currencyOf(code) {
    try {
      const format = new Intl.NumberFormat("en", { style: "currency", currency: code, currencyDisplay: "narrowSymbol" });
      const symbol = format.formatToParts(0).find((p) => p.type === "currency").value;
      const digits = format.resolvedOptions().maximumFractionDigits;
      return { code, symbol, step: digits ? String(10 ** -digits) : "1", note: code };
    } catch (_err) {
      return { code, symbol: code + " ", step: "any", note: code };
    }
  }

  /* The rule's accounts' currency: its code, symbol and decimals, or a mixed/unknown note. */
  function currency() {
    const codes = accountCurrencies();
    if (codes.length !== 1) {
      return { code: null, symbol: "", step: "any",
        note: codes.length ? `each account's own currency (${codes.join(", ")})` : "the account currency" };
    }
    return currencyOf(codes[0]);
  }

  const UNIT_TEXT = { money: "money", count: "count", ratio: "ratio", percent: "%", multiple: "× (a multiple)", hours: "hours", hour: "hour of the day", ranking: "Meta's ranking, worst to best" };

  // ---------------------------------------------------------------- writing the document

  function writeJson() {
    const editor = $("rule-editor");
    B.writing = true;
    try {
      editor.value = JSON.stringify(B.model, null, 2);
      editor.dispatchEvent(new Event("input", { bubbles: true }));  // validates as if typed
    } finally {
      B.writing = false;
    }
  }

  /* A form change: set the value, write the JSON, redraw when the form's shape changed. */
  function commit(keys, value, redraw) {
    setAt(keys, value);
    writeJson();
    if (redraw) render();
  }

  // ---------------------------------------------------------------- controls

  function nextId() {
    B.ids += 1;
    return "b-" + B.ids;
  }

  /* A labelled field: <div class="fld"><label>…</label>control [unit] [help]</div>. */
  function field(label, control, extras) {
    const opts = extras || {};
    if (!control.id) control.id = nextId();
    const help = opts.help ? el("div", { class: "fld-help muted", id: control.id + "-help" }, opts.help) : null;
    if (help) control.setAttribute("aria-describedby", help.id);
    return el("div", { class: "fld" + (opts.wide ? " wide" : "") + (opts.cls ? " " + opts.cls : "") },
      el("label", { for: control.id }, label, opts.required ? el("span", { class: "req", "aria-hidden": "true" }, " *") : null),
      opts.prefix || opts.suffix
        ? el("span", { class: "affix" }, opts.prefix ? el("span", { class: "prefix", "aria-hidden": "true" }, opts.prefix) : null,
          control, opts.suffix ? el("span", { class: "suffix", "aria-hidden": "true" }, opts.suffix) : null)
        : control,
      help);
  }

  function mark(control, keys, focusKey) {
    control.dataset.path = pathOf(keys);
    control.dataset.focus = focusKey || pathOf(keys);
    return control;
  }

  /* A text input; empty removes the key when it is optional. */
  function textInput(keys, opts) {
    const o = opts || {};
    const value = getAt(keys);
    const input = el(o.multiline ? "textarea" : "input", {
      type: o.multiline ? null : o.type || "text", class: o.cls || null, placeholder: o.placeholder || null,
      list: o.list || null, rows: o.multiline ? 2 : null, autocomplete: "off", spellcheck: o.spellcheck ? "true" : "false",
      required: o.required || null,
    });
    input.value = value === undefined || value === null ? "" : String(value);
    input.addEventListener("input", () => {
      const text = input.value;
      commit(keys, text === "" && !o.keepEmpty ? undefined : text, false);
    });
    return mark(input, keys);
  }

  /* A number input; empty removes the key. */
  function numberInput(keys, opts) {
    const o = opts || {};
    const value = getAt(keys);
    const input = el("input", { type: "number", step: o.step || "any", min: o.min ?? null, max: o.max ?? null,
      inputmode: "decimal", class: "num", required: o.required || null });
    input.value = typeof value === "number" ? String(value) : "";
    input.addEventListener("input", () => {
      if (input.value === "") {
        commit(keys, undefined, false);
        return;
      }
      const number = Number(input.value);
      if (Number.isFinite(number)) commit(keys, o.integer ? Math.trunc(number) : number, false);
    });
    // left half typed: validate what the document holds now
    input.addEventListener("blur", () => document.dispatchEvent(new CustomEvent("ruleeditor:complete")));
    return mark(input, keys);
  }

  /* A select over [value, label] pairs; a value the list lacks is kept as its own option. */
  function select(keys, options, opts) {
    const o = opts || {};
    const value = getAt(keys);
    const pairs = options.map((x) => Array.isArray(x) ? x : [x.value, x.label || x.value]);
    const known = new Set(pairs.map((p) => String(p[0])));
    if (value !== undefined && value !== null && !known.has(String(value))) pairs.push([value, String(value) + " (as written)"]);
    const node = el("select", { required: o.required || null },
      o.empty !== undefined ? el("option", { value: "" }, o.empty) : null,
      pairs.map(([v, label]) => el("option", { value: String(v) }, label)));
    node.value = value === undefined || value === null ? "" : String(value);
    node.addEventListener("change", () => {
      const chosen = node.value === "" ? undefined : pairs.find((p) => String(p[0]) === node.value)[0];
      if (o.onChange) o.onChange(chosen);
      else commit(keys, chosen, !!o.redraw);
    });
    return mark(node, keys);
  }

  function checkbox(keys, label, opts) {
    const o = opts || {};
    const box = el("input", { type: "checkbox", id: nextId() });
    box.checked = o.checked !== undefined ? o.checked : getAt(keys) === (o.on === undefined ? true : o.on);
    box.addEventListener("change", () => {
      if (o.onChange) o.onChange(box.checked);
      else commit(keys, box.checked ? (o.on === undefined ? true : o.on) : undefined, !!o.redraw);
    });
    mark(box, keys, o.focusKey);
    return el("div", { class: "fld check" }, box, el("label", { for: box.id }, label),
      o.help ? el("span", { class: "muted fld-help" }, o.help) : null);
  }

  function button(text, onClick, attrs) {
    return el("button", Object.assign({ type: "button", class: "small secondary" }, attrs || {}, { onclick: onClick }), text);
  }

  function section(title, keys, ...children) {
    const node = el("fieldset", { class: "bsection" }, el("legend", {}, title), ...children);
    if (keys) node.dataset.path = pathOf(keys);
    return node;
  }

  // ---------------------------------------------------------------- metric picker (combobox)

  /* How well a metric matches the typed words: 0 its name is the words, 1 its name or label
   * starts with them, 2 they are in its name or label, 3 only in its description; null: not
   * every word is in it. "results" lists Results before "Amount spent" (whose text says
   * "÷ results"). */
  function matchScore(metric, words, keepAll) {
    if (!words.length) return 0;
    const name = metric.name.toLowerCase();
    const label = metric.label.toLowerCase();
    const hay = `${name} ${label} ${metric.description.toLowerCase()}`;
    if (!words.every((w) => hay.includes(w))) return keepAll ? 4 : null;
    const typed = words.join(" ");
    if (name === typed || label === typed) return 0;
    if (name.startsWith(words[0]) || label.startsWith(words[0])) return 1;
    if (words.every((w) => name.includes(w) || label.includes(w))) return 2;
    return 3;
  }

  /* The catalogue's groups holding a match, best matches first (groups by their best);
   * `keepAll`: every metric, the matches first (a name picked lists everything again). */
  function rankedGroups(words, filter, keepAll) {
    const ranked = [];
    B.vocab.metrics.forEach((group, order) => {
      const items = group.metrics.map((m, i) => ({ m, i, score: !filter || filter(m) ? matchScore(m, words, keepAll) : null }))
        .filter((x) => x.score !== null)
        .sort((a, b) => a.score - b.score || a.i - b.i);
      if (items.length) ranked.push({ group: group.group, order, best: items[0].score, metrics: items.map((x) => x.m) });
    });
    return ranked.sort((a, b) => a.best - b.best || a.order - b.order);
  }

  /* An input with a grouped, searchable list of the catalogue's metrics (ARIA combobox). The
     input's text is the metric name: any name can be typed; picking fills it in. */
  function metricPicker(keys, opts) {
    const o = opts || {};
    const id = nextId();
    const list = el("div", { role: "listbox", id: id + "-list", class: "combo-list hidden", "aria-label": "Metrics" });
    const input = textInput(keys, { cls: "combo-input", required: true });
    Object.assign(input, { id });
    input.setAttribute("role", "combobox");
    input.setAttribute("aria-autocomplete", "list");
    input.setAttribute("aria-expanded", "false");
    input.setAttribute("aria-controls", list.id);
    input.placeholder = "search: roas, spend, purchases…";
    const helpNode = el("div", { class: "fld-help metric-help muted", id: id + "-help", "aria-live": "polite" });
    input.setAttribute("aria-describedby", helpNode.id);
    let options = [];
    let active = -1;

    const describe = () => {
      const info = metricInfo(input.value);
      const unit = info ? (info.unit === "money" ? "money in " + currency().note : UNIT_TEXT[info.unit] || info.unit) : "";
      helpNode.textContent = info ? `${info.label} · ${unit} — ${info.description}`
        : input.value ? "not in the catalogue: the server checks the name when the rule is validated" : "";
    };

    const draw = () => {
      const words = input.value.toLowerCase().split(/\s+/).filter(Boolean);
      const exact = metricInfo(input.value);
      options = [];
      const groups = [];
      // a picked (whole) name lists everything again, itself first
      for (const group of rankedGroups(words, o.filter, !!(exact && !exact.pattern))) {
        const items = group.metrics;
        const gid = `${id}-g${groups.length}`;
        groups.push(el("div", { role: "group", "aria-labelledby": gid },
          el("div", { class: "combo-group", id: gid, role: "presentation" }, group.group),
          items.map((m) => {
            const n = options.length;
            const option = el("div", { role: "option", id: `${id}-o${n}`, class: "combo-option", "aria-selected": "false",
              dataset: { name: m.name },
              onmousedown: (event) => { event.preventDefault(); pick(n); } },
            el("span", { class: "combo-label" }, m.label), " ", el("code", {}, m.name),
            el("span", { class: "muted combo-unit" }, " " + (UNIT_TEXT[m.unit] || m.unit)));
            options.push({ node: option, metric: m });
            return option;
          })));
      }
      list.replaceChildren(...groups);
      if (!groups.length) list.append(el("div", { class: "combo-none muted", role: "presentation" }, "no metric matches; any catalogue name can be typed"));
      setActive(options.length ? 0 : -1);
    };

    const setActive = (n) => {
      if (active >= 0 && options[active]) options[active].node.setAttribute("aria-selected", "false");
      active = n;
      if (n >= 0 && options[n]) {
        options[n].node.setAttribute("aria-selected", "true");
        input.setAttribute("aria-activedescendant", options[n].node.id);
        options[n].node.scrollIntoView({ block: "nearest" });
      } else input.removeAttribute("aria-activedescendant");
    };

    const open = () => {
      draw();
      list.classList.remove("hidden");
      input.setAttribute("aria-expanded", "true");
    };
    const close = () => {
      list.classList.add("hidden");
      input.setAttribute("aria-expanded", "false");
      input.removeAttribute("aria-activedescendant");
    };

    const pick = (n) => {
      const metric = options[n].metric;
      const name = metric.pattern ? metric.name.split("<")[0] : metric.name;  // "actions." + a type to type
      input.value = name;
      if (metric.pattern) {
        commit(keys, name, false);
        describe();
        input.focus();
        draw();
        return;
      }
      close();
      commit(keys, name, false);
      if (o.onPick) o.onPick(metric);
      else render();
    };

    input.addEventListener("input", () => { open(); describe(); });
    input.addEventListener("focus", () => describe());
    input.addEventListener("blur", () => {
      close();
      if (o.onBlur) o.onBlur();
      document.dispatchEvent(new CustomEvent("ruleeditor:complete"));  // validate what was typed
    });
    input.addEventListener("keydown", (event) => {
      const isOpen = input.getAttribute("aria-expanded") === "true";
      if (event.key === "ArrowDown" || event.key === "ArrowUp") {
        event.preventDefault();
        if (!isOpen) { open(); return; }
        if (!options.length) return;
        const step = event.key === "ArrowDown" ? 1 : -1;
        setActive((active + step + options.length) % options.length);
      } else if (event.key === "Enter" && isOpen && active >= 0) {
        event.preventDefault();
        pick(active);
      } else if (event.key === "Escape" && isOpen) {
        event.preventDefault();
        close();
      }
    });
    describe();
    const wrap = el("div", { class: "combo" }, input, list);
    return { wrap, input, help: helpNode };
  }

  // ---------------------------------------------------------------- sections

  function ruleSection() {
    const levels = B.vocab.levels || [["campaign", "Campaigns"], ["adset", "Ad sets"], ["ad", "Ads"]];
    return section("Rule", null,
      el("div", { class: "row" },
        field("Name", textInput(["name"], { required: true, keepEmpty: true, spellcheck: true }), { required: true, wide: true }),
        field("Acts on", select(["level"], levels, { redraw: true, required: true }), { required: true }),
        field("Status when saved", select(["status"], [["ACTIVE", "Active"], ["PAUSED", "Paused"]], { empty: "as it is (new: active)" }))),
      field("Description", textInput(["description"], { multiline: true, spellcheck: true }), { wide: true }));
  }

  function accountsSection() {
    const chosen = B.model.ad_accounts || [];
    const known = new Set(B.accounts.map((a) => a.id));
    const rows = B.accounts.map((a) => ({ id: a.id, text: `${a.name || a.id} (${a.id})`, meta: [a.currency, a.timezone].filter(Boolean).join(" · ") }))
      .concat(chosen.filter((id) => !known.has(id)).map((id) => ({ id, text: id, meta: "not registered" })));
    const toggle = (id, on) => {
      const now = (B.model.ad_accounts || []).filter((x) => x !== id);
      if (on) now.push(id);
      const order = rows.map((r) => r.id);
      now.sort((x, y) => order.indexOf(x) - order.indexOf(y));
      commit(["ad_accounts"], now, true);  // money fields follow the accounts' currency
    };
    const boxes = rows.map((row) => {
      const box = el("input", { type: "checkbox", id: nextId(), value: row.id });
      box.checked = chosen.includes(row.id);
      box.addEventListener("change", () => toggle(row.id, box.checked));
      box.dataset.focus = "ad_accounts:" + row.id;
      return el("div", { class: "fld check" }, box, el("label", { for: box.id }, row.text),
        el("span", { class: "muted" }, row.meta));
    });
    const node = section("Ad accounts", ["ad_accounts"],
      boxes.length ? el("div", { class: "checks" }, boxes) : el("p", { class: "muted" }, "No ad account is registered: add one on the Accounts screen."));
    return node;
  }

  function filterFields() {
    return B.vocab.filter_fields[B.model.level] || B.vocab.filter_fields.campaign;
  }

  function filterRow(filter, n) {
    const keys = ["filters", n];
    const spec = filterFields().find((f) => f.field === filter.field) || { kind: "text" };
    const statusValues = spec.kind === "status" ? B.vocab.effective_statuses[B.model.level] || spec.values
      : spec.kind === "choice" ? spec.values : null;
    let valueControl;
    if (statusValues && LIST_FILTER_OPERATORS.has(filter.operator)) {
      const current = Array.isArray(filter.value) ? filter.value : [];
      const group = el("fieldset", { class: "checks inline", dataset: { path: pathOf([...keys, "value"]) } },
        el("legend", { class: "sr-only" }, `Filter ${n + 1} values`),
        statusValues.concat(current.filter((v) => !statusValues.includes(v))).map((value) => {
          const box = el("input", { type: "checkbox", id: nextId(), value });
          box.checked = current.includes(value);
          box.dataset.focus = pathOf([...keys, "value"]) + ":" + value;
          box.addEventListener("change", () => {
            const now = (Array.isArray(filter.value) ? filter.value : []).filter((v) => v !== value);
            if (box.checked) now.push(value);
            now.sort((x, y) => statusValues.indexOf(x) - statusValues.indexOf(y));
            commit([...keys, "value"], now, false);
          });
          return el("span", { class: "check" }, box, el("label", { for: box.id }, value));
        }));
      valueControl = el("div", { class: "fld wide" }, group);
    } else if (statusValues) {
      valueControl = field("Value", select([...keys, "value"], statusValues.map((v) => [v, v]), { empty: "—" }));
    } else if (LIST_FILTER_OPERATORS.has(filter.operator)) {
      const input = el("input", { type: "text", autocomplete: "off", spellcheck: "false" });
      input.value = Array.isArray(filter.value) ? filter.value.join(", ") : "";
      input.addEventListener("input", () => commit([...keys, "value"],
        input.value.split(",").map((s) => s.trim()).filter(Boolean), false));
      valueControl = field("Values (comma-separated)", mark(input, [...keys, "value"]), { wide: true });
    } else {
      const numeric = spec.kind === "number";
      const input = el("input", { type: "text", autocomplete: "off", spellcheck: "false" });
      input.value = filter.value === undefined || Array.isArray(filter.value) ? "" : String(filter.value);
      input.addEventListener("input", () => {
        const text = input.value;
        commit([...keys, "value"], numeric && text !== "" && Number.isFinite(Number(text)) ? Number(text) : text, false);
      });
      valueControl = field("Value", mark(input, [...keys, "value"]), { wide: true });
    }
    const setField = (name) => {
      const next = filterFields().find((f) => f.field === name);
      const fresh = { field: name, operator: filter.operator, value: filter.value };
      if (next && next.kind === "status") {
        fresh.operator = "IN";
        fresh.value = ["ACTIVE"];
      } else if (Array.isArray(fresh.value) !== LIST_FILTER_OPERATORS.has(fresh.operator)) fresh.value = "";
      commit(keys, fresh, true);
    };
    const setOperator = (operator) => {
      const fresh = Object.assign({}, filter, { operator });
      const wantsList = LIST_FILTER_OPERATORS.has(operator);
      if (wantsList && !Array.isArray(filter.value)) fresh.value = filter.value === "" || filter.value === undefined ? [] : [filter.value];
      if (!wantsList && Array.isArray(filter.value)) fresh.value = filter.value.length ? filter.value[0] : "";
      commit(keys, fresh, true);
    };
    return el("div", { class: "brow", dataset: { path: pathOf(keys) } },
      field("Field", select([...keys, "field"], filterFields().map((f) => [f.field, f.label]), { onChange: setField })),
      field("Operator", select([...keys, "operator"], B.vocab.filter_operators, { onChange: setOperator })),
      valueControl,
      button("Remove", () => commit(keys, undefined, true), { "aria-label": `Remove filter ${n + 1}` }));
  }

  function filtersSection() {
    const filters = Array.isArray(B.model.filters) ? B.model.filters : [];
    return section("Which entities (filters)", ["filters"],
      filters.length ? filters.map((f, n) => f && typeof f === "object" ? filterRow(f, n) : null)
        : el("p", { class: "muted" }, "No filter: every entity of the accounts (archived and deleted ones aside)."),
      button("Add filter", () => commit(["filters", filters.length], { field: "name", operator: "CONTAIN", value: "" }, true)));
  }

  // ---- schedule

  function timetableGrid(slots) {
    const table = el("table", { class: "timetable", dataset: { path: "schedule.slots" } });
    table.append(el("caption", { class: "sr-only" }, "Run times: one button per day and hour; arrow keys move, Space toggles"));
    table.append(el("thead", {}, el("tr", {}, el("td", {}),
      Array.from({ length: 24 }, (_, h) => el("th", { scope: "col", "aria-label": String(h).padStart(2, "0") + ":00" }, String(h))))));
    const body = el("tbody");
    const buttons = [];
    DAYS.forEach(([day, dayName], row) => {
      const times = Array.isArray(slots[day]) ? slots[day] : [];
      const tr = el("tr", {}, el("th", { scope: "row" }, dayName.slice(0, 3)));
      for (let h = 0; h < 24; h++) {
        const hh = String(h).padStart(2, "0");
        const here = times.filter((t) => typeof t === "string" && t.startsWith(hh + ":"));
        const label = here.length ? `${dayName} ${here.join(", ")}` : `${dayName} ${hh}:00`;
        const cell = el("button", { type: "button", class: "slot" + (here.length ? " on" : ""), "aria-pressed": here.length ? "true" : "false",
          "aria-label": label, title: label, tabindex: "-1", dataset: { focus: `slot:${day}:${hh}`, day, hour: hh } },
        here.some((t) => !t.endsWith(":00")) ? "·" : "");
        cell.addEventListener("click", () => {
          const now = (Array.isArray(getAt(["schedule", "slots", day])) ? getAt(["schedule", "slots", day]) : [])
            .filter((t) => !(typeof t === "string" && t.startsWith(hh + ":")));
          if (!here.length) now.push(hh + ":00");
          now.sort();
          commit(["schedule", "slots", day], now.length ? now : undefined, true);
        });
        cell.addEventListener("keydown", (event) => {
          const moves = { ArrowLeft: [0, -1], ArrowRight: [0, 1], ArrowUp: [-1, 0], ArrowDown: [1, 0], Home: [0, -24], End: [0, 24] };
          const move = moves[event.key];
          if (!move) return;
          event.preventDefault();
          const r = Math.min(6, Math.max(0, row + move[0]));
          const c = Math.min(23, Math.max(0, h + move[1]));
          const target = buttons[r * 24 + c];
          for (const b of buttons) b.tabIndex = -1;
          target.tabIndex = 0;
          target.focus();
        });
        buttons.push(cell);
        tr.append(el("td", {}, cell));
      }
      body.append(tr);
    });
    const first = buttons.find((b) => b.classList.contains("on")) || buttons[0];
    first.tabIndex = 0;
    table.append(body);
    return el("div", { class: "timetable-wrap" }, table);
  }

  function scheduleSection() {
    const schedule = B.model.schedule && typeof B.model.schedule === "object" ? B.model.schedule : {};
    const mode = schedule.mode === "timetable" ? "timetable" : "interval";
    const setMode = (next) => {
      if (next === mode) return;
      B.stash.set("schedule:" + mode, schedule);
      const back = B.stash.get("schedule:" + next);
      commit(["schedule"], back || (next === "interval" ? { mode: "interval", every_minutes: 60 } : { mode: "timetable", slots: {} }), true);
    };
    const radios = el("div", { class: "radios", role: "radiogroup", "aria-label": "How often", dataset: { path: "schedule.mode" } },
      [["interval", "Every N minutes"], ["timetable", "At set times each week"]].map(([value, label]) => {
        const radio = el("input", { type: "radio", name: "schedule-mode", id: nextId(), value });
        radio.checked = mode === value;
        radio.dataset.focus = "schedule.mode:" + value;
        radio.addEventListener("change", () => radio.checked && setMode(value));
        return el("span", { class: "check" }, radio, el("label", { for: radio.id }, label));
      }));
    const body = mode === "interval"
      ? field("Every (minutes)", numberInput(["schedule", "every_minutes"], { integer: true, min: 1, step: 1, required: true }), { required: true })
      : timetableGrid(schedule.slots && typeof schedule.slots === "object" ? schedule.slots : {});
    const range = B.model.date_range && typeof B.model.date_range === "object" ? B.model.date_range : {};
    const dateInput = (name) => {
      const input = el("input", { type: "date" });
      input.value = range[name] || "";
      input.addEventListener("change", () => {
        const now = Object.assign({}, B.model.date_range || {});
        if (input.value) now[name] = input.value;
        else delete now[name];
        commit(["date_range"], Object.keys(now).length ? now : undefined, false);
      });
      return mark(input, ["date_range", name]);
    };
    return section("When it runs", ["schedule"], radios, body,
      el("div", { class: "row" },
        field("Timezone", textInput(["timezone"], { list: "builder-timezones", placeholder: "search: Jakarta, New_York…" }),
          { help: "the rule's clock: its timetable, its date range and “today”" }),
        field("From (date)", dateInput("start")),
        field("Until (date)", dateInput("end"))));
  }

  // ---- tasks

  function unitAffix(unit) {
    if (unit === "money") {
      const money = currency();
      return { prefix: money.symbol || null, step: money.step, help: "in " + money.note };
    }
    if (unit === "percent") return { suffix: "%" };
    if (unit === "multiple") return { suffix: "×" };
    if (unit === "hours") return { suffix: "h" };
    return {};
  }

  /* Replace one part of the form with a fresh drawing, keeping the focus inside it. */
  function swap(old, make) {
    if (!old.isConnected) return;
    const active = document.activeElement;
    const key = active && old.contains(active) ? active.dataset.focus : null;
    const fresh = make();
    old.replaceWith(fresh);
    placeErrors();
    const again = key && [...fresh.querySelectorAll("[data-focus]")].find((n) => n.dataset.focus === key);
    if (again) again.focus();
  }

  // ---- money: one amount, or one per currency when the rule's accounts differ in currency

  /* The currencies an amount at keys is asked in: the accounts' when they differ (one number
     would mean a different amount in each), and those a per-currency value already names. */
  function perCurrencyCodes(keys) {
    const value = getAt(keys);
    const named = value && typeof value === "object" && !Array.isArray(value) ? Object.keys(value) : [];
    const codes = accountCurrencies();
    return codes.length > 1 || named.length ? [...new Set([...codes, ...named])].sort() : null;
  }

  /* A money amount: one number input, or one per currency, written as {"EUR": …, "USD": …};
     `range` asks [low, high] in each. A bare amount already there is shown, to be given per currency. */
  function moneyField(label, keys, opts) {
    const o = opts || {};
    const codes = perCurrencyCodes(keys);
    if (!codes) {
      const affix = unitAffix("money");
      if (!o.range) return field(label, numberInput(keys, { step: affix.step, min: o.min, required: o.required }), Object.assign({ required: o.required }, affix));
      return el("div", { class: "row tight", dataset: { path: pathOf(keys) } },
        field("From", numberInput([...keys, 0], { step: affix.step }), affix), field("To", numberInput([...keys, 1], { step: affix.step }), affix));
    }
    const noteOf = (value) => (typeof value === "number" || Array.isArray(value)
      ? `${JSON.stringify(value)} is a different amount in each currency: give each one`
      : `the accounts are in ${codes.join(" and ")}: one amount per currency, each in its own units`);
    const note = el("div", { class: "fld-help muted wide" }, noteOf(getAt(keys)));
    const inputs = codes.map((code) => {
      const money = currencyOf(code);
      const affix = { prefix: money.symbol, step: money.step };
      if (!o.range) return field(`${label} (${code})`, numberInput([...keys, code], { step: money.step, min: o.min, required: o.required }), affix);
      return [0, 1].map((end) => field(`${end ? "To" : "From"} (${code})`, rangeEnd([...keys, code], end, money.step), affix));
    });
    const group = el("div", { class: "row tight per-currency", dataset: { path: pathOf(keys) }, role: "group", "aria-label": `${label}, per currency` },
      inputs.flat(), note);
    group.addEventListener("input", () => { note.textContent = noteOf(getAt(keys)); });  // after the input wrote it
    return group;
  }

  /* One end of a per-currency [low, high]: the pair is written whole once both are numbers. */
  function rangeEnd(keys, end, step) {
    const pair = getAt(keys);
    const input = el("input", { type: "number", step, inputmode: "decimal", class: "num" });
    input.value = Array.isArray(pair) && typeof pair[end] === "number" ? String(pair[end]) : "";
    input.addEventListener("input", () => {
      const holder = getAt(keys.slice(0, -1));
      if (!holder || typeof holder !== "object" || Array.isArray(holder)) setAt(keys.slice(0, -1), {});  // a bare [low, high] goes
      const now = Array.isArray(getAt(keys)) ? [...getAt(keys)] : [null, null];
      now[end] = input.value === "" ? null : Number(input.value);
      commit(keys, now, false);
    });
    return mark(input, [...keys, end]);
  }

  function conditionRow(task, tk, condition, n) {
    const keys = [...tk, "conditions", n];
    let row = null;
    const info = metricInfo(condition.metric);
    const affix = unitAffix(info && info.unit);
    const picker = metricPicker([...keys, "metric"], {
      // only what the rule's level can read: rankings on ads, budgets above them
      filter: (m) => !m.levels || !B.model.level || m.levels.includes(B.model.level),
      onPick: (metric) => {
        const now = getAt(keys);
        if (!metric.needs_period) delete now.period;
        else if (!now.period) now.period = "today";
        // a ranking is compared with one of its labels; every other metric with a number
        if (metric.scale) {
          delete now.compare_to;
          if (!metric.scale.includes(now.value)) now.value = "AVERAGE";
          if (RANGE_OPERATORS.has(now.operator)) now.operator = "<=";
        } else if (typeof now.value === "string") now.value = 0;
        else if (now.value && typeof now.value === "object" && !Array.isArray(now.value) && metric.unit !== "money") {
          now.value = Object.values(now.value)[0];  // amounts per currency are for money only
        }
        writeJson();
        render();
      },
      onBlur: () => {
        const info2 = metricInfo(getAt([...keys, "metric"]));
        // the period control depends on the metric: redraw this condition alone, once focus
        // has moved on (a control elsewhere being focused is never replaced under the pointer)
        if (!!info !== !!info2 || (info && info2 && info.needs_period !== info2.needs_period)) {
          setTimeout(() => swap(row, () => conditionRow(task, tk, getAt(keys), n)), 0);
        }
      },
    });
    const ranking = !!(info && info.scale);
    const range = RANGE_OPERATORS.has(condition.operator);
    const comparing = !range && condition.compare_to && typeof condition.compare_to === "object";
    const setOperator = (operator) => {
      const now = Object.assign({}, getAt(keys), { operator });
      const toRange = (v) => (Array.isArray(v) ? v : typeof v === "number" ? [v, v] : [0, 0]);
      const fromRange = (v) => (Array.isArray(v) ? v[0] : v);
      const each = (f) => (now.value && typeof now.value === "object" && !Array.isArray(now.value)  // per currency
        ? Object.fromEntries(Object.entries(now.value).map(([code, v]) => [code, f(v)])) : f(now.value));
      if (RANGE_OPERATORS.has(operator)) {
        delete now.compare_to;
        now.value = each(toRange);
      } else now.value = each(fromRange);
      commit(keys, now, true);
    };
    const setRight = (kind) => {
      const now = Object.assign({}, getAt(keys));
      B.stash.set(pathOf(keys) + ":" + (kind === "metric" ? "value" : "compare_to"), kind === "metric" ? now.value : now.compare_to);
      if (kind === "metric") {
        delete now.value;
        now.compare_to = B.stash.get(pathOf(keys) + ":compare_to") || { metric: now.metric, period: now.period || "last_7d", multiplier: 1 };
      } else {
        delete now.compare_to;
        const back = B.stash.get(pathOf(keys) + ":value");
        now.value = typeof back === "number" || (back && typeof back === "object") ? back : 0;  // a number, [low, high] or per currency
      }
      commit(keys, now, true);
    };
    const money = !!(info && info.unit === "money");
    let right;
    if (money && !comparing) {
      right = moneyField("Value", [...keys, "value"], { range, required: true });
    } else if (range) {
      right = el("div", { class: "row tight", dataset: { path: pathOf([...keys, "value"]) } },
        field("From", numberInput([...keys, "value", 0], { step: affix.step }), affix),
        field("To", numberInput([...keys, "value", 1], { step: affix.step }), affix));
    } else if (comparing) {
      const ck = [...keys, "compare_to"];
      const other = metricPicker([...ck, "metric"], {});
      right = el("div", { class: "row tight", dataset: { path: pathOf(ck) } },
        field("Multiplier", numberInput([...ck, "multiplier"], { min: 0 }), { suffix: "×" }),
        el("div", { class: "fld wide" }, el("label", { for: other.input.id }, "of metric"), other.wrap, other.help),
        field("Period", select([...ck, "period"], B.vocab.periods, { empty: "— (the condition's)" })));
    } else if (ranking) {
      right = field("Value", select([...keys, "value"], info.scale, { required: true }));
    } else {
      right = field("Value", numberInput([...keys, "value"], { step: affix.step, required: true }), affix);
    }
    const periodControl = info && !info.needs_period
      ? el("div", { class: "fld" }, el("span", { class: "label-like" }, "Period"), el("span", { class: "muted" }, "now (not a period)"))
      : field("Period", select([...keys, "period"], B.vocab.periods, { empty: "—" }));
    row = el("div", { class: "brow condition", dataset: { path: pathOf(keys) } },
      el("div", { class: "fld metric" }, el("label", { for: picker.input.id }, `Condition ${n + 1}: metric`), picker.wrap, picker.help),
      periodControl,
      field("Operator", select([...keys, "operator"], B.vocab.operators, { onChange: setOperator })),
      range || ranking ? null : field("Compared with", (() => {
        const node = el("select", {}, el("option", { value: "value" }, "a number"), el("option", { value: "metric" }, "another metric ×"));
        node.value = comparing ? "metric" : "value";
        node.dataset.focus = pathOf(keys) + ":right";
        node.addEventListener("change", () => setRight(node.value));
        return node;
      })()),
      right,
      button("Remove", () => commit(keys, undefined, true), { "aria-label": `Remove condition ${n + 1}` }));
    return row;
  }

  function actionField(ak, def, name, action) {
    const prop = nonNull(def.properties[name]);
    const keys = [...ak, name];
    const need = required(def, name);
    const label = FIELD_LABELS[name] || prop.title || name;
    if (name === "window") return windowField(keys);
    if (name === "multiplier") {
      return field("Times the live budget", numberInput(keys, { step: "0.05", min: 1, max: prop.maximum ?? null }),
        { help: "e.g. 1.5; or an amount below", suffix: "×" });
    }
    if (name === "metric") {
      const picker = metricPicker(keys, { filter: (m) => !!m.target || m.pattern, onPick: () => render() });
      return el("div", { class: "fld metric" }, el("label", { for: picker.input.id }, label), picker.wrap, picker.help);
    }
    if (prop.enum || prop.const) {
      const values = prop.enum || [prop.const];
      const options = name === "period" ? B.vocab.periods : values.map((v) => [v, String(v)]);
      return field(label, select(keys, options, { empty: need ? undefined : "—", required: need }), { required: need });
    }
    if (prop.type === "boolean") return checkbox(keys, label, {});
    const target = name === "target" ? metricInfo(action.metric) : null;
    if (MONEY_FIELDS.has(name) || (target && target.unit === "money")) return moneyField(label, keys, { min: 0, required: need });
    if (isNumber(prop) || name === "target") {
      let affix = {};
      if (MONEY_FIELDS.has(name)) affix = unitAffix("money");
      else if (name === "target") { const m = metricInfo(action.metric); affix = unitAffix(m && m.unit); }
      else if (/percent|pct/.test(name)) affix = { suffix: "%" };
      const max = prop.maximum ?? prop.le ?? null;
      return field(label, numberInput(keys, { step: affix.step, integer: prop.type === "integer", min: 0, max, required: need }),
        Object.assign({ required: need }, affix));
    }
    return field(label, textInput(keys, { required: need, multiline: name === "template" }), { required: need, wide: true });
  }

  /* A schedule_budget's window: hours from the run, or a local start and end. */
  function windowField(keys) {
    return el("div", { class: "row window", dataset: { path: pathOf(keys) } },
      field("Window (hours)", numberInput([...keys, "hours"], { step: "0.25", min: 0.25, max: 168 }),
        { help: "whole quarter hours from the run's next quarter hour" }),
      field("Starting (hours later)", numberInput([...keys, "start_in_hours"], { step: "0.25", min: 0, max: 168 })),
      field("Or from (HH:MM)", textInput([...keys, "start"], { placeholder: "18:00" }), { help: "in the rule's timezone" }),
      field("To (HH:MM)", textInput([...keys, "end"], { placeholder: "22:00" })));
  }

  function thenBlock(ak, action) {
    const tk = [...ak, "then"];
    const then = action.then && typeof action.then === "object" ? action.then : null;
    const toggle = checkbox(tk, "Then, later: a second step", {
      checked: !!then, focusKey: pathOf(tk) + ":on",
      onChange: (on) => {
        if (on) commit(tk, B.stash.get(pathOf(tk)) || { after_minutes: 60, do: THEN_DEFAULT[action.type] || "notify" }, true);
        else { B.stash.set(pathOf(tk), then); commit(tk, undefined, true); }
      },
    });
    if (!then) return el("div", { class: "then", dataset: { path: pathOf(tk) } }, toggle);
    const def = schemaDef("FollowUp");
    const notify = then.do === "notify";
    return el("div", { class: "then", dataset: { path: pathOf(tk) } }, toggle,
      el("div", { class: "row" },
        field("Do", select([...tk, "do"], B.vocab.followups, { redraw: true, required: true }), { required: true }),
        field("After (minutes)", numberInput([...tk, "after_minutes"], { integer: true, min: 1, step: 1, max: def.properties.after_minutes.anyOf[0].maximum }),
          { help: "or a time of day below" }),
        field("At (HH:MM)", textInput([...tk, "at_time"], { placeholder: "06:00" }), { help: "in the rule's timezone" }),
        notify ? field("Webhook", textInput([...tk, "webhook"])) : null,
        notify ? field("Template", textInput([...tk, "template"], { multiline: true }), { wide: true }) : null));
  }

  function actionBlock(tk, task) {
    const ak = [...tk, "action"];
    const action = task.action && typeof task.action === "object" ? task.action : {};
    const kinds = B.vocab.action_kinds.filter((k) => !k.levels || k.levels.includes(B.model.level) || k.type === action.type);
    const setType = (type) => {
      const def = actionDef(type);
      const now = { type };
      for (const [k, v] of Object.entries(action)) if (k !== "type" && def && def.properties[k]) now[k] = v;
      B.stash.set(pathOf(ak) + ":" + action.type, action);
      const back = B.stash.get(pathOf(ak) + ":" + type);
      commit(ak, back && back.type === type ? Object.assign({}, back, { then: now.then }) : now, true);
    };
    const def = actionDef(action.type);
    const fields = def ? Object.keys(def.properties).filter((k) => k !== "type" && k !== "then") : [];
    return el("fieldset", { class: "bsub", dataset: { path: pathOf(ak) } }, el("legend", {}, "Action"),
      el("div", { class: "row" },
        field("Do", select([...ak, "type"], kinds.map((k) => [k.type, k.label]), { onChange: setType, required: true }), { required: true }),
        fields.map((name) => actionField(ak, def, name, action))),
      def && !NO_THEN.has(action.type) ? thenBlock(ak, action) : null);
  }

  function taskBlock(task, n) {
    const tk = ["tasks", n];
    const conditions = Array.isArray(task.conditions) ? task.conditions : [];
    return el("fieldset", { class: "bsection task", dataset: { path: pathOf(tk) } },
      el("legend", {}, `Task ${n + 1}`),
      el("div", { class: "row" },
        field("Task id", textInput([...tk, "id"], { required: true, keepEmpty: true, placeholder: "pause-low-roas" }),
          { required: true, help: "lower-case letters, digits, - and _; names the task in logs" }),
        field("Fires when", select([...tk, "match"], [["all", "all conditions hold (AND)"], ["any", "any condition holds (OR)"]]))),
      el("fieldset", { class: "bsub", dataset: { path: pathOf([...tk, "conditions"]) } }, el("legend", {}, "Conditions"),
        conditions.map((c, i) => c && typeof c === "object" ? conditionRow(task, tk, c, i) : null),
        button("Add condition", () => commit([...tk, "conditions", conditions.length],
          { metric: "spend", period: "today", operator: ">", value: 0 }, true))),
      actionBlock(tk, task),
      el("div", { class: "row" },
        field("Cooldown (minutes)", numberInput([...tk, "cooldown_minutes"], { integer: true, min: 0, step: 1 }),
          { help: "after acting on an entity, leave it alone this long" }),
        field("At most (times per entity)", numberInput([...tk, "execution_count_limit"], { integer: true, min: 1, step: 1 }),
          { help: "empty: no limit" }),
        checkbox([...tk, "on_oscillation"], "Hold the field when rules fight over it", { on: "hold" }),
        // only ad sets have a learning phase; shown elsewhere only to take a stray one off
        B.model.level === "adset" || task.respect_learning_phase
          ? checkbox([...tk, "respect_learning_phase"], "Leave ad sets in their learning phase alone",
            B.model.level === "adset" ? {} : { help: "only ad sets have a learning phase: this rule acts on " + B.model.level + "s" })
          : null),
      holdoutRow(tk, task),
      (B.model.tasks || []).length > 1 ? button("Remove task", () => commit(tk, undefined, true), { "aria-label": `Remove task ${n + 1}` }) : null);
  }

  /* The task's holdout: the share of matched entities left unchanged, to measure its effect
   * against (docs/impact.md); empty: none. The salt of the draw is kept as it is. */
  function holdoutRow(tk, task) {
    const hk = [...tk, "holdout"];
    const holdout = task.holdout && typeof task.holdout === "object" ? task.holdout : null;
    const prop = schemaDef("Holdout").properties.percent;
    const input = el("input", { type: "number", class: "num", min: prop.minimum, max: prop.maximum, step: "any", inputmode: "decimal" });
    input.value = holdout && typeof holdout.percent === "number" ? String(holdout.percent) : "";
    input.addEventListener("input", () => {
      const now = getAt(hk);
      if (input.value === "") {
        commit(hk, undefined, false);
        return;
      }
      const percent = Number(input.value);
      if (Number.isFinite(percent)) commit(hk, Object.assign({}, now && typeof now === "object" ? now : {}, { percent }), false);
    });
    mark(input, [...hk, "percent"]);
    return el("div", { class: "row", dataset: { path: pathOf(hk) } },
      field("Hold out (% of matched entities)", input, { suffix: "%",
        help: `left unchanged, chosen at random, to measure what the task earns against them (${prop.minimum}–${prop.maximum} %; empty: none)` }));
  }

  function tasksSection() {
    const tasks = Array.isArray(B.model.tasks) ? B.model.tasks : [];
    return el("div", { class: "tasks", dataset: { path: "tasks" } },
      tasks.map((t, n) => t && typeof t === "object" ? taskBlock(t, n) : null),
      button("Add task", () => commit(["tasks", tasks.length], {
        id: "task-" + (tasks.length + 1), match: "all",
        conditions: [{ metric: "spend", period: "today", operator: ">", value: 0 }],
        action: { type: "notify", webhook: "" }, cooldown_minutes: 60,
      }, true)));
  }

  function untouchedNote() {
    const drawn = new Set(["name", "format", "description", "status", "level", "ad_accounts", "filters", "schedule",
      "date_range", "timezone", "tasks"]);
    const rest = Object.keys(B.model).filter((k) => !drawn.has(k) && B.model[k] !== null);
    return rest.length ? el("p", { class: "muted" }, "Also in the rule, edited in the JSON view: ",
      rest.map((k, i) => [i ? ", " : "", el("code", {}, k)])) : null;
  }

  // ---------------------------------------------------------------- drawing

  function render() {
    const form = $("builder-form");
    if (!form || !B.vocab || !B.model) return;
    const focused = document.activeElement && form.contains(document.activeElement) ? document.activeElement : null;
    const focusKey = focused && focused.dataset.focus;
    const caret = focused && typeof focused.selectionStart === "number" ? [focused.selectionStart, focused.selectionEnd] : null;
    form.replaceChildren(...[ruleSection(), accountsSection(), filtersSection(), scheduleSection(), tasksSection(),
      untouchedNote()].filter(Boolean));
    placeErrors();
    if (focusKey) {
      const again = [...form.querySelectorAll("[data-focus]")].find((n) => n.dataset.focus === focusKey);
      if (again) {
        again.focus();
        if (caret && typeof again.setSelectionRange === "function") {
          try { again.setSelectionRange(caret[0], caret[1]); } catch (_err) { /* not a text control */ }
        }
      }
    }
  }

  /* The JSON view changed (typed, or a rule loaded): follow it, or say why the form cannot. */
  function follow() {
    if (B.writing) return;
    let value;
    try {
      value = JSON.parse($("rule-editor").value);
    } catch (_err) {
      setPaused("The JSON view does not parse: the form follows again once it does.");
      return;
    }
    if (!value || typeof value !== "object" || Array.isArray(value)) {
      setPaused("The JSON view holds no rule object: the form follows again once it does.");
      return;
    }
    B.model = value;
    setPaused(null);
    render();
  }

  function setPaused(message) {
    $("builder-paused").textContent = message || "";
    $("builder-paused").classList.toggle("hidden", !message);
    $("builder-form").toggleAttribute("inert", !!message);
    $("builder-form").classList.toggle("stale", !!message);
  }

  // ---------------------------------------------------------------- errors at their fields

  function placeErrors() {
    const form = $("builder-form");
    for (const node of form.querySelectorAll(".form-error")) node.remove();
    for (const node of form.querySelectorAll("[aria-invalid]")) {
      node.removeAttribute("aria-invalid");
      const described = (node.getAttribute("aria-describedby") || "").split(" ").filter((x) => x && !x.startsWith("ferr-"));
      if (described.length) node.setAttribute("aria-describedby", described.join(" "));
      else node.removeAttribute("aria-describedby");
    }
    const byPath = new Map();
    for (const node of form.querySelectorAll("[data-path]")) if (!byPath.has(node.dataset.path)) byPath.set(node.dataset.path, node);
    const general = [];
    B.errors.forEach((error, n) => {
      let probe = error.path || "";
      while (probe && !byPath.has(probe)) probe = RuleEditor.parentPath(probe);
      const target = probe ? byPath.get(probe) : null;
      const text = (probe === error.path ? "" : error.path + ": ") + error.message;
      const note = el("span", { class: "form-error", id: "ferr-" + n, dataset: { for: error.path } }, text);
      if (!target) {
        general.push(note);
        return;
      }
      if (/^(INPUT|SELECT|TEXTAREA)$/.test(target.tagName)) {
        target.setAttribute("aria-invalid", "true");
        target.setAttribute("aria-describedby", ((target.getAttribute("aria-describedby") || "") + " " + note.id).trim());
        const holder = target.closest(".fld") || target.parentNode;
        holder.append(note);
      } else {
        const legend = target.querySelector(":scope > legend, :scope > caption");
        if (legend && target.tagName !== "TABLE") legend.after(note);
        else if (target.tagName === "TABLE") target.parentNode.before(note);
        else target.prepend(note);
      }
    });
    if (general.length) form.prepend(el("div", { class: "form-error general" }, general));
  }

  // ---------------------------------------------------------------- start

  /* Whether a number is half typed in the form ("-", "1e": the browser cannot read it yet,
   * and the document has no value there). The live validation waits for it to be complete. */
  function typing() {
    const active = document.activeElement;
    const form = $("builder-form");
    if (!active || !form || !form.contains(active) || active.tagName !== "INPUT") return false;
    return !!(active.validity && active.validity.badInput);
  }

  window.RuleBuilder = { typing };

  async function load() {
    try {
      const [vocab, accounts] = await Promise.all([api("GET", "/api/rules/vocabulary"), api("GET", "/api/accounts")]);
      B.vocab = vocab;
      B.accounts = accounts.items;
    } catch (err) {
      setPaused("The form could not load what it needs (" + err.message + "); the JSON view works.");
      return;
    }
    $("builder-timezones").replaceChildren(...B.vocab.timezones.map((tz) => el("option", { value: tz })));
    follow();
  }

  document.addEventListener("DOMContentLoaded", () => {
    if (!$("builder-form")) return;
    $("builder-form").addEventListener("submit", (event) => event.preventDefault());
    const later = RE.debounce(follow, 250);
    $("rule-editor").addEventListener("input", () => { if (!B.writing) later(); });
    document.addEventListener("ruleeditor:loaded", () => { B.errors = []; B.stash.clear(); follow(); });
    document.addEventListener("ruleeditor:errors", (event) => {
      B.errors = event.detail.errors.filter((e) => !(e.path === "" && /^not valid JSON/.test(e.message)));
      if (B.model) placeErrors();
    });
    load();
  });
})();
