// semworld web page: upload a clip (or pick a sample) as a job, follow its progress, show observed and
// predicted frames with their states, and re-roll the future from an edited state through /v1/rollout.
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
    row.innerHTML = `<span class="name">${stage}</span><progress max="1" value="${frac}"></progress>` +
      `<span class="count">${p.done}/${p.total}</span>`;
    box.appendChild(row);
  }
}

function frameCard(src, state, label, editable, index) {
  const card = document.createElement("figure");
  card.className = "frame";
  const img = document.createElement("img");
  img.alt = state;
  if (src) img.src = `data:image/png;base64,${src}`;
  card.appendChild(img);
  const cap = document.createElement("figcaption");
  const t = document.createElement("span");
  t.className = "t";
  t.textContent = label;
  cap.appendChild(t);
  if (editable) {
    const area = document.createElement("textarea");
    area.className = "state";
    area.value = state;
    area.rows = 3;
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
  card.appendChild(cap);
  return card;
}

function showResult(result) {
  current.observed = result.observed_states;
  current.predicted = result.predicted_states;
  current.predictedFrames = result.frames;
  current.observedFrames = result.observed_frames || [];
  render();
}

function render() {
  $("#results").hidden = false;
  const obs = $("#observed");
  obs.innerHTML = "";
  current.observed.forEach((s, i) => obs.appendChild(frameCard(current.observedFrames[i], s, `t=${i}`, false)));
  const pred = $("#predicted");
  pred.innerHTML = "";
  const n = current.observed.length;
  current.predicted.forEach((s, j) =>
    pred.appendChild(frameCard(current.predictedFrames[j], s, `t=${n + j}`, true, j)));
}

async function reroll(index, edited) {
  edited = edited.trim();
  if (!edited) { setStatus("a state cannot be empty", true); return; }
  const history = [...current.observed, ...current.predicted.slice(0, index), edited];
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
    render();
    setStatus(`re-rolled from t=${current.observed.length + index} in ${res.timings.total.toFixed(2)} s`);
  } catch (err) {
    setStatus(`re-roll failed: ${err.message}`, true);
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

async function poll(jobId) {
  const job = await (await api(`/v1/jobs/${jobId}`)).json();
  showProgress(job);
  if (job.state === "succeeded") {
    const result = await (await api(`/v1/jobs/${jobId}/result?format=json`)).json();
    showResult(result);
    setStatus(`predicted ${result.predicted_states.length} states in ${result.timings.total.toFixed(2)} s`);
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
  try {
    const { blob, name } = await clipBlob();
    const form = new FormData();
    form.append("file", blob, name);
    form.append("horizon", $("#horizon").value || "8");
    if ($("#stride").value) form.append("stride", $("#stride").value);
    form.append("seed", $("#seed").value || "0");
    if ($("#steps").value) form.append("steps", $("#steps").value);
    setStatus(`uploading ${name}…`);
    const job = await (await api("/v1/jobs", { method: "POST", body: form })).json();
    current.jobId = job.id;
    setStatus(`job ${job.id.slice(0, 8)} queued`);
    $("#cancel-btn").hidden = false;
    for (;;) {
      if (await poll(job.id)) break;
      await new Promise((r) => setTimeout(r, 300));
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
  // World clips hold one state every 5 frames; pick that stride for them.
  $("#sample").addEventListener("change", () => {
    if ($("#sample").value.includes("world-") && !$("#stride").value) $("#stride").value = "5";
  });
  loadSamples();
});
