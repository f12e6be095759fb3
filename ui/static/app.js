// docket review page: no framework, no CDN. Talks to the API with the
// session cookie and follows one run's events over a WebSocket.
"use strict";

const $ = (id) => document.getElementById(id);
const state = {
  runId: null,      // the run on screen
  doc: null,        // its Run JSON
  lastSeq: 0,       // last event seen (resume point)
  ws: null,
  wsRun: null,
  retries: 0,
  reconnectTimer: null,
  refreshTimer: null,
  tools: {},        // name -> tool info (class, request template)
  open: {},         // action id -> "edit" | "done": an editor left open across renders
  drafts: {},       // editor id -> {value, at}: what is typed in an open editor, kept across renders
  resolved: {},     // action id -> true: the executor filled in its references after an approval
  planner: false,   // the server can plan a goal
  allLive: false,   // the all-runs stream is open
  view: "none",     // "inbox" | "run" | "none": what the main pane shows
  events: [],       // the open run's events (the timeline)
  tab: "actions",   // the run's tab: actions | graph | timeline | diff
  runsNext: "",     // cursor of the next page of the run list
  runsShown: 50,    // how many runs the list holds (kept across refreshes)
};

class APIError extends Error {
  constructor(status, body) {
    const e = (body && body.error) || {};
    super(e.message || ("HTTP " + status));
    this.status = status;
    this.code = e.code || "";
    this.details = e.details;
  }
}

async function api(method, path, body) {
  const opts = { method, credentials: "same-origin", headers: {} };
  if (body !== undefined) {
    opts.headers["Content-Type"] = "application/json";
    opts.body = JSON.stringify(body);
  }
  const res = await fetch(path, opts);
  let data = null;
  const text = await res.text();
  if (text) {
    try { data = JSON.parse(text); } catch (_) { data = null; }
  }
  if (!res.ok) throw new APIError(res.status, data);
  return data;
}

function describe(err) {
  let msg = err.message || String(err);
  const d = err.details;
  if (d && Array.isArray(d.problems) && d.problems.length) {
    msg += "\n" + d.problems.map((p) => "• " + [p.action, p.field || p.path, p.message].filter(Boolean).join(": ")).join("\n");
  }
  return msg;
}

function el(tag, attrs, ...children) {
  const n = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") n.className = v;
    else if (k === "text") n.textContent = v;
    else if (k.startsWith("on")) n.addEventListener(k.slice(2), v);
    else n.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    n.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return n;
}

function pretty(v) {
  if (v === null || v === undefined) return "";
  return JSON.stringify(v, null, 2);
}

// --- connection state ---

function setConn(kind, text) {
  const c = $("conn");
  c.hidden = false;
  c.className = "conn conn-" + kind;
  c.textContent = text;
}

// With no run open, the badge tells about the all-runs stream (it keeps the
// runs list live); with a run open, about that run's stream.
function setConnAll() {
  if (state.ws) return;
  if (state.allLive) setConn("on", "live");
  else setConn("wait", "connecting…");
}

// --- sign in ---

async function signIn(token) {
  await api("POST", "/v1/session", { token });
}

async function start() {
  // The token is typed into the sign-in form, never put in a URL.
  let me;
  try {
    me = await api("GET", "/v1/session");
  } catch (e) {
    if (e.status === 401) { showSignIn(""); return; }
    setConn("off", "server unreachable");
    return;
  }
  showApp(me);
}

// applyMay hides what the signed-in token may not do (GET /v1/session's
// "may"): the body gets a class no-OP per op it lacks, and style.css hides
// that op's controls. The server checks every request anyway.
function applyMay(may) {
  state.may = may || {};
  for (const [op, ok] of Object.entries(state.may)) document.body.classList.toggle("no-" + op, !ok);
  // Approving the whole plan at creation needs the review scope too.
  const all = document.querySelector('#policy option[value="all"]');
  if (all) {
    all.disabled = state.may.approve === false;
    all.hidden = all.disabled;
  }
}

// mayNot says why the token may not do op ("" when it may).
function mayNot(op) {
  if (!state.may || state.may[op] !== false) return "";
  return "This token may not " + op + " (its scopes do not include it).";
}

function showSignIn(msg) {
  $("app").hidden = true;
  $("conn").hidden = true;
  $("signin").hidden = false;
  $("signin-error").textContent = msg || "";
  $("token").focus();
}

async function showApp(me) {
  $("signin").hidden = true;
  $("app").hidden = false;
  $("who").textContent = me.who;
  applyMay(me.may);
  state.planner = !!me.planner;
  // Without a model a goal cannot be planned: say so, and offer the plan form.
  $("goal").disabled = !state.planner;
  $("create").disabled = !state.planner;
  $("no-model").hidden = state.planner;
  if (!state.planner) {
    $("goal").placeholder = "this server has no model configured";
    $("plan-box").open = true;
  }
  setConnAll();
  try {
    const t = await api("GET", "/v1/tools");
    for (const x of t.tools) state.tools[x.name] = x;
  } catch (_) { /* previews are optional */ }
  const toolSel = $("run-tool-filter");
  for (const name of Object.keys(state.tools).sort()) toolSel.append(el("option", { value: name, text: name }));
  $("inbox-link").hidden = false;
  await loadRuns();
  route();
  // The page changes its own hash with replaceState (no event); a hash
  // changed by the person (the address bar, a link, back and forward)
  // opens what it names.
  window.addEventListener("hashchange", route);
  loadInbox();
  connectAll();
  setInterval(loadRuns, 15000);
  setInterval(() => loadInbox(), 15000);
}

// The all-runs stream keeps the runs list fresh (other tabs, the CLI, agents).
let allRetries = 0;
let listTimer = null;
function connectAll() {
  const proto = location.protocol === "https:" ? "wss://" : "ws://";
  const ws = new WebSocket(proto + location.host + "/v1/ws");
  // (Re)connected: what changed while the stream was down is read again.
  ws.onopen = () => { allRetries = 0; state.allLive = true; setConnAll(); loadInbox(); };
  ws.onmessage = (m) => {
    let msg;
    try { msg = JSON.parse(m.data); } catch (_) { return; }
    // A run being planned (planning.js): a preview, not an event.
    if (msg.type === "planning") { onPlanning(msg); return; }
    if (msg.type === "event" && msg.event && msg.event.run_id) planningRecorded(msg.event.run_id);
    if (msg.type === "event" && msg.event && msg.event.type.startsWith("run.") && !listTimer) {
      listTimer = setTimeout(() => { listTimer = null; loadRuns(); }, 100);
    }
    if (msg.type === "event" && msg.event) inboxEvent(msg.event);
  };
  ws.onclose = () => {
    state.allLive = false;
    planningGap();
    const delay = Math.min(10000, 500 * 2 ** allRetries++);
    if (!state.ws) setConn("off", "disconnected: reconnecting in " + Math.round(delay / 100) / 10 + "s");
    setTimeout(connectAll, delay);
  };
}

$("signin-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  try {
    await signIn($("token").value);
    $("token").value = "";
    start();
  } catch (e) {
    $("signin-error").textContent = describe(e);
  }
});

// --- runs list ---

// loadRuns shows the runs matching the filter, newest first: as many as
// the list holds (50, more with "More runs"), or, with more, the next page.
let runsSeq = 0;
async function loadRuns(more) {
  const q = new URLSearchParams();
  const text = $("run-q").value.trim();
  if (text) q.set("q", text);
  if ($("run-status-filter").value) q.set("status", $("run-status-filter").value);
  if ($("run-tool-filter").value) q.set("tool", $("run-tool-filter").value);
  q.set("limit", String(more === true ? 50 : Math.min(1000, state.runsShown)));
  if (more === true) q.set("after", state.runsNext);
  const seq = ++runsSeq;
  let list;
  try {
    list = await api("GET", "/v1/search/runs?" + q);
  } catch (e) {
    if (e.status === 401) showSignIn("Your session ended: sign in again.");
    else $("runs-note").textContent = describe(e);
    return;
  }
  if (seq !== runsSeq) return; // a newer filter answered meanwhile
  sweepPlanning(list.runs.map((r) => r.run_id));
  state.runsNext = list.next;
  $("runs-more").hidden = !list.next;
  $("runs-note").textContent = list.runs.length || more === true ? "" : (text || q.has("status") || q.has("tool") ? "No run matches." : "");
  const ul = $("runs");
  const items = list.runs.map((r) => el("li", {},
    el("button", {
      class: "run-item" + (r.run_id === state.runId ? " current" : ""),
      "data-run": r.run_id,
      "aria-current": r.run_id === state.runId ? "true" : null,
      onclick: () => selectRun(r.run_id),
    },
      el("span", { class: "badge status-" + r.status, text: r.status }),
      el("span", { class: "run-id", text: r.run_id }),
      el("span", { class: "run-goal", text: r.goal || "(no goal)" }))));
  if (more === true) {
    ul.append(...items);
    state.runsShown = ul.querySelectorAll(".run-item").length;
    return;
  }
  ul.replaceChildren(...items);
  if (!list.runs.length && !q.has("q") && !q.has("status") && !q.has("tool")) ul.append(el("li", { class: "muted", text: "No runs yet." }));
}

let filterTimer = null;
function filterRuns() {
  clearTimeout(filterTimer);
  filterTimer = setTimeout(() => { state.runsShown = 50; loadRuns(); }, 150);
}
$("run-filter").addEventListener("submit", (ev) => { ev.preventDefault(); filterRuns(); });
$("run-q").addEventListener("input", filterRuns);
$("run-status-filter").addEventListener("change", filterRuns);
$("run-tool-filter").addEventListener("change", filterRuns);
$("runs-more").addEventListener("click", () => loadRuns(true));

// --- new run ---

$("new-run").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const goal = $("goal").value.trim();
  $("new-run-error").textContent = "";
  if (!goal) { $("new-run-error").textContent = "Type a goal first."; return; }
  const btn = $("create");
  btn.disabled = true;
  btn.textContent = "Planning…";
  try {
    // The page names the run, so it shows the plan as the model writes it
    // (planning.js) before the server answers with the recorded run.
    if (await planGoal(goal, $("policy").value)) $("goal").value = "";
  } finally {
    btn.disabled = !state.planner;
    btn.textContent = "Plan it";
  }
});

// --- new run from a plan (pasted or from a file) ---

$("plan-file").addEventListener("change", async () => {
  const f = $("plan-file").files[0];
  if (!f) return;
  $("plan-error").textContent = "";
  try {
    $("plan-json").value = await f.text(); // shown before it is sent
  } catch (e) {
    $("plan-error").textContent = "Reading " + f.name + ": " + e.message;
  }
});

$("plan-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  $("plan-error").textContent = "";
  let plan;
  try { plan = JSON.parse($("plan-json").value); } catch (e) { $("plan-error").textContent = "Not valid JSON: " + e.message; return; }
  // A whole POST /v1/runs body pasted by mistake: take its plan.
  if (plan && !Array.isArray(plan.actions) && plan.plan && typeof plan.plan === "object") plan = plan.plan;
  const btn = $("submit-plan");
  btn.disabled = true;
  try {
    const doc = await api("POST", "/v1/runs", { plan, approve: $("policy").value });
    $("plan-json").value = "";
    $("plan-file").value = "";
    await loadRuns();
    selectRun(doc.run_id, doc);
  } catch (e) {
    $("plan-error").textContent = describe(e);
  } finally {
    btn.disabled = false;
  }
});

$("plan-json").addEventListener("keydown", (ev) => {
  if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) {
    ev.preventDefault();
    $("plan-form").requestSubmit();
  }
});

$("goal").addEventListener("keydown", (ev) => {
  if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) {
    ev.preventDefault();
    $("new-run").requestSubmit();
  }
});

// --- one run ---

// selectRun shows a recorded run; opts.focus false leaves the focus where it
// is (the planning preview it replaces was not being read).
function selectRun(id, doc, opts) {
  showView("run");
  if (state.runId !== id) {
    state.runId = id;
    state.doc = null;
    state.lastSeq = 0;
    state.open = {};
    state.resolved = {};
    state.events = [];
    graphState.sig = "";
    $("events").replaceChildren();
    $("timeline").replaceChildren();
    $("diff").replaceChildren();
    $("replay-diff").replaceChildren();
    $("replay-editor").hidden = true;
    history.replaceState(null, "", "#run=" + encodeURIComponent(id));
  }
  for (const b of document.querySelectorAll(".run-item")) {
    const cur = b.dataset.run === id;
    b.classList.toggle("current", cur);
    if (cur) b.setAttribute("aria-current", "true"); else b.removeAttribute("aria-current");
  }
  $("no-run").hidden = true;
  $("run-view").hidden = false;
  if (doc) render(doc);
  refresh();
  connect();
  if (!opts || opts.focus !== false) $("run-title").focus();
}

async function refresh() {
  const id = state.runId;
  if (!id) return;
  try {
    const doc = await api("GET", "/v1/runs/" + encodeURIComponent(id));
    if (id === state.runId) render(doc);
  } catch (e) {
    if (e.status === 401) { showSignIn("Your session ended: sign in again."); return; }
    $("run-msg").textContent = describe(e);
  }
}

// Coalesce refreshes: a burst of events costs one GET.
function scheduleRefresh() {
  if (state.refreshTimer) return;
  state.refreshTimer = setTimeout(() => { state.refreshTimer = null; refresh(); }, 60);
}

function connect() {
  const id = state.runId;
  if (state.ws && state.wsRun === id && state.ws.readyState <= 1) return;
  if (state.ws) { state.ws.onclose = null; state.ws.close(1000); }
  clearTimeout(state.reconnectTimer);
  const proto = location.protocol === "https:" ? "wss://" : "ws://";
  const ws = new WebSocket(proto + location.host + "/v1/runs/" + encodeURIComponent(id) + "/ws?after=" + state.lastSeq);
  state.ws = ws;
  state.wsRun = id;
  setConn("wait", "connecting…");
  ws.onopen = () => { state.retries = 0; setConn("on", "live"); scheduleRefresh(); };
  ws.onmessage = (m) => {
    let msg;
    try { msg = JSON.parse(m.data); } catch (_) { return; }
    if (msg.type === "event" && msg.event && state.wsRun === state.runId) {
      if (msg.event.seq <= state.lastSeq) return; // never twice
      state.lastSeq = msg.event.seq;
      track(msg.event);
      logEvent(msg.event);
      scheduleRefresh();
      if (msg.event.type.startsWith("run.")) loadRuns();
    } else if (msg.type === "error") {
      $("run-msg").textContent = (msg.error && msg.error.message) || "error";
    }
  };
  ws.onclose = (ev) => {
    if (state.ws !== ws) return;
    const why = ev.code === 4000 ? "fell behind" : ev.code === 1001 ? "server going away" : "disconnected";
    const delay = Math.min(5000, 250 * 2 ** state.retries++);
    setConn("off", why + ": reconnecting in " + Math.round(delay / 100) / 10 + "s");
    state.reconnectTimer = setTimeout(() => { if (state.runId === id) connect(); }, delay);
  };
}

// track remembers which actions the executor edited by filling in their
// references after they were approved: they wait for a second approval of
// the resolved arguments, and the page says why.
function track(ev) {
  if (!ev.action_id) return;
  if (ev.type === "action.args_resolved") {
    state.resolved[ev.action_id] = true;
  } else if (ev.type === "action.edited") {
    state.resolved[ev.action_id] = false;
  } else if (ev.type !== "run.awaiting_approval") {
    delete state.resolved[ev.action_id];
  }
}

function logEvent(ev) {
  const at = new Date(ev.at).toLocaleTimeString();
  let data = "";
  if (ev.data !== undefined) {
    data = JSON.stringify(ev.data);
    if (data.length > 200) data = data.slice(0, 200) + "…";
  }
  const li = el("li", { "data-seq": ev.seq },
    el("span", { class: "seq", text: "#" + ev.seq }),
    el("span", { class: "at", text: at }),
    el("span", { class: "etype", text: ev.type }),
    ev.action_id ? el("span", { class: "eaction", text: ev.action_id }) : null,
    data ? el("code", { class: "edata", text: data }) : null);
  state.events.push(ev);
  if (state.events.length > 5000) state.events.splice(0, state.events.length - 5000);
  scheduleTab();
  const log = $("events");
  log.append(li);
  while (log.children.length > 500) log.firstChild.remove();
  li.scrollIntoView({ block: "nearest" });
}

// dependency order, stable in plan order
function ordered(actions) {
  const byId = new Map(actions.map((a) => [a.id, a]));
  const out = [];
  const seen = new Set();
  const visit = (a) => {
    if (seen.has(a.id)) return;
    seen.add(a.id);
    for (const d of a.depends_on || []) if (byId.has(d)) visit(byId.get(d));
    out.push(a);
  };
  actions.forEach(visit);
  return out;
}

function render(doc) {
  state.doc = doc;
  const r = doc;
  $("run-title").textContent = r.run_id;
  $("run-title").tabIndex = -1;
  const st = $("run-status");
  st.textContent = r.status.replace("_", " ");
  st.className = "badge status-" + r.status;
  st.dataset.status = r.status;
  $("run-rev").textContent = "revision " + r.revision + " · policy " + r.policy + (r.trace_id ? " · trace " + r.trace_id : "");
  $("run-audit").href = runPath() + "/audit";
  $("run-goal").textContent = r.goal || "";
  $("run-error").textContent = r.error || "";
  const live = !["completed", "failed", "cancelled"].includes(r.status);
  // A run whose next actions wait for their time (not_before, after): the
  // service drives it again then.
  $("run-waiting").textContent = live && r.waiting_until ? "waiting until " + when(r.waiting_until) : "";
  const waiting = r.actions.some((a) => a.status === "pending" && a.attempts === 0);
  $("approve-all").disabled = !live || !waiting;
  $("reject-all").disabled = !live || !r.actions.some((a) => a.attempts === 0 && (a.status === "pending" || a.status === "approved"));
  $("pause").disabled = !live || r.status === "paused";
  $("resume").disabled = !live || r.status === "running";
  $("cancel").disabled = !live;

  const list = $("actions");
  const focused = document.activeElement && document.activeElement.closest("[data-action]");
  const focusKey = focused && document.activeElement.dataset.op ? [focused.dataset.action, document.activeElement.dataset.op] : null;
  list.replaceChildren(...ordered(r.actions).map(renderAction));
  if (focusKey) {
    const again = list.querySelector(`[data-action="${CSS.escape(focusKey[0])}"] [data-op="${focusKey[1]}"]`);
    if (again && !again.disabled) again.focus();
  }
  $("tab-diff").disabled = r.revision < 2;
  if (state.tab === "diff" && r.revision < 2) showTab("actions");
  scheduleTab();
}

function renderAction(a) {
  const tool = state.tools[a.tool] || {};
  const reviewable = a.attempts === 0 && (a.status === "pending" || a.status === "approved");
  const li = el("li", { class: "action status-" + a.status, "data-action": a.id, "data-status": a.status, tabindex: "-1", "aria-label": "action " + a.id },
    el("div", { class: "action-head" },
      el("strong", { class: "action-id", text: a.id }),
      el("span", { class: "tool", text: a.tool }),
      el("span", { class: "badge class-" + a.class, title: classHelp[a.class] || "", text: (a.class || "").replace(/_/g, " ") }),
      el("span", { class: "badge status-" + a.status, "data-role": "status", text: a.status.replace("_", " ") }),
      el("span", { class: "muted", text: a.attempts + (a.attempts === 1 ? " attempt" : " attempts") }),
      a.depends_on && a.depends_on.length ? el("span", { class: "muted", text: "after " + a.depends_on.join(", ") }) : null),
    a.key ? el("div", { class: "key", title: a.key }, "key ", el("code", { text: a.key.slice(0, 20) + "…" })) : null,
    el("details", { open: true }, el("summary", { text: "arguments" }), el("pre", { text: pretty(a.args) })),
    tool.request ? renderPreview(tool.request, a) : null,
    a.output !== null && a.output !== undefined ? el("details", { open: true }, el("summary", { text: "output" }), el("pre", { class: "output", text: pretty(a.output) })) : null,
    a.error ? el("p", { class: "error", text: a.error }) : null);

  const buttons = el("div", { class: "buttons" });
  const op = (label, name, fn, cls) => buttons.append(el("button", { "data-op": name, class: cls, onclick: fn, text: label }));
  const live = state.doc && !["completed", "failed", "cancelled"].includes(state.doc.status);
  if (live && a.status === "pending" && a.attempts === 0 && state.resolved[a.id]) {
    li.insertBefore(el("p", { class: "resolved-note", "data-role": "resolved",
      text: "Arguments resolved: confirm what will be sent. You approved this action before its references to earlier outputs were filled in; the arguments below are what it will send." }),
      li.querySelector("details"));
  }
  if (live && reviewable) {
    if (a.status === "pending") op("Approve", "approve", () => act("POST", `/actions/${enc(a.id)}/approve`, {}));
    op("Reject", "reject", () => {
      const reason = prompt("Why reject " + a.id + "?", "");
      if (reason !== null) act("POST", `/actions/${enc(a.id)}/reject`, { reason });
    }, "danger");
    op("Edit arguments", "edit", () => { state.open[a.id] = "edit"; render(state.doc); });
  }
  const due = a.timer && (a.timer.due_at || a.timer.not_before);
  if (live && a.timer && !a.key && !a.timer.run_now_by && (a.status === "pending" || a.status === "approved")) {
    li.insertBefore(el("p", { class: "waiting-note", "data-role": "waiting",
      text: due ? "waiting until " + when(due) : "waits " + a.timer.after + " after " + (a.depends_on || []).join(", ") + " succeed" }),
      li.querySelector("details"));
    op("Run now", "run_now", () => {
      if (confirm("Run " + a.id + " now instead of " + (due ? "at " + when(due) : "when its time comes") + "?")) act("POST", `/actions/${enc(a.id)}/run_now`, {});
    });
  }
  const tw = a.tool_wait;
  if (live && tw && (a.status === "pending" || a.status === "approved")) {
    li.insertBefore(el("p", { class: "waiting-note", "data-role": "tool-wait",
      text: tw.reason === "rate"
        ? "waiting for the rate limit of " + tw.tool + (tw.retry_at ? " until " + when(tw.retry_at) : "")
        : "waiting for a free slot of " + tw.tool + " (max_in_flight) since " + when(tw.since) }),
      li.querySelector("details"));
  }
  if (a.status === "needs_review") {
    li.append(el("p", { class: "review-note", text: "Outcome unknown: check the external system, then say what happened." }));
    op("It happened: record output…", "done", () => { state.open[a.id] = "done"; render(state.doc); });
    op("It did not happen: retry", "retry", () => act("POST", `/actions/${enc(a.id)}/resolve`, { retry: true }));
    op("Skip it", "skip", () => act("POST", `/actions/${enc(a.id)}/resolve`, { skip: true }), "danger");
  }
  if (buttons.children.length) li.append(buttons);
  if (state.open[a.id] === "edit" && reviewable) li.append(editor(a, "edit"));
  if (state.open[a.id] === "done" && a.status === "needs_review") li.append(editor(a, "done"));
  return li;
}

// when shows an RFC 3339 time in the reader's time zone, and as recorded.
function when(t) {
  const d = new Date(t);
  return isNaN(d) ? t : d.toLocaleString() + " (" + t + ")";
}

const classHelp = {
  read_only: "reads only: runs freely",
  idempotent: "repeating it changes nothing more",
  keyed: "the provider deduplicates by docket's key",
  lookup: "docket looks for an earlier effect before writing again",
  at_most_once: "cannot be deduplicated or searched: never retried automatically",
};

function editor(a, kind) {
  const id = "ed-" + kind + "-" + a.id;
  const ta = el("textarea", { id, rows: 8, class: "json", spellcheck: "false", "aria-label": kind === "edit" ? "arguments (JSON)" : "output (JSON)" });
  // A live event re-renders the run while a person types: what they typed,
  // and where, survives it.
  const draft = state.drafts[id];
  ta.value = draft ? draft.value : kind === "edit" ? pretty(a.args) : "{}";
  const keep = () => { state.drafts[id] = { value: ta.value, at: ta.selectionStart }; };
  ta.addEventListener("input", keep);
  ta.addEventListener("keyup", keep);
  const close = () => { delete state.open[a.id]; delete state.drafts[id]; };
  const msg = el("p", { class: "error", role: "alert" });
  const save = async () => {
    let v;
    try { v = JSON.parse(ta.value); } catch (e) { msg.textContent = "Not valid JSON: " + e.message; return; }
    try {
      if (kind === "edit") await api("POST", runPath() + `/actions/${enc(a.id)}/edit`, { args: v });
      else await api("POST", runPath() + `/actions/${enc(a.id)}/resolve`, { done: v });
      close();
      refresh();
    } catch (e) { msg.textContent = describe(e); }
  };
  ta.addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) { ev.preventDefault(); save(); }
    if (ev.key === "Escape") { close(); render(state.doc); }
  });
  setTimeout(() => {
    ta.focus();
    if (draft) ta.setSelectionRange(draft.at, draft.at);
  }, 0);
  return el("div", { class: "editor" },
    el("label", { for: id, text: kind === "edit" ? "Arguments (validated against the tool's schema; the key changes)" : "The action's output, as JSON" }),
    ta,
    el("div", { class: "buttons" },
      el("button", { "data-op": kind === "edit" ? "save-edit" : "save-done", onclick: save, text: "Save (Ctrl+Enter)" }),
      el("button", { onclick: () => { close(); render(state.doc); }, text: "Cancel (Esc)" })),
    msg);
}

// renderPreview shows the HTTP request an action will send, from the tool's
// masked request template (secrets never reach the page).
function renderPreview(t, a) {
  const args = a.args || {};
  const key = a.key || "(key: derived when claimed)";
  const sub = (s, urlEscape) => s.replace(/\{\{\s*\.([A-Za-z0-9_]+)\s*\}\}/g, (_, f) => {
    const v = args[f];
    const text = typeof v === "string" ? v : JSON.stringify(v);
    return urlEscape ? encodeURIComponent(text === undefined ? "" : text) : (text === undefined ? "" : text);
  }).replace(/\{\{\s*key\s*\}\}/g, key);
  const walk = (v) => {
    if (typeof v === "string") {
      const m = v.match(/^\{\{\s*\.([A-Za-z0-9_]+)\s*\}\}$/);
      if (m) return args[m[1]];
      return sub(v, false);
    }
    if (Array.isArray(v)) return v.map(walk);
    if (v && typeof v === "object") return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, walk(x)]));
    return v;
  };
  const lines = [t.method + " " + sub(t.url, true)];
  for (const [k, v] of Object.entries(t.headers || {})) lines.push(k + ": " + sub(v, false));
  if (t.key_header) lines.push(t.key_header + ": " + key);
  let body = "";
  if (t.method !== "GET" && t.method !== "DELETE") body = pretty(t.body !== undefined ? walk(t.body) : args);
  return el("details", { class: "preview" }, el("summary", { text: "request preview" }),
    el("pre", { text: lines.join("\n") + (body ? "\n\n" + body : "") }));
}

function enc(s) { return encodeURIComponent(s); }
function runPath() { return "/v1/runs/" + enc(state.runId); }

async function act(method, suffix, body) {
  $("run-msg").textContent = "";
  try {
    const doc = await api(method, runPath() + suffix, body);
    if (doc && doc.run_id === state.runId) render(doc);
    return doc;
  } catch (e) {
    $("run-msg").textContent = describe(e);
    return null;
  }
}

// The whole plan is always said explicitly: the service never reads a
// missing or empty list as "everything".
$("approve-all").addEventListener("click", () => act("POST", "/approve", { all: true }));
$("reject-all").addEventListener("click", () => {
  const reason = prompt("Reject every action of " + state.runId + " that has not started? Why:", "");
  if (reason !== null) act("POST", "/reject", { all: true, reason });
});
$("pause").addEventListener("click", () => act("POST", "/pause", {}));
$("resume").addEventListener("click", () => act("POST", "/resume", {}));
$("cancel").addEventListener("click", () => {
  if (confirm("Cancel run " + state.runId + " for good? Actions in flight finish; nothing new starts.")) act("POST", "/cancel", {});
});
$("fork").addEventListener("click", async () => {
  if (!confirm("Fork run " + state.runId + "? Every action of its plan runs again, on purpose, as a new run.")) return;
  const doc = await act("POST", "/fork", {});
  if (doc) { await loadRuns(); selectRun(doc.run_id, doc); }
});

// --- replay with edits ---

async function openReplay() {
  $("replay-error").textContent = "";
  try {
    const p = await api("GET", runPath() + "/plan");
    const plan = { goal: p.goal, actions: p.actions.map((a) => {
      const out = { id: a.id, tool: a.tool, args: a.args };
      if (a.depends_on && a.depends_on.length) out.depends_on = a.depends_on;
      if (a.why) out.why = a.why;
      return out;
    }) };
    $("replay-plan").value = JSON.stringify(plan, null, 2);
    $("replay-editor").hidden = false;
    $("replay-plan").focus();
  } catch (e) {
    $("run-msg").textContent = describe(e);
  }
}

async function saveReplay() {
  let plan;
  try { plan = JSON.parse($("replay-plan").value); } catch (e) { $("replay-error").textContent = "Not valid JSON: " + e.message; return; }
  try {
    const doc = await api("POST", runPath() + "/replay", { plan });
    $("replay-editor").hidden = true;
    $("replay-diff").replaceChildren();
    render(doc);
  } catch (e) {
    $("replay-error").textContent = describe(e);
  }
}

$("replay").addEventListener("click", openReplay);
$("replay-save").addEventListener("click", saveReplay);
$("replay-cancel").addEventListener("click", () => { $("replay-editor").hidden = true; });
$("replay-plan").addEventListener("keydown", (ev) => {
  if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) { ev.preventDefault(); saveReplay(); }
  if (ev.key === "Escape") $("replay-editor").hidden = true;
});

// start() is called by review.js, the last script the page loads.
