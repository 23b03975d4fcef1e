// posttrain dashboard: polls the JSON endpoints and redraws the current view; the plots
// are Plotly.react calls on the series the server sends.
"use strict";
const POLL_MS = 2000;
const view = document.getElementById("view");
let timer = null, built = null, runsCache = [], openId = null;

const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
const fmt = (v, d = 3) => (v === null || v === undefined || v === "") ? "–" : (typeof v === "number" ? (Number.isInteger(v) ? String(v) : v.toFixed(d)) : esc(v));
const dur = (s) => (s === null || s === undefined) ? "–" : (s >= 60 ? `${Math.floor(s / 60)}m${String(Math.round(s % 60)).padStart(2, "0")}s` : `${Math.round(s)}s`);
const missing = (list) => list && list.length ? `<p class="missing">missing: ${list.map(esc).join(", ")}</p>` : "";

function route() {
  const [name, query] = (location.hash.slice(1) || "pipeline").split("?");
  return {name, params: new URLSearchParams(query || "")};
}
function go(name, params) { location.hash = `${name}?${new URLSearchParams(params)}`; }

async function api(path) {
  const res = await fetch(path, {credentials: "same-origin"});
  if (!res.ok) throw new Error(`${path}: ${res.status} ${await res.text()}`);
  return res.json();
}

// ------------------------------------------------------------ pipeline view

function stageTable(p) {
  const rows = p.stages.map((s) => `<tr data-stage="${esc(s.name)}">
    <td><a href="#job?stage=${encodeURIComponent(s.name)}&runs=${p.run}">${esc(s.name)}</a></td><td>${esc(s.type)}</td>
    <td class="status-${esc(s.status)}">${esc(s.status)}</td><td>${dur(s.seconds)}</td>
    <td>${Object.keys(s.jobs).length ? "jobs: " + Object.entries(s.jobs).map(([k, n]) => `${n} ${esc(k)}`).join(", ") : fmt(s.step)}</td>
    <td>${fmt(s.reward)}</td><td>${fmt(s.tokens, 1)}</td></tr>`).join("");
  return `<table class="stages"><thead><tr><th>stage</th><th>type</th><th>status</th><th>duration</th><th>step</th>
    <th>reward</th><th>tokens</th></tr></thead><tbody>${rows}</tbody></table>`;
}

function expertGrid(p) {
  if (!p.experts) return `<p class="muted">no experts stage in this run</p>`;
  const efforts = ["max", "high", "low"], domains = ["general", "coding", "agent"];
  let html = `<div class="head"></div>` + efforts.map((e) => `<div class="head">${e}</div>`).join("");
  for (const d of domains) {
    html += `<div class="head">${d}</div>`;
    for (const e of efforts) {
      const c = p.experts.cells.find((x) => x.domain === d && x.effort === e);
      html += `<div class="cell ${esc(c.status)}" data-job="${esc(c.job)}">
        <a href="#job?stage=${encodeURIComponent(p.experts.stage)}&job=${encodeURIComponent(c.job)}&runs=${p.run}">${esc(c.job)}</a><br>
        <span class="status-${esc(c.status)}">${esc(c.status)}</span> · ${dur(c.seconds)}<br>
        step ${fmt(c.step)} · reward <b class="reward">${fmt(c.reward)}</b><br>
        tokens ${fmt(c.tokens, 1)} / budget ${fmt(c.budget, 0)}</div>`;
    }
  }
  return `<h4>expert jobs of stage ${esc(p.experts.stage)}</h4><div class="expert-grid">${html}</div>`;
}

async function pipelineView() {
  const data = await api("api/pipeline");
  view.innerHTML = `<div class="runs">${data.map((p) => `<section class="card run-column" data-run="${p.run}">
    <h3>${esc(p.name)} <span class="muted">${esc(p.path)}</span></h3>${missing(p.missing)}
    <p class="muted">${p.rows} metrics rows${p.run_id ? " · run " + esc(p.run_id) : ""}</p>
    ${stageTable(p)}${expertGrid(p)}</section>`).join("")}</div>`;
}

// ------------------------------------------------------------ job view

async function jobView(params) {
  runsCache = await api("api/runs");
  const jobs = [];
  for (const r of runsCache) for (const j of r.jobs) {
    if (!jobs.some((x) => x.stage === j.stage && x.job === j.job)) jobs.push(j);
  }
  if (!jobs.length) { view.innerHTML = missing(["metrics.jsonl rows"]); built = null; return; }
  const stage = params.get("stage") || jobs[0].stage, job = params.get("job") || "";
  const chosen = (params.get("runs") || "0").split(",").filter((x) => x !== "");
  const key = `job|${stage}|${job}|${chosen}`;
  if (built !== key) {
    const options = jobs.map((j) => { const v = `${j.stage}|${j.job || ""}`;
      return `<option value="${esc(v)}" ${v === `${stage}|${job}` ? "selected" : ""}>${esc(j.job ? `${j.stage} / ${j.job}` : j.stage)}</option>`; }).join("");
    const boxes = runsCache.map((r) => `<label><input type="checkbox" class="run-pick" value="${r.run}" ${chosen.includes(String(r.run)) ? "checked" : ""}>${esc(r.name)} <span class="muted">${esc(r.path)}</span></label>`).join("");
    view.innerHTML = `<div class="controls"><label>job <select id="job-pick">${options}</select></label>${boxes}
      <span>last step: <b id="last-step">–</b></span></div><div id="job-missing"></div><div class="plots" id="plots"></div>`;
    const update = () => { const [s, j] = document.getElementById("job-pick").value.split("|");
      const rs = [...document.querySelectorAll(".run-pick:checked")].map((b) => b.value).join(",") || "0";
      go("job", {stage: s, job: j, runs: rs}); };
    document.getElementById("job-pick").onchange = update;
    document.querySelectorAll(".run-pick").forEach((b) => (b.onchange = update));
    built = key;
  }
  const series = await api(`api/job?stage=${encodeURIComponent(stage)}&job=${encodeURIComponent(job)}&runs=${chosen.join(",")}`);
  document.getElementById("last-step").textContent = series.map((s) => fmt(s.last_step)).join(" / ");
  const plots = document.getElementById("plots");
  const titles = Object.keys(series[0].plots);
  const empty = [], drawn = [];
  for (const title of titles) {  // every div first, then the plots: sizes come from the final grid
    const traces = [];
    for (const s of series) for (const [name, xy] of Object.entries(s.plots[title])) {
      traces.push({x: xy.x, y: xy.y, name: series.length > 1 ? `${s.name}: ${name}` : name, mode: "lines+markers", type: "scatter"});
    }
    let div = plots.querySelector(`[data-title="${title}"]`);
    if (!traces.length) { empty.push(title); if (div) div.remove(); continue; }
    if (!div) { div = document.createElement("div"); div.className = "plot"; div.dataset.title = title; plots.appendChild(div); }
    drawn.push([div, traces, title]);
  }
  for (const [div, traces, title] of drawn) {
    Plotly.react(div, traces, {title: {text: title}, margin: {t: 40, r: 10, l: 50, b: 40},
      xaxis: {title: {text: "step"}, tickformat: "d"}, legend: {orientation: "h"}}, {displaylogo: false, responsive: true});
  }
  document.getElementById("job-missing").innerHTML = empty.length ? `<p class="muted">no data in this job for: ${empty.map(esc).join(", ")}</p>` : "";
}

// ------------------------------------------------------------ eval view

async function evalView() {
  const data = await api("api/eval");
  view.innerHTML = `<div class="runs">${data.map((e) => {
    if (e.missing.length) return `<section class="card"><h3>${esc(e.name)}</h3>${missing(e.missing)}<p class="muted">written by the eval stage</p></section>`;
    const student = e.checkpoints.filter((c) => c.role === "student"), sft = e.checkpoints.filter((c) => c.role === "sft");
    const cols = e.checkpoints.map((c) => `<th>${esc(c.role)}<br><span class="muted">${esc(c.checkpoint.split("/").slice(-3).join("/"))}</span></th>`).join("");
    const rows = e.cells.map((cell) => {
      const teacher = Object.entries(cell.scores).find(([, v]) => v.role === "expert");
      const score = (c) => { const v = cell.scores[c.checkpoint]; return v ? `${fmt(v.score)} <span class="muted">${fmt(v.mean_tokens, 1)} tok</span>` : "–"; };
      return `<tr><td>${cell.domain}</td><td>${cell.effort}</td>
        <td>${student.map(score).join(" ") || "–"}</td><td>${teacher ? `${fmt(teacher[1].score)} <span class="muted">${fmt(teacher[1].mean_tokens, 1)} tok</span>` : "–"}</td>
        <td>${sft.map(score).join(" ") || "–"}</td>${e.checkpoints.map((c) => `<td>${score(c)}</td>`).join("")}</tr>`;
    }).join("");
    return `<section class="card"><h3>${esc(e.name)}</h3><table class="eval"><thead><tr><th>domain</th><th>effort</th>
      <th>student</th><th>teacher</th><th>SFT</th>${cols}</tr></thead><tbody>${rows}</tbody></table></section>`;
  }).join("")}</div>`;
}

// ------------------------------------------------------------ reward debugger

function rubricHtml(entry) {
  if (!entry) return `<p class="muted">not a GRM sample (no scoreboard entry)</p>`;
  const verdicts = Object.fromEntries((entry.verdicts || []).map((v) => [v.criterion, v]));
  const items = (entry.rubric || []).map((c, j) => { const v = verdicts[j] || {};
    return `<tr class="criterion"><td>${j}</td><td>${esc(c.kind)}</td><td>${fmt(c.weight)}</td><td>${esc(c.text)}</td>
      <td class="verdict-${esc(v.verdict)}">${esc(v.verdict || "none")}</td><td>${fmt(v.score)}</td><td>${esc(v.reason)}</td></tr>`; }).join("");
  return `<h4>GRM scoreboard: ${esc(entry.status)} · score ${fmt(entry.score)} · judge ${esc(entry.judge_model)}</h4>
    <p>${esc(entry.reason)}</p>
    <table class="rubric"><thead><tr><th>#</th><th>kind</th><th>w</th><th>criterion</th><th>verdict</th><th>c</th><th>reason</th></tr></thead>
    <tbody>${items || `<tr><td colspan="7">no rubric</td></tr>`}</tbody></table>`;
}

async function openSample(run, stage, id) {
  const s = await api(`api/sample?run=${run}&stage=${encodeURIComponent(stage)}&id=${encodeURIComponent(id)}`);
  const r = s.row;
  document.getElementById("sample-detail").innerHTML = `<h3>sample ${esc(r.sample)} · step ${fmt(r.step)} · ${esc(r.family)}</h3>
    ${(r.messages || []).map((m) => `<b>${esc(m.role)}</b><pre>${esc(m.content)}</pre>`).join("")}
    <b>response</b> <span class="muted">${fmt(r.response_tokens)} tokens, ${esc(r.finish_reason)}${r.budget ? ", budget " + fmt(r.budget) : ""}</span>
    <pre class="response">${esc(r.response)}</pre>
    <p>reward <b>${r.ok === false ? "unscored" : fmt(r.reward)}</b> · source ${esc(r.source)}<br>${esc(r.reason)}</p>${rubricHtml(s.scoreboard)}`;
}

async function rewardsView(params) {
  runsCache = runsCache.length ? runsCache : await api("api/runs");
  const run = params.get("run") || "0";
  const q = new URLSearchParams({run, stage: params.get("stage") || "", step: params.get("step") || "", min: params.get("min") || "",
    max: params.get("max") || "", source: params.get("source") || "", criterion: params.get("criterion") || ""});
  const data = await api(`api/samples?${q}`);
  const key = `rewards|${q}|${data.stages}|${data.sources}`;
  if (built !== key) {
    const opt = (list, cur, all) => (all ? `<option value="">${all}</option>` : "") + (cur && !list.includes(cur) ? [...list, cur] : list).map((v) => `<option ${String(v) === cur ? "selected" : ""} value="${esc(v)}">${esc(v)}</option>`).join("");
    view.innerHTML = `<div class="controls">
      <label>run <select id="f-run">${runsCache.map((r) => `<option value="${r.run}" ${String(r.run) === run ? "selected" : ""}>${esc(r.name)}</option>`).join("")}</select></label>
      <label>stage <select id="f-stage">${opt(data.stages, data.stage)}</select></label>
      <label>step <input id="f-step" type="number" value="${esc(params.get("step") || "")}"></label>
      <label>reward ≥ <input id="f-min" type="number" step="0.1" value="${esc(params.get("min") || "")}"></label>
      <label>≤ <input id="f-max" type="number" step="0.1" value="${esc(params.get("max") || "")}"></label>
      <label>source <select id="f-source">${opt(data.sources, params.get("source") || "", "any")}</select></label>
      <label>criterion <input id="f-criterion" type="text" value="${esc(params.get("criterion") || "")}" placeholder="rubric text"></label>
      <span class="muted" id="matched"></span></div>${missing(data.missing)}
      <div class="split"><div class="card"><table id="samples"><thead><tr><th>id</th><th>step</th><th>source</th><th>reward</th><th>rubric</th><th>reason</th></tr></thead><tbody></tbody></table></div>
      <div class="card" id="sample-detail"><p class="muted">pick a sample</p></div></div>`;
    const update = () => go("rewards", Object.fromEntries(["run", "stage", "step", "min", "max", "source", "criterion"]
      .map((k) => [k, document.getElementById(`f-${k}`).value]).filter(([, v]) => v !== "")));
    view.querySelectorAll(".controls select, .controls input").forEach((el) => (el.onchange = update));
    built = key;
  }
  document.getElementById("matched").textContent = data.missing.length ? "" : `${data.matched} of ${data.total} samples`;
  const body = document.querySelector("#samples tbody");
  body.innerHTML = data.samples.map((s) => `<tr data-sample="${esc(s.sample)}" class="${s.sample === openId ? "open" : ""}"><td>${esc(s.sample)}</td><td>${fmt(s.step)}</td>
    <td>${esc(s.source)}</td><td>${s.ok === false ? "unscored" : fmt(s.reward)}</td><td>${s.criteria ? s.criteria + " criteria" : ""}</td><td>${esc(s.reason)}</td></tr>`).join("");
  body.querySelectorAll("tr").forEach((tr) => (tr.onclick = () => {
    body.querySelectorAll("tr.open").forEach((x) => x.classList.remove("open")); tr.classList.add("open");
    openId = tr.dataset.sample;
    openSample(run, data.stage, tr.dataset.sample); }));
}

// ------------------------------------------------------------ the loop

const VIEWS = {pipeline: pipelineView, job: jobView, eval: evalView, rewards: rewardsView};

async function refresh() {
  clearTimeout(timer);
  const {name, params} = route();
  document.querySelectorAll("header nav a").forEach((a) => a.classList.toggle("active", a.id === `nav-${name}`));
  try {
    await (VIEWS[name] || pipelineView)(params);
    document.getElementById("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
  } catch (err) {
    document.getElementById("updated").textContent = `error: ${err.message}`;
  }
  timer = setTimeout(refresh, POLL_MS);
}
window.addEventListener("hashchange", () => { built = null; document.getElementById("updated").textContent = "loading"; refresh(); });
refresh();
