// docket review page, the reviewer's views: the inbox across runs, the plan
// as a graph, the timeline in sentences, the replay diff. Loaded after
// app.js, whose helpers ($, el, api, state, ...) it uses; no framework, no CDN.
"use strict";

// --- views: the inbox or one run ---

function showView(v) {
  state.view = v;
  $("inbox-view").hidden = v !== "inbox";
  $("run-view").hidden = v !== "run";
  $("planning-view").hidden = v !== "planning";
  if (v !== "planning" && planning.shown) { planning.shown = null; renderPlanningList(); }
  $("no-run").hidden = v !== "none";
  $("inbox-link").classList.toggle("current", v === "inbox");
  if (v === "inbox") $("inbox-link").setAttribute("aria-current", "page");
  else $("inbox-link").removeAttribute("aria-current");
}

function route() {
  const h = location.hash.slice(1);
  if (h === "inbox") { openInbox(); return; }
  const frag = new URLSearchParams(h);
  if (frag.get("run")) selectRun(frag.get("run"));
}

function openInbox() {
  if (location.hash !== "#inbox") history.replaceState(null, "", "#inbox");
  showView("inbox");
  renderInbox();
  const sel = selectedItem();
  if (sel) sel.focus(); else $("inbox-title").focus();
}

// --- the inbox ---

const inbox = {
  items: [],          // oldest first
  count: 0,
  sel: null,          // key of the selected item
  nodes: new Map(),   // key -> { sig, li }
  open: {},           // key -> "reject" | "done": an inline form left open
  dirty: new Set(),   // runs whose items must be fetched again
  dirtyAt: new Map(), // run -> performance.now() of the first event not shown yet
  timer: null,
  first: true,
};

const itemKey = (it) => it.run_id + "\u0000" + it.action_id;

async function loadInbox(runIds) {
  let ans;
  try {
    if (!runIds) {
      ans = await api("GET", "/v1/inbox");
      inbox.items = ans.items;
    } else {
      const parts = await Promise.all(runIds.map((id) => api("GET", "/v1/inbox?run=" + enc(id)).catch((e) => {
        if (e.status === 404) return { items: [] };
        throw e;
      })));
      const gone = new Set(runIds);
      const before = inbox.items.length;
      inbox.items = inbox.items.filter((it) => !gone.has(it.run_id));
      const removed = before - inbox.items.length;
      inbox.items = inbox.items.concat(...parts.map((p) => p.items));
      inbox.count += inbox.items.length - (before - removed) - removed;
      inbox.items.sort((a, b) => (a.since < b.since ? -1 : a.since > b.since ? 1 : a.run_id < b.run_id ? -1 : a.run_id > b.run_id ? 1 : 0));
    }
  } catch (e) {
    if (e.status === 401) { showSignIn("Your session ended: sign in again."); return; }
    $("inbox-msg").textContent = describe(e);
    return;
  }
  $("inbox-msg").textContent = "";
  if (!runIds) inbox.count = ans.count;
  renderInbox();
}

// inboxEvent follows the all-runs stream: an event of an action or a run
// marks its run for a fetch of its waiting actions, coalesced.
function inboxEvent(ev) {
  if (!ev.run_id || !(ev.type.startsWith("action.") || ev.type.startsWith("run.") || ev.type === "plan.recorded")) return;
  inbox.dirty.add(ev.run_id);
  if (!inbox.dirtyAt.has(ev.run_id)) inbox.dirtyAt.set(ev.run_id, performance.now());
  if (inbox.timer) return;
  inbox.timer = setTimeout(async () => {
    inbox.timer = null;
    const runs = [...inbox.dirty];
    const since = Math.min(...runs.map((r) => inbox.dirtyAt.get(r)));
    inbox.dirty.clear();
    for (const r of runs) inbox.dirtyAt.delete(r);
    await loadInbox(runs);
    performance.measure("docket:inbox-update", { start: since, end: performance.now() });
  }, 50);
}

function updateCount() {
  const n = inbox.count;
  $("inbox-count").textContent = String(n);
  $("inbox-count").classList.toggle("some", n > 0);
  document.title = (n > 0 ? "(" + n + ") " : "") + "docket — review";
  $("inbox-summary").textContent = n === 0 ? "nothing waits for you" :
    n + (n === 1 ? " action waits" : " actions wait") + " for you, oldest first";
}

function renderInbox() {
  updateCount();
  if (state.view !== "inbox") return;
  const t0 = performance.now();
  const list = $("inbox-list");
  const active = document.activeElement;
  const hadFocus = list.contains(active);
  const selIndex = Math.max(0, inbox.items.findIndex((it) => itemKey(it) === inbox.sel));
  const keep = new Map();
  // A form of an item that is no longer waiting closes with it.
  for (const k of Object.keys(inbox.open)) if (!inbox.items.some((it) => itemKey(it) === k)) delete inbox.open[k];
  const lis = inbox.items.map((it) => {
    const k = itemKey(it);
    const sig = JSON.stringify(it) + "|" + (inbox.open[k] || "");
    let n = inbox.nodes.get(k);
    // An item whose reason or output is being typed keeps its node until the
    // form closes: rebuilding it would drop the text and the focus, and the
    // next keys typed would reach the inbox's single-key actions (s skips).
    const typing = n && inbox.open[k] && n.open === inbox.open[k];
    if (!n || (n.sig !== sig && !typing)) n = { sig, open: inbox.open[k], li: renderInboxItem(it) };
    keep.set(k, n);
    return n.li;
  });
  inbox.nodes = keep;
  if (!lis.length) lis.push(el("li", { class: "empty", text: "Nothing waits for you." }));
  // Move only what moved: a node taken out and put back loses the focus
  // (a reason or an output being typed).
  let cur = list.firstChild;
  for (const li of lis) {
    if (cur === li) cur = cur.nextSibling;
    else list.insertBefore(li, cur);
  }
  while (cur) { const n = cur.nextSibling; cur.remove(); cur = n; }
  if (!inbox.items.some((it) => itemKey(it) === inbox.sel)) {
    const it = inbox.items[Math.min(selIndex, inbox.items.length - 1)];
    inbox.sel = it ? itemKey(it) : null;
  }
  for (const [k, n] of inbox.nodes) {
    const on = k === inbox.sel;
    n.li.classList.toggle("selected", on);
    n.li.setAttribute("aria-current", on ? "true" : "false");
  }
  const sel = selectedItem();
  if (hadFocus && active.isConnected && list.contains(active) && document.activeElement !== active) {
    // Moving a node (its item changed place) takes the focus from what is
    // in it, a field being typed in too: give it back.
    active.focus({ preventScroll: true });
  } else if (sel && (hadFocus || document.activeElement === document.body || document.activeElement === $("inbox-title")) && !sel.contains(document.activeElement)) {
    const field = sel.querySelector(".editor textarea, .editor input");
    (field || sel).focus({ preventScroll: false });
  }
  const t1 = performance.now();
  performance.measure("docket:inbox-render", { start: t0, end: t1 });
  if (inbox.first && inbox.items.length) {
    inbox.first = false;
    performance.mark("docket:inbox-first-render");
  }
}

function selectedItem() {
  const n = inbox.nodes.get(inbox.sel);
  return n ? n.li : null;
}

function renderInboxItem(it) {
  const k = itemKey(it);
  const tool = state.tools[it.tool] || {};
  const review = it.kind === "needs_review";
  const since = new Date(it.since);
  const li = el("li", {
    class: "inbox-item kind-" + it.kind, tabindex: "-1",
    "data-run": it.run_id, "data-action": it.action_id, "data-kind": it.kind,
    "aria-label": (review ? "needs review: " : "approval: ") + it.action_id + ", " + it.tool + ", run " + it.run_id,
    onfocus: () => { if (inbox.sel !== k) { inbox.sel = k; markSelected(); } },
  },
    el("div", { class: "action-head" },
      el("span", { class: "badge kind", text: review ? "⚠ needs review" : "» approval" }),
      el("strong", { class: "action-id", text: it.action_id }),
      el("span", { class: "tool", text: it.tool }),
      el("span", { class: "badge class-" + it.class, title: classHelp[it.class] || "", text: (it.class || "").replace(/_/g, " ") }),
      el("span", { class: "muted" }, "run ",
        el("a", { href: "#run=" + enc(it.run_id), class: "run-link", text: it.run_id })),
      el("time", { class: "muted", datetime: it.since, title: since.toLocaleString(), text: "waiting " + ago(since) })),
    it.run_goal ? el("p", { class: "run-goal-line", text: it.run_goal }) : null,
    it.approval ? renderApproval(it.approval) : null,
    review ? el("p", { class: "review-note", text: (it.error ? "After " + plural(it.attempts, "attempt") + ": " + it.error : "Outcome unknown after " + plural(it.attempts, "attempt")) + ". Check the external system, then say what happened." }) : null,
    it.destination ? el("p", { class: "destination", "data-role": "destination",
      text: "Sends " + it.destination.method + " to " + it.destination.origin + it.destination.path }) : null,
    it.destination_error ? el("p", { class: "review-note", "data-role": "destination-error",
      text: "This call would be refused before anything is sent: " + it.destination_error }) : null,
    el("details", { open: true }, el("summary", { text: it.resolved ? "arguments (resolved)" : "arguments (some references resolve later)" }),
      el("pre", { text: pretty(it.args) })),
    tool.request ? renderPreview(tool.request, { args: it.args, key: it.key }) : null);
  const buttons = el("div", { class: "buttons" });
  const op = (label, name, key, cls) => buttons.append(el("button", {
    "data-op": name, class: cls, "aria-keyshortcuts": key, text: label + " (" + key + ")",
    onclick: (ev) => { ev.stopPropagation(); inbox.sel = k; inboxOp(name); },
  }));
  if (review) {
    op("It happened: record output…", "done", "d");
    op("It did not happen: retry", "retry", "t");
    op("Skip it", "skip", "s", "danger");
  } else {
    op("Approve", "approve", "a");
    op("Reject…", "reject", "x", "danger");
  }
  op("Open the run", "open", "o");
  li.append(buttons);
  if (inbox.open[k] === "reject") li.append(inlineForm(it, "reject"));
  if (inbox.open[k] === "done") li.append(inlineForm(it, "done"));
  return li;
}

// renderApproval says which policy rule asks for people, who approved these
// exact arguments and how many more approvals are needed.
function renderApproval(ap) {
  const who = ap.approved_by.map((a) => a.by);
  const parts = [];
  parts.push((ap.rule ? "Rule " + ap.rule : "The run's policy") + ": " + plural(ap.need, "approval") + " needed");
  parts.push(who.length ? "approved by " + who.join(", ") : "no approval yet");
  const restrict = [];
  const only = [];
  if (ap.names && ap.names.length) only.push(ap.names.join(", "));
  if (ap.groups && ap.groups.length) only.push("members of " + (ap.groups.length === 1 ? "group " : "groups ") + ap.groups.join(", "));
  if (only.length) restrict.push("only " + only.join(" or "));
  if (ap.exclude_creator && ap.creator) restrict.push("not " + ap.creator + " (created the run)");
  return el("p", { class: "approval-note", "data-still-needed": String(ap.still_needed) },
    parts.join("; ") + ". ",
    el("strong", { class: "still-needed", text: ap.still_needed > 0 ? "Still needed: " + plural(ap.still_needed, "approval") + (restrict.length ? " (" + restrict.join("; ") + ")" : "") + "." : "Approved." }),
    ap.message ? el("span", { class: "muted", text: " " + ap.message }) : null);
}

function markSelected() {
  for (const [k, n] of inbox.nodes) {
    const on = k === inbox.sel;
    n.li.classList.toggle("selected", on);
    n.li.setAttribute("aria-current", on ? "true" : "false");
  }
}

// inlineForm asks for a rejection's reason or the output of an action that
// happened, in place: Enter (Ctrl+Enter for the output) saves, Esc cancels.
function inlineForm(it, kind) {
  const k = itemKey(it);
  const id = "inbox-" + kind + "-" + it.run_id + "-" + it.action_id;
  const field = kind === "reject" ? el("input", { id, type: "text", autocomplete: "off" }) :
    el("textarea", { id, rows: 5, class: "json", spellcheck: "false" });
  if (kind === "done") field.value = "{}";
  const msg = el("p", { class: "error", role: "alert" });
  const cancel = () => { delete inbox.open[k]; renderInbox(); const s = selectedItem(); if (s) s.focus(); };
  const save = async () => {
    let body;
    if (kind === "reject") body = { reason: field.value };
    else {
      try { body = { done: JSON.parse(field.value) }; } catch (e) { msg.textContent = "Not valid JSON: " + e.message; return; }
    }
    const path = "/v1/runs/" + enc(it.run_id) + "/actions/" + enc(it.action_id) + (kind === "reject" ? "/reject" : "/resolve");
    try {
      await api("POST", path, body);
      delete inbox.open[k];
      await loadInbox([it.run_id]);
      refocusSelected();
    } catch (e) { msg.textContent = describe(e); }
  };
  field.addEventListener("keydown", (ev) => {
    ev.stopPropagation();
    if (ev.key === "Escape") { ev.preventDefault(); cancel(); }
    if (ev.key === "Enter" && (kind === "reject" || ev.ctrlKey || ev.metaKey)) { ev.preventDefault(); save(); }
  });
  setTimeout(() => field.focus(), 0);
  return el("div", { class: "editor" },
    el("label", { for: id, text: kind === "reject" ? "Why reject " + it.action_id + "? (Enter rejects, Esc cancels)" : "The output of " + it.action_id + ", as JSON (Ctrl+Enter saves, Esc cancels)" }),
    field,
    el("div", { class: "buttons" },
      el("button", { "data-op": kind === "reject" ? "save-reject" : "save-done", onclick: save, text: kind === "reject" ? "Reject" : "Save" }),
      el("button", { onclick: cancel, text: "Cancel" })),
    msg);
}

async function inboxOp(name) {
  const it = inbox.items.find((x) => itemKey(x) === inbox.sel);
  if (!it) return;
  const k = itemKey(it);
  const base = "/v1/runs/" + enc(it.run_id) + "/actions/" + enc(it.action_id);
  const review = it.kind === "needs_review";
  $("inbox-msg").textContent = "";
  const why = mayNot(name === "done" || name === "retry" || name === "skip" ? "resolve" : name === "open" ? "" : name);
  if (why) { $("inbox-msg").textContent = why; return; }
  try {
    switch (name) {
      case "open": selectRun(it.run_id); return;
      case "approve": if (review) return; await api("POST", base + "/approve", {}); break;
      case "retry": if (!review) return; await api("POST", base + "/resolve", { retry: true }); break;
      case "skip": if (!review) return; await api("POST", base + "/resolve", { skip: true }); break;
      case "reject": if (review) return; inbox.open[k] = "reject"; renderInbox(); return;
      case "done": if (!review) return; inbox.open[k] = "done"; renderInbox(); return;
      default: return;
    }
  } catch (e) {
    $("inbox-msg").textContent = it.action_id + " (" + it.run_id + "): " + describe(e);
    return;
  }
  await loadInbox([it.run_id]);
  refocusSelected();
}

// refocusSelected gives the focus back to the selected item once an action
// sent from the inbox is done, unless a form was opened meanwhile (the person
// went on while the request was under way): its field is being typed in, and
// taking the focus from it would send the next keys to the inbox's shortcuts.
function refocusSelected() {
  if (Object.keys(inbox.open).length) return;
  const s = selectedItem(); if (s) s.focus();
}

function moveSelection(d) {
  if (!inbox.items.length) return;
  let i = inbox.items.findIndex((it) => itemKey(it) === inbox.sel);
  i = Math.max(0, Math.min(inbox.items.length - 1, i + d));
  inbox.sel = itemKey(inbox.items[i]);
  markSelected();
  const s = selectedItem();
  if (s) { s.focus(); s.scrollIntoView({ block: "nearest" }); }
}

// Single-key shortcuts, never while typing.
document.addEventListener("keydown", (ev) => {
  if (ev.ctrlKey || ev.metaKey || ev.altKey || ev.defaultPrevented) return;
  const t = ev.target;
  // (A field left focused inside a hidden part, e.g. the sign-in form, is not typing.)
  if (t && (t.isContentEditable || ["INPUT", "TEXTAREA", "SELECT"].includes(t.tagName)) && !t.closest("[hidden]")) return;
  if ($("app").hidden) return;
  if (ev.key === "i") { ev.preventDefault(); openInbox(); return; }
  if (state.view !== "inbox") return;
  // While a reason or an output is being written, keys are text, never
  // actions: a key that reaches the page then (the field lost the focus to a
  // live update) approves, skips or retries nothing.
  if (Object.keys(inbox.open).length) {
    if (ev.key === "Escape") { ev.preventDefault(); inbox.open = {}; renderInbox(); }
    return;
  }
  const keys = { j: () => moveSelection(1), k: () => moveSelection(-1), ArrowDown: () => moveSelection(1), ArrowUp: () => moveSelection(-1),
    a: () => inboxOp("approve"), x: () => inboxOp("reject"), d: () => inboxOp("done"), t: () => inboxOp("retry"),
    s: () => inboxOp("skip"), o: () => inboxOp("open") };
  if (ev.key === "Enter" && t && t.classList && t.classList.contains("inbox-item")) { ev.preventDefault(); inboxOp("open"); return; }
  const f = keys[ev.key];
  if (f) { ev.preventDefault(); f(); }
});

// --- time ---

function ago(d) {
  const s = Math.round((Date.now() - d.getTime()) / 1000);
  if (s < 5) return "just now";
  if (s < 60) return s + "s ago";
  if (s < 3600) return Math.floor(s / 60) + " min ago";
  if (s < 86400) return Math.floor(s / 3600) + " h ago";
  return Math.floor(s / 86400) + " d ago";
}

function plural(n, word) { return n + " " + word + (n === 1 ? "" : "s"); }

// --- run tabs ---

const tabs = ["actions", "graph", "timeline", "diff"];

function showTab(name) {
  state.tab = name;
  for (const t of tabs) {
    const on = t === name;
    $("tab-" + t).setAttribute("aria-selected", on ? "true" : "false");
    $("tab-" + t).tabIndex = on ? 0 : -1;
    $("panel-" + t).hidden = !on;
  }
  drawTab();
}

for (const t of tabs) {
  $("tab-" + t).addEventListener("click", () => showTab(t));
  $("tab-" + t).addEventListener("keydown", (ev) => {
    if (ev.key !== "ArrowRight" && ev.key !== "ArrowLeft") return;
    ev.preventDefault();
    const on = tabs.filter((x) => !$("tab-" + x).disabled);
    const i = on.indexOf(state.tab);
    const next = on[(i + (ev.key === "ArrowRight" ? 1 : on.length - 1)) % on.length];
    showTab(next);
    $("tab-" + next).focus();
  });
}

let tabTimer = null;
function scheduleTab() {
  if (tabTimer || state.tab === "actions") return;
  tabTimer = setTimeout(() => { tabTimer = null; drawTab(); }, 40);
}

function drawTab() {
  if (!state.doc) return;
  if (state.tab === "graph") renderGraph(state.doc);
  else if (state.tab === "timeline") renderTimeline();
  else if (state.tab === "diff") loadDiff();
}

// openAction shows one action in the actions tab.
function openAction(id) {
  showTab("actions");
  const li = $("actions").querySelector(`[data-action="${CSS.escape(id)}"]`);
  if (li) { li.scrollIntoView({ block: "center" }); li.focus(); }
}

// --- the plan as a graph ---
// Layered layout (Sugiyama style): longest-path layers from the sources,
// barycenter ordering within layers, wide layers wrapped into rows; edges
// are curves from an action to those that wait for it.

const graphState = { sig: "", nodes: new Map() };
const NODE_W = 168, NODE_H = 50, GAP_X = 18, GAP_Y = 56, ROW_GAP = 14, PAD = 12;
const statusMark = { succeeded: "✓", failed: "✗", rejected: "✗", cancelled: "✗", needs_review: "⚠", pending: "…", approved: "▷", claimed: "⟳", skipped: "–", compensated: "↺" };

function layoutGraph(actions) {
  const byId = new Map(actions.map((a) => [a.id, a]));
  const layer = new Map();
  const order = ordered(actions); // dependencies first
  for (const a of order) {
    let l = 0;
    for (const d of a.depends_on || []) if (byId.has(d)) l = Math.max(l, layer.get(d) + 1);
    layer.set(a.id, l);
  }
  const layers = [];
  for (const a of actions) {
    const l = layer.get(a.id);
    (layers[l] = layers[l] || []).push(a.id);
  }
  const children = new Map(actions.map((a) => [a.id, []]));
  for (const a of actions) for (const d of a.depends_on || []) if (children.has(d)) children.get(d).push(a.id);
  const pos = new Map();
  const index = () => { for (const ids of layers) ids.forEach((id, i) => pos.set(id, (i + 0.5) / ids.length)); };
  index();
  // Barycenter sweeps: down by parents, up by children.
  for (let sweep = 0; sweep < 4; sweep++) {
    const down = sweep % 2 === 0;
    const seq = down ? layers.slice(1) : layers.slice(0, -1).reverse();
    for (const ids of seq) {
      const bary = new Map();
      for (const id of ids) {
        const nb = down ? (byId.get(id).depends_on || []).filter((d) => byId.has(d)) : children.get(id);
        bary.set(id, nb.length ? nb.reduce((s, n) => s + pos.get(n), 0) / nb.length : pos.get(id));
      }
      ids.sort((x, y) => bary.get(x) - bary.get(y));
      ids.forEach((id, i) => pos.set(id, (i + 0.5) / ids.length));
    }
  }
  const avail = Math.max(600, ($("graph").clientWidth || 900) - 2 * PAD);
  const perRow = Math.max(1, Math.floor((avail + GAP_X) / (NODE_W + GAP_X)));
  const xy = new Map();
  let y = PAD, width = 0;
  for (const ids of layers) {
    if (!ids) continue;
    const rows = Math.ceil(ids.length / perRow);
    for (let r = 0; r < rows; r++) {
      const row = ids.slice(r * perRow, (r + 1) * perRow);
      const rowW = row.length * NODE_W + (row.length - 1) * GAP_X;
      const offset = PAD + Math.max(0, (Math.min(perRow, ids.length) * (NODE_W + GAP_X) - GAP_X - rowW) / 2);
      row.forEach((id, i) => xy.set(id, { x: offset + i * (NODE_W + GAP_X), y }));
      width = Math.max(width, offset + rowW + PAD);
      y += NODE_H + (r < rows - 1 ? ROW_GAP : 0);
    }
    y += GAP_Y;
  }
  return { xy, width: Math.max(width, 2 * PAD + NODE_W), height: y - GAP_Y + PAD, layers: layers.length };
}

const SVG = "http://www.w3.org/2000/svg";
function svg(tag, attrs, ...kids) {
  const n = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v !== undefined && v !== null) n.setAttribute(k, v);
  for (const c of kids) n.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return n;
}

function renderGraph(doc) {
  const t0 = performance.now();
  const actions = doc.actions.filter((a) => a.id);
  const sig = actions.map((a) => a.id + ":" + (a.depends_on || []).join(",")).join(";");
  const box = $("graph");
  if (sig !== graphState.sig) {
    const lay = layoutGraph(actions);
    const t1 = performance.now();
    performance.measure("docket:graph-layout", { start: t0, end: t1 });
    const root = svg("svg", { width: lay.width, height: lay.height, viewBox: `0 0 ${lay.width} ${lay.height}`, class: "graph-svg" });
    root.append(svg("defs", {}, svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: "9", refY: "5", markerWidth: "7", markerHeight: "7", orient: "auto-start-reverse" },
      svg("path", { d: "M0,0 L10,5 L0,10 z", class: "arrowhead" })),
      svg("clipPath", { id: "node-clip" }, svg("rect", { x: 4, y: 0, width: NODE_W - 8, height: NODE_H }))));
    const edges = svg("g", { class: "edges" });
    const nodes = svg("g", { class: "nodes" });
    graphState.nodes = new Map();
    for (const a of actions) {
      const p = lay.xy.get(a.id);
      for (const d of a.depends_on || []) {
        const q = lay.xy.get(d);
        if (!q) continue;
        const x1 = q.x + NODE_W / 2, y1 = q.y + NODE_H, x2 = p.x + NODE_W / 2, y2 = p.y;
        const my = (y1 + y2) / 2;
        edges.append(svg("path", { d: `M${x1},${y1} C${x1},${my} ${x2},${my} ${x2},${y2 - 2}`, class: "edge", "data-from": d, "data-to": a.id, "marker-end": "url(#arrow)" }));
      }
      const g = svg("g", { class: "node", transform: `translate(${p.x},${p.y})`, "data-action": a.id, tabindex: "0", role: "button" },
        svg("rect", { width: NODE_W, height: NODE_H, rx: 6 }),
        // Whole texts, clipped to the box: a screen reader reads them all.
        svg("g", { "clip-path": "url(#node-clip)" },
          svg("text", { x: 8, y: 18, class: "node-id" }, a.id),
          svg("text", { x: 8, y: 38, class: "node-sub" }, a.tool + " · " + (a.class || "").replace(/_/g, " "))),
        svg("text", { x: NODE_W - 8, y: 18, class: "node-mark", "text-anchor": "end" }, ""));
      g.addEventListener("click", () => openAction(a.id));
      g.addEventListener("keydown", (ev) => { if (ev.key === "Enter" || ev.key === " ") { ev.preventDefault(); openAction(a.id); } });
      g.addEventListener("focus", () => highlight(a.id, true));
      g.addEventListener("blur", () => highlight(a.id, false));
      g.addEventListener("mouseenter", () => highlight(a.id, true));
      g.addEventListener("mouseleave", () => highlight(a.id, false));
      nodes.append(g);
      graphState.nodes.set(a.id, g);
    }
    root.append(edges, nodes);
    box.replaceChildren(root);
    box.dataset.layers = String(lay.layers);
    graphState.sig = sig;
    performance.measure("docket:graph-render", { start: t0, end: performance.now() });
  }
  const t2 = performance.now();
  for (const a of actions) {
    const g = graphState.nodes.get(a.id);
    if (!g || g.dataset.status === a.status) continue;
    g.dataset.status = a.status;
    g.setAttribute("class", "node status-" + a.status);
    g.querySelector(".node-mark").textContent = (statusMark[a.status] || "") + " " + a.status.replace("_", " ");
  }
  performance.measure("docket:graph-update", { start: t2, end: performance.now() });
}

function highlight(id, on) {
  for (const e of $("graph").querySelectorAll(`.edge[data-from="${CSS.escape(id)}"], .edge[data-to="${CSS.escape(id)}"]`)) e.classList.toggle("hot", on);
}

// --- the timeline: events as sentences, grouped by action ---

function short(key) { return key ? key.slice(0, 12) + "…" : ""; }

function sentence(ev) {
  const d = ev.data || {};
  const a = ev.action_id || "";
  const by = d.by ? " by " + d.by : "";
  const lookup = (what) => {
    if (d.outcome === "lookup_error") return a + " lookup failed" + (d.error ? " (" + d.error + ")" : "") + (d.retry_in ? ": looking again in " + d.retry_in : "");
    return a + " " + what + ": not found yet, waiting" + (d.retry_in ? " " + d.retry_in : "") + " before writing (an earlier attempt may still become visible)";
  };
  switch (ev.type) {
    case "run.created": return "run created" + (d.policy ? " (approval policy " + d.policy + ")" : "");
    case "plan.recorded": return "plan recorded: revision " + (d.revision || 1) + ", " + plural(d.actions || 0, "action");
    case "run.replayed": return "revision " + d.revision + " recorded (replay with edits): " + plural(d.actions || 0, "action");
    case "run.awaiting_approval": return "waiting for approval" + (Array.isArray(d.actions) && d.actions.length ? ": " + d.actions.join(", ") : "");
    case "run.paused": return "run paused" + (d.reason === "needs_review" ? ": needs review of " + (d.actions || []).join(", ") : d.reason ? ": " + d.reason : "") + by;
    case "run.resumed": return "run resumed" + by;
    case "run.cancelled": return "run cancelled" + by;
    case "run.waiting": return "waiting until " + d.until + (Array.isArray(d.actions) && d.actions.length ? ": " + d.actions.join(", ") : "");
    case "run.woken": return "woken: its time came (" + d.waiting_until + ")";
    case "action.run_now": return a + " run now" + by + " (not waiting for its time)";
    case "action.limit_wait": return a + (d.reason === "rate"
      ? " waits for the rate limit of " + d.tool + " (" + d.started + " started in the last " + d.per + ", limit " + d.rate + ")"
      : " waits for a free slot of " + d.tool + " (" + d.in_flight + " of " + d.max_in_flight + " in flight)");
    case "run.completed": return "run completed";
    case "run.failed": return "run failed" + (d.error ? ": " + d.error : "");
    case "run.tools_changed": return "the tool definitions changed since the run started";
    case "action.approved": return a + " approved" + (d.by === "policy" ? " by the run's policy" : by);
    case "action.rejected": return a + " rejected" + by + (d.reason ? ": " + d.reason : "");
    case "action.args_resolved": return a + " arguments resolved (references filled in): approve what will be sent";
    case "action.edited": return a + " arguments edited" + by;
    case "action.claimed": return a + " claimed (attempt " + d.attempt + ", key " + short(d.key) + ")";
    case "action.lookup_wait": return lookup("lookup");
    case "action.attempt_failed":
      if (d.phase === "lookup") return lookup("lookup");
      return a + " attempt " + d.attempt + " failed" + (d.outcome === "retryable" ? ", will retry" : d.outcome ? " (" + d.outcome.replace(/_/g, " ") + ")" : "") + (d.error ? ": " + d.error : "");
    case "action.succeeded": return a + " succeeded" + (d.output_truncated ? " (output too large to inline: see the run)" : "");
    case "action.failed": return a + " failed" + (d.attempt ? " on attempt " + d.attempt : "") + (d.error ? ": " + d.error : "");
    case "action.needs_review": return a + " needs review: outcome unknown after " + plural(d.attempt || 0, "attempt") + (d.reason ? " (" + d.reason + ")" : "");
    case "action.resolved": return a + " resolved" + by + ": " + (d.resolution === "done" ? "it happened, output recorded" : d.resolution === "retry" ? "it did not happen, retry" : d.resolution === "skip" ? "skipped" : (d.resolution || ""));
    case "action.skipped": return a + " skipped" + (d.reason ? ": " + d.reason : "");
    case "action.compensated": return a + " compensated (undone)";
  }
  return (a ? a + " " : "") + ev.type;
}

// copyText copies text in one click: through a selected text area (works
// without clipboard permission), else the Clipboard API.
function copyText(text, btn) {
  const ta = el("textarea", { class: "offscreen", "aria-hidden": "true", tabindex: "-1" });
  ta.value = text;
  document.body.append(ta);
  ta.select();
  let ok = false;
  try { ok = document.execCommand("copy"); } catch (_) { ok = false; }
  ta.remove();
  btn.focus();
  if (!ok && navigator.clipboard) navigator.clipboard.writeText(text).catch(() => {});
  btn.dataset.copied = text;
  btn.classList.add("copied");
  setTimeout(() => btn.classList.remove("copied"), 1500);
}

function renderTimeline() {
  const evs = state.events;
  const groups = new Map([["", []]]);
  for (const ev of evs) {
    const k = ev.action_id || "";
    if (!groups.has(k)) groups.set(k, []);
    groups.get(k).push(ev);
  }
  const start = evs.length ? new Date(evs[0].at).getTime() : 0;
  const sections = [];
  for (const [k, list] of groups) {
    if (!list.length) continue;
    const hid = "tl-" + (k || "run");
    sections.push(el("section", { class: "tl-group", "data-group": k || "run", "aria-labelledby": hid },
      el("h4", { id: hid, text: k ? "Action " + k : "The run" }),
      el("ol", { class: "tl" }, ...list.map((ev) => {
        const at = new Date(ev.at);
        const d = ev.data || {};
        const rel = "+" + ((at.getTime() - start) / 1000).toFixed(1) + "s";
        const copies = [];
        if (d.key) copies.push(el("button", { class: "copy", "data-copy": "key", onclick: (e) => copyText(d.key, e.currentTarget) },
          "copy key", el("span", { class: "offscreen", text: " of " + (k || "the run") + ", event " + ev.seq })));
        if (d.output !== undefined) copies.push(el("button", { class: "copy", "data-copy": "output", onclick: (e) => copyText(JSON.stringify(d.output, null, 2), e.currentTarget) },
          "copy output", el("span", { class: "offscreen", text: " of " + k + ", event " + ev.seq })));
        return el("li", { class: "tl-item", "data-seq": ev.seq, "data-type": ev.type },
          el("time", { datetime: ev.at, title: at.toISOString(), class: "tl-at" }, el("span", { class: "abs", text: at.toLocaleTimeString() }), " ", el("span", { class: "rel", text: rel })),
          el("details", {}, el("summary", { class: "sentence", text: sentence(ev) }), el("pre", { text: JSON.stringify(ev, null, 2) })),
          ...copies);
      }))));
  }
  $("timeline").replaceChildren(...sections);
  if (!sections.length) $("timeline").append(el("p", { class: "empty", text: "No events yet." }));
}

// --- the replay diff ---

const changeMark = { kept: "= kept", changed: "≠ changed", added: "+ added", removed: "− removed", follows: "↳ follows" };

function renderDiff(d, box) {
  const counts = Object.entries(d.counts || {}).map(([k, n]) => n + " " + k).join(", ");
  const head = d.to ? "Revision " + d.to + " against revision " + d.from : "This edit against revision " + d.from + " (nothing recorded yet)";
  box.replaceChildren(el("p", { class: "diff-head" }, el("strong", { text: head }), counts ? " — " + counts : ""),
    el("ol", { class: "diff-list" }, ...d.actions.map((e) => el("li", { class: "diff-item change-" + e.change, "data-action": e.action_id, "data-change": e.change },
      el("div", { class: "action-head" },
        el("span", { class: "badge change", text: changeMark[e.change] || e.change }),
        el("strong", { class: "action-id", text: e.action_id }),
        el("span", { class: "tool", text: e.old_tool ? e.old_tool + " → " + e.tool : e.tool })),
      el("p", { class: "why", text: e.why }),
      e.args && e.args.length ? el("table", { class: "argdiff" },
        el("caption", { class: "offscreen", text: "Argument changes of " + e.action_id }),
        el("thead", {}, el("tr", {}, el("th", { scope: "col", text: "argument" }), el("th", { scope: "col", text: "before" }), el("th", { scope: "col", text: "after" }))),
        el("tbody", {}, ...e.args.map((c) => el("tr", {},
          el("th", { scope: "row" }, el("code", { text: c.path || "(all arguments)" })),
          el("td", { class: "before" }, c.before !== undefined ? el("del", {}, el("code", { text: JSON.stringify(c.before) })) : el("span", { class: "muted", text: "(absent)" })),
          el("td", { class: "after" }, c.after !== undefined ? el("ins", {}, el("code", { text: JSON.stringify(c.after) })) : el("span", { class: "muted", text: "(absent)" })))))) : null,
      e.new_key || e.old_key ? el("p", { class: "key" }, "key ", el("code", { text: e.old_key && e.new_key && e.old_key !== e.new_key ? short(e.old_key) + " → " + short(e.new_key) : short(e.new_key || e.old_key) })) : null))));
}

let diffFor = "";
async function loadDiff() {
  const doc = state.doc;
  if (!doc || doc.revision < 2) { $("diff").replaceChildren(el("p", { class: "empty", text: "This run has one revision: replay it with edits to compare." })); return; }
  const sig = doc.run_id + "@" + doc.revision + "@" + doc.actions.map((a) => a.key + a.status).join(",");
  if (sig === diffFor) return;
  diffFor = sig;
  try {
    renderDiff(await api("GET", runPath() + "/diff"), $("diff"));
  } catch (e) {
    diffFor = "";
    $("diff").replaceChildren(el("p", { class: "error", text: describe(e) }));
  }
}

async function previewReplay() {
  $("replay-error").textContent = "";
  let plan;
  try { plan = JSON.parse($("replay-plan").value); } catch (e) { $("replay-error").textContent = "Not valid JSON: " + e.message; return; }
  try {
    renderDiff(await api("POST", runPath() + "/diff", { plan }), $("replay-diff"));
  } catch (e) {
    $("replay-error").textContent = describe(e);
  }
}

$("replay-preview").addEventListener("click", previewReplay);

start();
