// semworld web page: upload a clip (or pick a sample) as a job, follow its progress, show observed and
// predicted frames with their states, and re-roll the future from an edited state through /v1/rollout. With
// weights that forecast under actions and draw frames (a game's), play the game inside the model: each key press
// asks /v1/rollout for the next state under that key's action.
"use strict";

const STAGES = ["decode", "caption", "predict", "render", "encode"];
const $ = (sel) => document.querySelector(sel);
let current = { observed: [], predicted: [], predictedFrames: [], jobId: null, polling: null };

function headers(extra = {}) {
  const key = $("#api-key").value.trim();
  if (key) localStorage.setItem("semworld-key", key);
  return key ? { ...extra, "X-API-Key": key } : extra;
}

async function api(path, options = {}) {
  const res = await fetch(path, { ...options, headers: headers(options.headers || {}) });
  if (!res.ok) {
    let detail = res.statusText;
    try { detail = (await res.json()).detail || detail; } catch (_) { /* not JSON */ }
    throw new Error(`${res.status}: ${detail}`);
  }
  return res;
}

// A warning for a person at a browser: what it means, in plain words, and where to read more; the service's own
// words (which name command-line options) stay one click away.
function showWarning(warnings) {
  const el = $("#warning");
  el.replaceChildren();
  el.hidden = warnings.length === 0;
  if (!warnings.length) return;
  const say = document.createElement("p");
  say.append("Most of this clip was hard for the models to read: they were trained on a different kind of " +
    "video, so the descriptions and the forecast below are probably guesses. ");
  const more = document.createElement("a");
  more.href = "/static/own-models.html";
  more.textContent = "What the models know, and how to use your own";
  say.append(more, ".");
  const details = document.createElement("details");
  const summary = document.createElement("summary");
  summary.textContent = "the service's full message";
  details.append(summary, ...warnings.map((w) => Object.assign(document.createElement("p"), { textContent: w })));
  el.append(say, details);
}

function setStatus(text, isError = false) {
  const el = $("#status");
  el.textContent = text;
  el.className = isError ? "error" : "";
}

async function loadSamples() {
  try {
    const samples = await (await api("/v1/samples")).json();
    for (const s of samples) {
      const opt = document.createElement("option");
      opt.value = s.url;
      opt.textContent = s.name;
      $("#sample").appendChild(opt);
    }
  } catch (err) {
    setStatus(`could not list samples (${err.message})`, true);
  }
}

function showProgress(job) {
  $("#progress").hidden = false;
  $("#job-state").textContent = `(${job.state})`;
  const box = $("#stages");
  box.innerHTML = "";
  for (const stage of STAGES) {
    const p = job.progress[stage] || { done: 0, total: 0 };
    const row = document.createElement("div");
    row.className = "stage";
    row.dataset.stage = stage;
    const frac = p.total ? p.done / p.total : 0;
    // "3/11" once the stage knows its work; a stage not started yet shows no count (not "0/0")
    row.innerHTML = `<span class="name">${stage}</span><progress max="1" value="${frac}"></progress>` +
      `<span class="count">${p.total ? `${p.done}/${p.total}` : ""}</span>`;
    box.appendChild(row);
  }
}

function frameCard(src, state, label, editable, index, extra = {}) {
  const card = document.createElement("figure");
  card.className = "frame" + (extra.edited ? " edited" : "") + (extra.unsure ? " unsure" : "");
  const img = document.createElement("img");
  img.alt = state;
  if (src) img.src = `data:image/png;base64,${src}`;
  card.appendChild(img);
  const cap = document.createElement("figcaption");
  const t = document.createElement("span");
  t.className = "t";
  t.textContent = label + (extra.edited ? " · edited" : "");
  cap.appendChild(t);
  if (extra.confidence !== undefined && extra.confidence !== null) {
    const c = document.createElement("span");
    c.className = "confidence";
    c.title = "the captioner's mean token log-probability (0 is sure)";
    c.textContent = ` ${extra.unsure ? "unsure" : "sure"} (${extra.confidence.toFixed(3)})`;
    cap.appendChild(c);
  }
  if (extra.parses === false) {
    const g = document.createElement("span");
    g.className = "grammar";
    g.textContent = " · not a valid state";
    g.title = "this state is not a valid state of the weights' domain";
    cap.appendChild(g);
  }
  if (editable) {
    const area = document.createElement("textarea");
    area.className = "state";
    area.value = state;
    area.rows = Math.max(2, Math.ceil(state.length / 18));  // the whole state, without scrolling
    cap.appendChild(area);
    const btn = document.createElement("button");
    btn.type = "button";
    btn.className = "reroll";
    btn.textContent = "Re-roll from here";
    btn.addEventListener("click", () => reroll(index, area.value));
    cap.appendChild(btn);
  } else {
    const p = document.createElement("p");
    p.className = "state";
    p.textContent = state;
    cap.appendChild(p);
  }
  if (extra.changes) cap.appendChild(changeList(extra.changes, index === 0 && !editable));
  card.appendChild(cap);
  return card;
}

function changeList(changes, first) {
  // The semantic timeline beside each frame: what changed since the step before, in words.
  const list = document.createElement("ul");
  list.className = "changes";
  list.title = "what changed since the step before";
  const items = changes.length ? changes : [first ? "(first step)" : "no change"];
  for (const text of items) {
    const li = document.createElement("li");
    li.textContent = text;
    if (!changes.length) li.className = "none";
    list.appendChild(li);
  }
  return list;
}

function showResult(result) {
  current.confidence = result.observed_confidence || [];
  current.parses = result.observed_parses || [];
  current.predictedParses = result.predicted_parses || [];
  current.changes = result.changes || [];
  current.threshold = result.confidence_threshold;
  current.edited = null;
  current.observed = result.observed_states;
  current.predicted = result.predicted_states;
  current.predictedFrames = result.frames;
  current.observedFrames = result.observed_frames || [];
  current.actions = result.actions || [];
  render();
  offerPlay();
}

function render() {
  $("#results").hidden = false;
  const obs = $("#observed");
  obs.innerHTML = "";
  current.observed.forEach((s, i) => {
    const c = current.confidence[i];
    const unsure = (c !== undefined && c !== null && current.threshold !== null && c < current.threshold) ||
      current.parses[i] === false;
    obs.appendChild(frameCard(current.observedFrames[i], s, `t=${i}`, false, i,
      { confidence: c, unsure, parses: current.parses[i], changes: current.changes[i] }));
  });
  const pred = $("#predicted");
  pred.innerHTML = "";
  const n = current.observed.length;
  current.predicted.forEach((s, j) => {
    const parses = current.predictedParses[j];
    pred.appendChild(frameCard(current.predictedFrames[j], s, `t=${n + j}`, true, j,
      { edited: j === current.edited, unsure: parses === false, parses, changes: current.changes[n + j] }));
  });
}

async function reroll(index, edited) {
  edited = edited.trim();
  if (!edited) { setStatus("a state cannot be empty", true); return; }
  // the server reads at most 64 states (the schema's maxItems): keep the most recent ones
  const history = [...current.observed, ...current.predicted.slice(0, index), edited].slice(-64);
  const horizon = Math.max(1, current.predicted.length - index - 1);
  setStatus(`re-rolling ${horizon} states from t=${current.observed.length + index}…`);
  try {
    const body = {
      states: history, horizon, render_context: 1,
      seed: Number($("#seed").value || 0),
      steps: $("#steps").value ? Number($("#steps").value) : null,
    };
    const res = await (await api("/v1/rollout", {
      method: "POST", body: JSON.stringify(body), headers: { "Content-Type": "application/json" },
    })).json();
    current.predicted = [...current.predicted.slice(0, index), edited, ...res.predicted_states];
    current.predictedFrames = [...current.predictedFrames.slice(0, index), res.context_frames[0], ...res.frames];
    const given = res.observed_parses || [];
    current.predictedParses = [...current.predictedParses.slice(0, index), given[given.length - 1],
                               ...(res.predicted_parses || [])];
    // the timeline of the edited state (against the one before it) and of the new forecast
    const n = current.observed.length;
    current.changes = [...current.changes.slice(0, n + index), ...(res.changes || []).slice(-(horizon + 1))];
    current.edited = index;
    render();
    setStatus(`re-rolled from t=${current.observed.length + index} in ${res.timings.total.toFixed(2)} s`);
  } catch (err) {
    setStatus(`re-roll failed: ${err.message}`, true);
  }
}

// ---- play mode ----------------------------------------------------------------------------------------------
// The keys of the action words: direction words on the arrow keys, a word for doing nothing on the space bar,
// every other word on 1..9 (the words come from /v1/model: the page knows no game).
const ARROWS = { up: "ArrowUp", down: "ArrowDown", left: "ArrowLeft", right: "ArrowRight" };
const IDLE = ["stay", "noop", "none", "wait"];
const KEY_NAMES = { ArrowUp: "↑", ArrowDown: "↓", ArrowLeft: "←", ArrowRight: "→", " ": "space" };
const PLAY_HISTORY = 32;  // states sent with each step; the predictor's memory carries what came before
let model = null;  // GET /v1/model: the weights' domain, action words and stages
let play = null;   // the game being played: its states, the actions between them, the times from key to frame

async function loadModel() {
  try { model = await (await api("/v1/model")).json(); } catch (_) { model = null; }
  return model;
}

async function offerPlay() {
  const info = model || await loadModel();
  $("#play-offer").hidden = !(info && info.actions.length && info.renderer && current.observedFrames.length);
}

function actionKeys(actions) {
  const keys = {};
  let digit = 1;
  for (const word of actions) {
    if (ARROWS[word]) keys[ARROWS[word]] = word;
    else if (IDLE.includes(word) && !keys[" "]) keys[" "] = word;
    else if (digit <= 9) keys[String(digit++)] = word;
  }
  return keys;
}

function startPlay() {
  const n = current.observed.length;
  // the clip's own actions between its states when the result has them (null: not known)
  const between = current.observed.slice(0, -1).map((_, i) => current.actions[i] ?? null);
  play = { states: [...current.observed], actions: between, keys: actionKeys(model.actions), busy: false,
           pending: null, latencies: [] };
  const box = $("#play-keys");
  box.replaceChildren();
  for (const [key, word] of Object.entries(play.keys).sort((a, b) => model.actions.indexOf(a[1]) -
                                                                       model.actions.indexOf(b[1]))) {
    const b = document.createElement("button");
    b.type = "button";
    b.dataset.action = word;
    b.innerHTML = `<kbd>${KEY_NAMES[key] || key}</kbd>`;
    b.append(` ${word}`);
    b.addEventListener("click", () => step(word, performance.now()));
    box.appendChild(b);
  }
  $("#play-log").replaceChildren();
  fillGoals();
  $("#play-latency").textContent = "press a key: the model forecasts the next state under its action and draws it";
  showPlayState(current.observedFrames[n - 1], null);
  $("#play").hidden = false;
  $("#play").scrollIntoView({ block: "nearest" });
}

function showPlayState(frame, action) {
  if (frame) $("#play-frame").src = `data:image/png;base64,${frame}`;
  const t = play.states.length - 1;
  const n = current.observed.length;
  $("#play-t").textContent = t < n ? `t=${t} (the clip's last state)` : `t=${t} (imagined, ${t - n + 1} steps in)`;
  $("#play-state").textContent = play.states[t];
  if (action) {
    const li = document.createElement("li");
    li.textContent = `${action} → ${play.states[t]}`;
    $("#play-log").prepend(li);
  }
}

function median(values) {
  const s = [...values].sort((a, b) => a - b);
  return s[Math.floor((s.length - 1) / 2)];
}

async function step(action, pressed) {
  if (play.planning) return;  // the planner has the controls
  if (play.busy) { play.pending = [action, pressed]; return; }  // the latest key waits; older ones are dropped
  play.busy = true;
  const button = $(`#play-keys button[data-action="${action}"]`);
  if (button) button.classList.add("pressed");
  try {
    const from = Math.max(0, play.states.length - PLAY_HISTORY);
    const body = {
      states: play.states.slice(from),
      actions: [...play.actions.slice(from), action],  // one after each given state; the last is the key's
      horizon: 1,
      seed: play.states.length,
      steps: $("#steps").value ? Number($("#steps").value) : null,
    };
    const res = await (await api("/v1/rollout", {
      method: "POST", body: JSON.stringify(body), headers: { "Content-Type": "application/json" },
    })).json();
    play.states.push(res.predicted_states[0]);
    play.actions.push(action);
    showPlayState(res.frames[0], action);
    await $("#play-frame").decode();
    const ms = performance.now() - pressed;
    play.latencies.push(ms);
    const el = $("#play-latency");
    el.dataset.median = median(play.latencies).toFixed(0);
    el.textContent = `key to frame: ${ms.toFixed(0)} ms (median ${el.dataset.median} ms over ` +
      `${play.latencies.length} steps)`;
  } catch (err) {
    setStatus(`play: ${err.message}`, true);
  } finally {
    if (button) button.classList.remove("pressed");
    play.busy = false;
    if (play.pending) {
      const [next, at] = play.pending;
      play.pending = null;
      step(next, at);
    }
  }
}

// ---- the planner plays ----------------------------------------------------------------------------------------
// With a goal in words, each round asks POST /v1/plan for one action from the game so far (the service searches
// action sequences with the predictor towards the goal: docs/planning.md) and draws the state it leads to, until
// the button is pressed again or PLAN_STEPS have been played.
const PLAN_STEPS = 300;

function fillGoals() {
  const list = $("#plan-goals");
  list.replaceChildren();
  for (const goal of model.goals || []) {
    const option = document.createElement("option");
    option.value = goal;
    list.appendChild(option);
  }
  if (model.goals && model.goals.length) $("#plan-goal").placeholder = `e.g. ${model.goals[0]}`;
}

async function planPlay(event) {
  event.preventDefault();
  if (play.planning) { play.planning = false; return; }  // a second press stops the planner
  const goal = $("#plan-goal").value.trim() || (model.goals || [])[0];
  if (!goal) { setStatus("plan: write a goal in words, e.g. a field and a number: player < 20", true); return; }
  const game = play;
  game.planning = true;
  $("#plan-btn").textContent = "Stop the planner";
  try {
    for (let k = 0; k < PLAN_STEPS && game.planning && play === game; k++) {
      const started = performance.now();
      const from = Math.max(0, game.states.length - PLAY_HISTORY);
      const body = { states: game.states.slice(from), actions: game.actions.slice(from), goal, steps: 1,
                     render: true, seed: game.states.length };
      const res = await (await api("/v1/plan", {
        method: "POST", body: JSON.stringify(body), headers: { "Content-Type": "application/json" },
      })).json();
      if (play !== game) break;  // the game was restarted meanwhile
      game.states.push(res.predicted_states[0]);
      game.actions.push(res.actions[0]);
      showPlayState(res.frames[0], `planner: ${res.actions[0]}`);
      await $("#play-frame").decode();
      const el = $("#play-latency");
      el.dataset.planMs = (performance.now() - started).toFixed(0);
      el.textContent = `the planner, towards "${goal}": ${el.dataset.planMs} ms a step (search and drawing)`;
    }
  } catch (err) {
    setStatus(`plan: ${err.message}`, true);
  } finally {
    game.planning = false;
    $("#plan-btn").textContent = "Let the planner play";
  }
}

function playKey(event) {
  if (!play || $("#play").hidden || event.target.matches("input, textarea, select")) return;
  const action = play.keys[event.key];
  if (!action) return;
  event.preventDefault();  // the arrows and the space bar would scroll the page
  step(action, performance.now());
}

async function blobUrl(path) {
  // Through fetch, so that the API key goes along (a <video src> or <a href> could not send it).
  return URL.createObjectURL(await (await api(path)).blob());
}

async function showDownloads(jobId) {
  const box = $("#downloads");
  box.hidden = false;
  try {
    $("#video").src = await blobUrl(`/v1/jobs/${jobId}/result?format=mp4`);
    for (const [id, fmt, name] of [["#dl-mp4", "mp4", "predicted.mp4"], ["#dl-zip", "zip", "semworld.zip"],
                                    ["#dl-json", "json", "result.json"]]) {
      const a = $(id);
      a.href = await blobUrl(`/v1/jobs/${jobId}/result?format=${fmt}`);
      a.download = `${jobId.slice(0, 8)}-${name}`;
    }
  } catch (err) {
    setStatus(`could not fetch the outputs (${err.message})`, true);
  }
}

async function clipBlob() {
  const file = $("#file").files[0];
  if (file) return { blob: file, name: file.name };
  const url = $("#sample").value;
  if (!url) throw new Error("choose a clip to upload or a sample");
  const blob = await (await api(url)).blob();
  return { blob: new Blob([blob], { type: "video/mp4" }), name: url.split("/").pop() };
}

function stageSummary(job) {
  // "running: caption 3/11" from the stage in progress (or the last one started).
  const started = STAGES.filter((s) => (job.progress[s] || {}).total);
  const stage = started.find((s) => job.progress[s].done < job.progress[s].total) || started[started.length - 1];
  return stage ? `${stage} ${job.progress[stage].done}/${job.progress[stage].total}` : "";
}

async function poll(jobId) {
  const job = await (await api(`/v1/jobs/${jobId}`)).json();
  showProgress(job);
  if (job.state === "queued" || job.state === "running") {
    const doing = job.state === "running" ? stageSummary(job) : "";  // "" before the first stage reports
    setStatus(`job ${jobId.slice(0, 8)} ${job.state}${doing ? ": " + doing : ""}`);
  }
  if (job.state === "succeeded") {
    const result = await (await api(`/v1/jobs/${jobId}/result?format=json`)).json();
    showResult(result);
    showDownloads(jobId);
    setStatus(`predicted ${result.predicted_states.length} states in ${result.timings.total.toFixed(2)} s`);
    showWarning(result.warnings || []);
    return true;
  }
  if (job.state === "failed" || job.state === "canceled") {
    setStatus(`job ${job.state}${job.error ? ": " + job.error : ""}`, job.state === "failed");
    return true;
  }
  return false;
}

async function submit(event) {
  event.preventDefault();
  $("#predict-btn").disabled = true;
  $("#results").hidden = true;
  $("#play").hidden = true;
  showWarning([]);
  try {
    const { blob, name } = await clipBlob();
    const form = new FormData();
    form.append("file", blob, name);
    form.append("horizon", $("#horizon").value || "8");
    if ($("#stride").value) form.append("stride", $("#stride").value);
    else if ($("#state-rate").value) form.append("state_rate", $("#state-rate").value);
    form.append("seed", $("#seed").value || "0");
    if ($("#steps").value) form.append("steps", $("#steps").value);
    setStatus(`uploading ${name}…`);
    const job = await (await api("/v1/jobs", { method: "POST", body: form })).json();
    current.jobId = job.id;
    setStatus(`job ${job.id.slice(0, 8)} queued`);
    $("#cancel-btn").hidden = false;
    // Poll with back-off: 250 ms, then 1.5x longer each time, at most 2 s (a short job answers at once, a
    // long one does not flood the access log).
    for (let wait = 250; ; wait = Math.min(2000, wait * 1.5)) {
      if (await poll(job.id)) break;
      await new Promise((r) => setTimeout(r, wait));
    }
  } catch (err) {
    setStatus(err.message, true);
  } finally {
    $("#predict-btn").disabled = false;
    $("#cancel-btn").hidden = true;
  }
}

async function cancel() {
  if (!current.jobId) return;
  try { await api(`/v1/jobs/${current.jobId}`, { method: "DELETE" }); } catch (err) { setStatus(err.message, true); }
}

document.addEventListener("DOMContentLoaded", () => {
  $("#api-key").value = localStorage.getItem("semworld-key") || "";
  $("#predict-form").addEventListener("submit", submit);
  $("#cancel-btn").addEventListener("click", cancel);
  $("#play-btn").addEventListener("click", startPlay);
  $("#play-restart").addEventListener("click", startPlay);
  $("#plan-form").addEventListener("submit", planPlay);
  document.addEventListener("keydown", playKey);
  loadSamples();
});
