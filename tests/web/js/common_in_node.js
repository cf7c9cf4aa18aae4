/* Loads the screens' web/static/common.js in Node, with just enough of a browser around it,
 * and answers one JSON line per call: {"fn": "moneyChange", "args": [12000, 10800, "USD"]}
 * → {"ok": "$120.00 → $108.00 (−10 %)"} (or {"error": "..."}). Used by tests that compare
 * the screens' formatting with the server's (tests/web/test_money_text.py). */
"use strict";

const fs = require("fs");
const path = require("path");
const readline = require("readline");
const vm = require("vm");

const source = fs.readFileSync(process.argv[2], "utf8");
const noop = () => {};
const context = {
  console,
  URLSearchParams,
  location: { hash: "", pathname: "/", search: "" },
  history: { replaceState: noop },
  localStorage: { getItem: () => null, setItem: noop, removeItem: noop },
  window: { addEventListener: noop, confirm: () => false },
  document: { addEventListener: noop, getElementById: () => null, querySelectorAll: () => [] },
  setTimeout, clearTimeout,
};
vm.createContext(context);
vm.runInContext(source + "\nglobalThis.RE = RE;", context, { filename: path.basename(process.argv[2]) });

const lines = readline.createInterface({ input: process.stdin });
lines.on("line", (line) => {
  let answer;
  try {
    const call = JSON.parse(line);
    answer = { ok: context.RE[call.fn](...call.args) };
  } catch (err) {
    answer = { error: String(err && err.stack || err) };
  }
  process.stdout.write(JSON.stringify(answer) + "\n");
});
