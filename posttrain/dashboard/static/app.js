// posttrain dashboard: polls the JSON endpoints and redraws the current view; the plots
// are Plotly.react calls on the series the server sends (already downsampled there).
"use strict";
const POLL_MS = 2000;
const view = document.getElementById("view");
let timer = null, built = null, runsCache = [], openId = null, lastDrawn = null;

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
    <td>${fmt(s.reward)}</td><td>${fmt(s.tokens, 1)}</td>
    <td>${s.flags ? `<a class="flagged" href="#health">${s.flags} flag${s.flags > 1 ? "s" : ""}</a>` : ""}</td></tr>`).join("");
  return `<table class="stages"><thead><tr><th>stage</th><th>type</th><th>status</th><th>duration</th><th>step</th>
    <th>reward</th><th>tokens</th><th>health</th></tr></thead><tbody>${rows}</tbody></table>`;
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
    <p class="muted">${p.rows} metrics rows${p.run_id ? " · run " + esc(p.run_id) : ""}${p.disk ? " · checkpoints on disk: " + esc(p.disk.text) : ""}</p>
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
  const drawnAs = `${key}|${series.map((s) => `${s.steps}:${s.last_step}`)}`;
  if (drawnAs === lastDrawn) return;  // no new rows since the last poll: leave the plots as they are
  lastDrawn = drawnAs;
  const plots = document.getElementById("plots");
  const titles = [];  // every run's plots, in the server's order (curated first, then by prefix)
  for (const s of series) for (const t of Object.keys(s.plots)) if (!titles.includes(t)) titles.push(t);
  const drawn = [];
  for (const title of titles) {  // every div first, then the plots: sizes come from the final grid
    const traces = [];
    for (const s of series) for (const [name, xy] of Object.entries(s.plots[title] || {})) {
      traces.push({x: xy.x, y: xy.y, name: series.length > 1 ? `${s.name}: ${name}` : name, type: "scatter",
        mode: xy.x.length > 200 ? "lines" : "lines+markers"});
    }
    let div = plots.querySelector(`[data-title="${CSS.escape(title)}"]`);
    if (!div) { div = document.createElement("div"); div.className = "plot"; div.dataset.title = title; plots.appendChild(div); }
    drawn.push([div, traces, title]);
  }
  plots.querySelectorAll(".plot").forEach((d) => { if (!titles.includes(d.dataset.title)) d.remove(); });
  drawn.forEach(([div], i) => { if (plots.children[i] !== div) plots.insertBefore(div, plots.children[i]); });
  for (const [div, traces, title] of drawn) {
    const xs = traces.flatMap((t) => [t.x[0], t.x[t.x.length - 1]]).filter((v) => v !== undefined);
    const few = xs.length && Math.max(...xs) - Math.min(...xs) <= 10;  // whole steps, not 1, 1, 2, 2
    Plotly.react(div, traces, {title: {text: title}, margin: {t: 40, r: 10, l: 50, b: 40},
      xaxis: {title: {text: "step"}, tickformat: "d", ...(few ? {dtick: 1} : {})}, legend: {orientation: "h"}},
      {displaylogo: false, responsive: true});
  }
  document.getElementById("job-missing").innerHTML = titles.length ? "" : `<p class="muted">this job logged no numbers yet</p>`;
}

// ------------------------------------------------------------ health view

const stepText = (ranges) => ranges.map(([a, b]) => (a === b ? `${a}` : `${a}-${b}`)).join(",");

function samplesLink(run, j, c) {
  if (!j.rollouts) return `<span class="muted">no saved samples</span>`;
  const text = stepText(c.steps);
  const q = text.length <= 300 ? {run, stage: j.rollouts, steps: text} : {run, stage: j.rollouts, flag: c.name};
  return `<a class="samples-link" href="#rewards?${new URLSearchParams(q)}">samples of these steps</a>`;
}

function healthJob(run, j) {
  const fired = j.checks.filter((c) => c.count > 0);
  const name = j.job ? `${j.stage} / ${j.job}` : j.stage;
  const link = `<a href="#job?stage=${encodeURIComponent(j.stage)}&job=${encodeURIComponent(j.job || "")}&runs=${run}">${esc(name)}</a>`;
  const quiet = j.checks.filter((c) => c.enabled && c.watched && !c.count).map((c) => esc(c.title));
  const unwatched = [...new Set(j.checks.filter((c) => c.enabled && !c.watched).map((c) => esc(c.metric)))];
  const rows = fired.map((c) => `<tr class="flag" data-flag="${esc(c.name)}">
    <td><b>${esc(c.title)}</b><br><span class="muted">${esc(c.meaning)}</span></td>
    <td><code>${esc(c.metric)}</code> ${esc(c.rule)}</td>
    <td>${c.count} step${c.count > 1 ? "s" : ""}: <span class="steps">${esc(stepText(c.steps.slice(0, 20)))}${c.steps.length > 20 ? ", …" : ""}</span></td>
    <td>${fmt(c.last_value, 4)} <span class="muted">at step ${fmt(c.last_step)}</span></td>
    <td>${samplesLink(run, j, c)}</td></tr>`).join("");
  return `<section class="card health-job ${fired.length ? "has-flags" : "clear"}" data-stage="${esc(j.stage)}" data-job="${esc(j.job || "")}">
    <h4>${link} <span class="muted">${j.steps} steps · ${j.source === "logged" ? "flags logged by the run" : "checked here from its metrics"}</span></h4>
    ${rows ? `<table class="flags"><thead><tr><th>check</th><th>rule</th><th>fired at</th><th>last value</th><th></th></tr></thead><tbody>${rows}</tbody></table>`
      : `<p class="ok">no check fired</p>`}
    <p class="muted">${quiet.length ? "quiet: " + quiet.join(", ") : ""}${unwatched.length ? ` · not logged by this job: ${unwatched.join(", ")}` : ""}</p></section>`;
}

function healthSummary(h) {
  const checks = h.jobs.length ? h.jobs[0].checks : [];
  const head = checks.map((c) => `<th title="${esc(c.title)}: ${esc(c.metric)} ${esc(c.rule)}">${esc(c.name.replace(/_/g, " "))}</th>`).join("");
  const rows = h.jobs.map((j) => `<tr><td>${esc(j.job ? `${j.stage} / ${j.job}` : j.stage)}</td>${j.checks.map((c) =>
    c.count ? `<td class="hot" title="${esc(c.title)}">${c.count}</td>` : `<td class="${c.enabled && c.watched ? "quiet" : "na"}">${c.enabled && c.watched ? "·" : ""}</td>`).join("")}</tr>`).join("");
  return `<div class="card"><table class="health-summary"><thead><tr><th>job</th>${head}</tr></thead><tbody>${rows}</tbody></table>
    <p class="muted">steps flagged per job and check (· checked, quiet; blank: not logged by the job or turned off); thresholds: the run's <code>health:</code> section</p></div>`;
}

function healthDetails(h) {  // a card per job with flags; the quiet jobs in one line
  const flagged = h.jobs.filter((j) => j.checks.some((c) => c.count > 0));
  const quiet = h.jobs.filter((j) => !flagged.includes(j)).map((j) => esc(j.job ? `${j.stage} / ${j.job}` : j.stage));
  return flagged.map((j) => healthJob(h.run, j)).join("") +
    (quiet.length ? `<p class="ok quiet-jobs">no check fired: ${quiet.join(", ")}</p>` : "");
}

async function healthView() {
  const data = await api("api/health");
  view.innerHTML = data.map((h) => `<h3>${esc(h.name)}</h3>${missing(h.missing)}
    ${h.config_problem ? `<p class="missing">${esc(h.config_problem)}</p>` : ""}
    ${h.jobs.length ? healthSummary(h) + healthDetails(h) : `<p class="muted">no metrics rows yet</p>`}`).join("");
}

// ------------------------------------------------------------ eval view

const EFFORTS = ["max", "high", "low"], DOMAINS = ["general", "coding", "agent"];
const f3 = (v) => (v === null || v === undefined) ? "–" : v.toFixed(3);

function heatColor(v, kind) {  // score in [0, 1]: white to green; difference: red below 0, blue above
  if (v === null || v === undefined) return "#f0f2f5";
  if (kind === "difference") {
    const a = Math.min(Math.abs(v), 1);
    return v < 0 ? `rgba(207, 34, 46, ${0.1 + 0.6 * a})` : `rgba(9, 105, 218, ${0.1 + 0.6 * a})`;
  }
  return `rgba(26, 127, 55, ${0.08 + 0.72 * Math.min(Math.max(v, 0), 1)})`;
}

function heatCell(c, kind) {
  const at = `data-domain="${c.domain}" data-effort="${c.effort}"`;
  if (kind === "difference") {
    const has = c.diff !== undefined && c.diff !== null;
    return `<div class="heat-cell" ${at} style="background:${heatColor(has ? c.diff : null, kind)}">${has
      ? `<b class="value">${c.diff > 0 ? "+" : ""}${f3(c.diff)}</b>${c.diff_se !== null ? ` <span class="se">± ${f3(c.diff_se)}</span>` : ""}
        <br><span class="muted">${f3(c.student)} vs ${f3(c.teacher)}</span>` : "–"}</div>`;
  }
  const has = c.score !== undefined && c.score !== null;
  const overlap = c.overlap !== null && c.overlap !== undefined ? ` · overlap ${fmt(c.overlap)}` : "";
  const tip = has ? `${c.checkpoint}: n ${c.n ?? "?"}, unscored ${c.unscored ?? "?"}${overlap}` : "not evaluated";
  return `<div class="heat-cell" ${at} title="${esc(tip)}" style="background:${heatColor(has ? c.score : null, kind)}">${has
    ? `<b class="value">${f3(c.score)}</b>${c.score_se !== null && c.score_se !== undefined ? ` <span class="se">± ${f3(c.score_se)}</span>` : ""}
      <br><span class="muted">${fmt(c.mean_tokens, 1)} tok · n ${fmt(c.n)}${c.unscored ? ` · ${c.unscored} unscored` : ""}${overlap}</span>` : "–"}</div>`;
}

function heatmap(g) {
  let html = `<div class="head"></div>` + EFFORTS.map((e) => `<div class="head">${e}</div>`).join("");
  for (const d of DOMAINS) {
    html += `<div class="head">${d}</div>`;
    for (const e of EFFORTS) html += heatCell(g.cells.find((c) => c.domain === d && c.effort === e) || {domain: d, effort: e}, g.kind);
  }
  return `<div class="card heat" data-role="${esc(g.role)}" data-kind="${esc(g.kind)}"><h4>${esc(g.title)}</h4><div class="heat-grid">${html}</div></div>`;
}

async function evalView() {
  const data = await api("api/eval");
  view.innerHTML = data.map((e) => {
    if (e.missing.length) return `<section class="card"><h3>${esc(e.name)}</h3>${missing(e.missing)}<p class="muted">written by the eval stage</p></section>`;
    return `<section><h3>${esc(e.name)}</h3><p class="muted">score in [0, 1] ± its standard error, mean response tokens, tasks scored (n)</p>
      <div class="heats">${e.grids.map(heatmap).join("")}</div></section>`;
  }).join("");
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

const FILTERS = ["run", "stage", "steps", "min", "max", "source", "criterion", "flag", "page"];

async function rewardsView(params) {
  runsCache = runsCache.length ? runsCache : await api("api/runs");
  const run = params.get("run") || "0";
  const steps = params.get("steps") || params.get("step") || "";
  const q = new URLSearchParams({run, stage: params.get("stage") || "", steps, min: params.get("min") || "",
    max: params.get("max") || "", source: params.get("source") || "", criterion: params.get("criterion") || "",
    flag: params.get("flag") || "", page: params.get("page") || "0"});
  const data = await api(`api/samples?${q}`);
  const key = `rewards|${q}|${data.stages}|${data.sources}`;
  const update = (extra = {}) => go("rewards", Object.fromEntries(Object.entries({...Object.fromEntries(FILTERS.filter((k) => k !== "page" && k !== "flag")
    .map((k) => [k, document.getElementById(`f-${k}`).value])), flag: params.get("flag") || "", ...extra}).filter(([, v]) => v !== "")));
  if (built !== key) {
    const opt = (list, cur, all) => (all ? `<option value="">${all}</option>` : "") + (cur && !list.includes(cur) ? [...list, cur] : list).map((v) => `<option ${String(v) === cur ? "selected" : ""} value="${esc(v)}">${esc(v)}</option>`).join("");
    view.innerHTML = `<div class="controls">
      <label>run <select id="f-run">${runsCache.map((r) => `<option value="${r.run}" ${String(r.run) === run ? "selected" : ""}>${esc(r.name)}</option>`).join("")}</select></label>
      <label>stage <select id="f-stage">${opt(data.stages, data.stage)}</select></label>
      <label>steps <input id="f-steps" type="text" value="${esc(steps)}" placeholder="3,7-9"></label>
      <label>reward ≥ <input id="f-min" type="number" step="0.1" value="${esc(params.get("min") || "")}"></label>
      <label>≤ <input id="f-max" type="number" step="0.1" value="${esc(params.get("max") || "")}"></label>
      <label>source <select id="f-source">${opt(data.sources, params.get("source") || "", "any")}</select></label>
      <label>criterion <input id="f-criterion" type="text" value="${esc(params.get("criterion") || "")}" placeholder="rubric text"></label>
      ${params.get("flag") ? `<span class="chip" id="flag-chip">steps where health/${esc(params.get("flag"))} fired <a href="#" id="flag-clear">✕</a></span>` : ""}
      <span class="muted" id="matched"></span>
      <span class="pager"><button id="newer">‹ newer</button> <span id="page-of"></span> <button id="older">older ›</button></span></div>${missing(data.missing)}
      <div class="split"><div class="card samples-list"><table id="samples"><thead><tr><th>id</th><th>step</th><th>source</th><th>reward</th><th>rubric</th><th>reason</th></tr></thead><tbody></tbody></table></div>
      <div class="card" id="sample-detail"><p class="muted">pick a sample</p></div></div>`;
    view.querySelectorAll(".controls select, .controls input").forEach((el) => (el.onchange = () => update()));
    const clear = document.getElementById("flag-clear");
    if (clear) clear.onclick = (ev) => { ev.preventDefault(); params.delete("flag"); update({flag: ""}); };
    built = key;
  }
  const page = data.page || 0, pages = data.pages || 1;
  document.getElementById("newer").disabled = page <= 0;
  document.getElementById("older").disabled = page >= pages - 1;
  document.getElementById("newer").onclick = () => update({page: String(page - 1)});
  document.getElementById("older").onclick = () => update({page: String(page + 1)});
  document.getElementById("page-of").textContent = `page ${page + 1} of ${pages}`;
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

const VIEWS = {pipeline: pipelineView, job: jobView, health: healthView, eval: evalView, rewards: rewardsView};

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
window.addEventListener("hashchange", () => { built = null; lastDrawn = null; document.getElementById("updated").textContent = "loading"; refresh(); });
refresh();
