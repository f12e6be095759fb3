// docket review page, the planning preview: a plan shown as the model writes
// it. While the model plans a run (POST /v1/runs with a goal) the run does
// not exist yet; the all-runs stream (/v1/ws) carries "planning" messages
// for it, which are not events (no seq, never stored, never replayed). The
// page keeps a preview per run id, lists it as "planning" above the runs, and
// shows one in a panel; the preview is dropped as soon as the run's first
// event arrives (or the run shows up in the list), and the recorded run is
// shown as usual. Loaded after app.js, whose helpers ($, el, api, state, ...)
// it uses; no framework, no CDN.
"use strict";

const planning = {
  runs: new Map(), // run id -> preview, oldest first
  shown: null,     // the run id whose preview is on screen
};

// newRunId names a run this page creates, so that it knows the planning
// messages of its own run before the server answers.
function newRunId() {
  const b = new Uint8Array(8);
  crypto.getRandomValues(b);
  return "run_" + [...b].map((x) => x.toString(16).padStart(2, "0")).join("");
}

function previewOf(id) {
  let p = planning.runs.get(id);
  if (!p) {
    p = { id, own: false, goal: "", rounds: new Map(), round: 0, actions: 0, done: false, ended: false, error: "", gap: false, at: Date.now() };
    planning.runs.set(id, p);
    renderPlanningList();
  }
  return p;
}

function roundOf(p, n) {
  n = n > 0 ? n : Math.max(1, p.round);
  let r = p.rounds.get(n);
  if (!r) {
    r = { n, text: "", reasoning: "", steps: [], dom: null };
    p.rounds.set(n, r);
  }
  return r;
}

// A call the model finished writing waits in its round until the planner
// checked it (queued, read, or rejected): the first such call of the same
// tool is replaced in place.
function settleCall(r, tool, step) {
  const wire = (s) => String(s || "").replace(/[^A-Za-z0-9_-]/g, "_");
  const i = r.steps.findIndex((s) => s.kind === "call" && (s.tool === tool || wire(s.tool) === wire(tool)));
  if (i >= 0) r.steps[i] = step;
  else r.steps.push(step);
}

// onPlanning takes one "planning" message of the all-runs stream.
function onPlanning(msg) {
  const id = msg.run_id;
  if (!id) return;
  const p = previewOf(id);
  p.at = Date.now();
  // A run opened by its address before its plan was recorded (404 so far).
  if (state.view === "run" && state.runId === id && !state.doc) openPlanning(id, false);
  const shown = planning.shown === id && state.view === "planning";
  if (msg.done) {
    p.done = true;
    p.ended = true; // nothing of this planning follows on the stream
    if (msg.error && !p.error) p.error = msg.error;
    renderPlanningList();
    if (shown) renderPlanning();
    return;
  }
  const pr = msg.progress;
  // Pieces still arrive after the POST's answer said the planning failed
  // (the answer and the stream race): they belong to the preview. Only the
  // stream's own "done" ends it.
  if (!pr || p.ended) return;
  const r = roundOf(p, pr.round);
  switch (pr.kind) {
    case "round":
      if (r.n > p.round) {
        // Every call of the earlier turns was checked before this one began.
        for (const [n, old] of p.rounds) if (n < r.n) old.steps = old.steps.filter((s) => s.kind !== "call");
        p.round = r.n;
      }
      break;
    case "text":
    case "reasoning": {
      const key = pr.kind === "text" ? "text" : "reasoning";
      r[key] += pr.text || "";
      if (shown && r.dom && r.dom[key]) {
        r.dom[key].appendData(pr.text || "");
        r.dom[key + "Box"].hidden = false;
        r.dom.box.hidden = false;
        return;
      }
      break;
    }
    case "call": r.steps.push({ kind: "call", tool: pr.tool, args: pr.args }); break;
    case "action":
      if (!pr.action) return;
      settleCall(r, pr.tool || pr.action.tool, { kind: "action", tool: pr.action.tool, action: pr.action });
      p.actions++;
      break;
    case "read": settleCall(r, pr.tool, { kind: "read", tool: pr.tool, args: pr.args }); break;
    case "rejected": settleCall(r, pr.tool, { kind: "rejected", tool: pr.tool, message: pr.message }); break;
    case "warning": r.steps.push({ kind: "warning", message: pr.message }); break;
    default: return;
  }
  if (shown) {
    if (r.dom) renderRound(p, r);
    else renderPlanning();
    planningStatus(p);
  }
}

// planningRecorded drops the preview of a run that now has events (or is
// listed), and shows the recorded run in its place.
function planningRecorded(id) {
  const p = planning.runs.get(id);
  if (!p) return;
  planning.runs.delete(id);
  renderPlanningList();
  if (planning.shown === id && state.view === "planning") {
    const view = $("planning-view");
    const focused = view.contains(document.activeElement) || document.activeElement === document.body;
    planning.shown = null;
    selectRun(id, undefined, { focus: focused });
  }
}

// The all-runs stream dropped: planning messages are never replayed, so a
// preview may miss pieces. It stays (its run's events replace it), and says so.
function planningGap() {
  for (const p of planning.runs.values()) if (!p.done) p.gap = true;
  if (planning.shown && state.view === "planning") renderPlanning();
}

// sweepPlanning forgets previews whose run showed up in the list, failed
// plannings not on screen after a minute, and plannings silent for ten.
function sweepPlanning(listed) {
  for (const id of listed) if (planning.runs.has(id)) planningRecorded(id);
  const now = Date.now();
  let changed = false;
  for (const [id, p] of planning.runs) {
    if (id === planning.shown || (p.own && !p.done)) continue;
    if ((p.done && p.error && now - p.at > 60000) || now - p.at > 600000) {
      planning.runs.delete(id);
      changed = true;
    }
  }
  if (changed) renderPlanningList();
}

function openPlanning(id, focus) {
  if (!planning.runs.has(id)) return;
  if (state.ws) {
    state.ws.onclose = null;
    state.ws.close(1000);
    state.ws = null;
    state.wsRun = null;
  }
  clearTimeout(state.reconnectTimer);
  state.runId = null;
  state.doc = null;
  $("run-msg").textContent = "";
  showView("planning");
  planning.shown = id;
  history.replaceState(null, "", "#run=" + encodeURIComponent(id));
  for (const b of document.querySelectorAll(".run-item")) {
    const cur = b.dataset.run === id;
    b.classList.toggle("current", cur);
    if (cur) b.setAttribute("aria-current", "true"); else b.removeAttribute("aria-current");
  }
  setConnAll();
  renderPlanning();
  if (focus) $("planning-title").focus();
}

function planningLabel(p) {
  if (p.error) return ["planning failed", "failed"];
  if (p.done) return ["recording", "planning"];
  return ["planning", "planning"];
}

function renderPlanningList() {
  const ul = $("planning-runs");
  const items = [...planning.runs.values()].reverse().map((p) => {
    const [label, cls] = planningLabel(p);
    const cur = planning.shown === p.id && state.view === "planning";
    return el("li", {},
      el("button", {
        class: "run-item planning-item" + (cur ? " current" : ""), "data-run": p.id, "data-planning": "true",
        "aria-current": cur ? "true" : null, onclick: () => openPlanning(p.id, true),
      },
        el("span", { class: "badge status-" + cls, "data-role": "status", text: label }),
        el("span", { class: "run-id", text: p.id }),
        el("span", { class: "run-goal", text: p.goal || "(being planned by the model)" })));
  });
  ul.replaceChildren(...items);
  ul.hidden = !items.length;
}

function planningStatus(p) {
  const n = p.actions === 1 ? "1 action" : p.actions + " actions";
  let s;
  if (p.error) s = "Planning failed: nothing was recorded.";
  else if (p.done) s = "Planning finished with " + n + ": recording the plan…";
  else s = "Planning… model turn " + Math.max(1, p.round) + ", " + n + " queued so far.";
  if ($("planning-status").textContent !== s) $("planning-status").textContent = s;
  const err = p.error || "";
  if ($("planning-error").textContent !== err) $("planning-error").textContent = err;
  const [label, cls] = planningLabel(p);
  const badge = $("planning-badge");
  badge.textContent = label;
  badge.className = "badge status-" + cls;
  badge.dataset.status = label.replace(/ /g, "_");
  $("planning-hint").hidden = p.done;
  $("planning-gap").hidden = !p.gap || !!p.error;
}

function renderPlanning() {
  const p = planning.runs.get(planning.shown);
  if (!p) return;
  const view = $("planning-view");
  view.dataset.run = p.id;
  $("planning-title").textContent = p.id;
  $("planning-goal").textContent = p.goal;
  planningStatus(p);
  const log = $("planning-log");
  const rounds = [...p.rounds.values()].sort((a, b) => a.n - b.n);
  for (const r of rounds) r.dom = null;
  log.replaceChildren(...rounds.map((r) => renderRound(p, r, true)));
}

// renderRound draws one model turn: its thinking (folded), its text, and
// the calls it made as the planner checked them.
function renderRound(p, r, fresh) {
  if (!r.dom) {
    const text = document.createTextNode(r.text);
    const reasoning = document.createTextNode(r.reasoning);
    const textBox = el("p", { class: "plan-text", "data-role": "text" }, text);
    const reasoningBox = el("details", { class: "thinking" }, el("summary", { text: "the model's thinking" }), el("pre", {}, reasoning));
    const steps = el("ol", { class: "plan-steps", "aria-label": "calls of model turn " + r.n });
    const box = el("section", { class: "plan-round", "data-round": r.n, "aria-labelledby": "plan-round-" + r.n },
      el("h3", { id: "plan-round-" + r.n, text: "Model turn " + r.n }), reasoningBox, textBox, steps);
    r.dom = { box, text, reasoning, textBox, reasoningBox, steps };
    if (!fresh) $("planning-log").append(box);
  }
  r.dom.textBox.hidden = !r.text;
  r.dom.reasoningBox.hidden = !r.reasoning;
  r.dom.box.hidden = !r.text && !r.reasoning && !r.steps.length;
  r.dom.steps.replaceChildren(...r.steps.map((s) => renderStep(p, s)));
  r.dom.steps.hidden = !r.steps.length;
  return r.dom.box;
}

function renderStep(p, s) {
  switch (s.kind) {
    case "action": {
      const a = s.action;
      const tool = state.tools[a.tool] || {};
      return el("li", { class: "action plan-step step-action", "data-kind": "action", "data-action": a.id, "data-tool": a.tool },
        el("div", { class: "action-head" },
          el("strong", { class: "action-id", text: a.id }),
          el("span", { class: "tool", text: a.tool }),
          tool.class ? el("span", { class: "badge class-" + tool.class, title: classHelp[tool.class] || "", text: tool.class.replace(/_/g, " ") }) : null,
          el("span", { class: "badge status-queued", text: "queued" }),
          a.depends_on && a.depends_on.length ? el("span", { class: "muted", text: "after " + a.depends_on.join(", ") }) : null),
        el("details", { open: true }, el("summary", { text: "arguments" }), el("pre", { text: pretty(a.args) })),
        tool.request ? renderPreview(tool.request, { args: a.args }) : null);
    }
    case "call":
      return el("li", { class: "action plan-step step-call", "data-kind": "call", "data-tool": s.tool },
        el("div", { class: "action-head" },
          el("span", { class: "tool", text: s.tool }),
          el("span", { class: "badge status-pending", text: p.done ? "not queued" : "written: checked when the turn ends" })),
        s.args !== undefined ? el("pre", { text: pretty(s.args) }) : null);
    case "read":
      return el("li", { class: "plan-step plan-note step-read", "data-kind": "read", "data-tool": s.tool },
        "Read ", el("span", { class: "tool", text: s.tool }), " while planning (read-only: its answer went to the model) ",
        el("code", { text: JSON.stringify(s.args || {}) }));
    case "rejected":
      return el("li", { class: "plan-step plan-note step-rejected", "data-kind": "rejected", "data-tool": s.tool },
        el("span", { class: "tool", text: s.tool }), " rejected, not queued (the model is told why): " + (s.message || ""));
    case "warning":
      return el("li", { class: "plan-step plan-note step-warning", "data-kind": "warning", text: "⚠ " + (s.message || "") });
  }
  return el("li", {});
}

// planGoal plans a goal typed on this page: the run's preview shows at once,
// under an id the page chose, and the recorded run replaces it.
async function planGoal(goal, approve) {
  const id = newRunId();
  const p = previewOf(id);
  p.own = true;
  p.goal = goal;
  renderPlanningList();
  openPlanning(id, true);
  try {
    const doc = await api("POST", "/v1/runs", { run_id: id, goal, approve });
    // The run's first event may have replaced the preview already.
    const here = state.view === "planning" && planning.shown === id;
    const focus = here && ($("planning-view").contains(document.activeElement) || document.activeElement === document.body);
    planning.runs.delete(id);
    if (here) planning.shown = null;
    renderPlanningList();
    if (here || state.runId === id) selectRun(doc.run_id, doc, { focus });
    await loadRuns();
    return true;
  } catch (e) {
    p.done = true;
    p.error = describe(e);
    renderPlanningList();
    if (planning.shown === id && state.view === "planning") renderPlanning();
    else $("new-run-error").textContent = describe(e);
    if (e.status === 401) showSignIn("Your session ended: sign in again.");
    return false;
  }
}
