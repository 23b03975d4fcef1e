// posttrain dashboard: polls the JSON endpoints and redraws the current view; the plots
// are Plotly.react calls on the series the server sends (already downsampled there).
"use strict";
const POLL_MS = 2000;
const view = document.getElementById("view");
let timer = null, built = null, runsCache = [], openId = null, lastDrawn = null;

const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
const fmt = (v, d = 3) => (v === null || v === undefined || v === "") ? "–" : (typeof v === "number" ? (Number.isInteger(v) ? String(v) : v.toFixed(d)) : esc(v));
function dur(s) {  // seconds as 21h51m18s, 5m03s, 42s
  if (typeof s !== "number" || !Number.isFinite(s)) return "–";
  const t = Math.round(s), h = Math.floor(t / 3600), m = Math.floor((t % 3600) / 60), sec = t % 60;
  const two = (n) => String(n).padStart(2, "0");
  return h ? `${h}h${two(m)}m${two(sec)}s` : m ? `${m}m${two(sec)}s` : `${sec}s`;
}
const missing = (list) => list && list.length ? `<p class="missing">missing: ${list.map(esc).join(", ")}</p>` : "";
const plural = (n, one, many) => `${n} ${n === 1 ? one : many}`;

function problems(p) {  // files that cannot be read, and rows skipped: named on every view
  if (!p) return "";
  const files = (p.files || []).map((f) => `<li class="file-problem" data-file="${esc(f.file)}"><b>${esc(f.file)}</b>: ${esc(f.why)}</li>`).join("");
  const rows = (p.bad_rows || []).map((b) => `<li class="bad-file" data-file="${esc(b.file)}" data-count="${b.count}"><b>${esc(b.file)}</b>: ${plural(b.count, "row", "rows")} skipped
    <ul>${b.examples.map((e) => `<li class="bad-row">line ${esc(e.line)}: ${esc(e.why)}</li>`).join("")}${b.count > b.examples.length ? `<li>… and ${b.count - b.examples.length} more</li>` : ""}</ul></li>`).join("");
  if (!files && !rows) return "";
  return `<div class="problems">${files ? `<p><b>unreadable files</b> (what they hold is left out)</p><ul>${files}</ul>` : ""}
    ${rows ? `<p><b>bad rows</b> (skipped; every other row is shown)</p><ul>${rows}</ul>` : ""}</div>`;
}

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

function stageLink(p, s) {
  if (!s.link) return esc(s.name);
  if (s.link.view === "eval") return `<a href="#eval">${esc(s.name)}</a>`;
  return `<a href="#job?${new URLSearchParams({stage: s.link.stage, job: s.link.job, runs: p.run})}">${esc(s.name)}</a>`;
}

function startupCell(phases) {  // seconds to the first step, and each phase's (startup/PHASE_s)
  if (!phases || phases.total === undefined) return `<td class="startup"></td>`;
  const sec = (v) => typeof v === "number" ? `${v.toFixed(1)}s` : "–";
  const parts = Object.entries(phases).filter(([k]) => k !== "total").map(([k, v]) => `${esc(k)} ${sec(v)}`);
  return `<td class="startup" title="${parts.join(", ")}">${sec(phases.total)}<br><small>${parts.join(" · ")}</small></td>`;
}

function stageTable(p) {
  const rows = p.stages.map((s) => `<tr data-stage="${esc(s.name)}">
    <td>${stageLink(p, s)}</td><td>${esc(s.type)}</td>
    <td class="status-${esc(s.status)}">${esc(s.status)}</td><td>${dur(s.seconds)}</td>${startupCell(s.startup)}
    <td>${Object.keys(s.jobs).length ? "jobs: " + Object.entries(s.jobs).map(([k, n]) => `${n} ${esc(k)}`).join(", ") : fmt(s.step)}</td>
    <td>${fmt(s.reward)}</td><td>${fmt(s.tokens, 1)}</td>
    <td>${s.flags ? `<a class="flagged" href="#health">${plural(s.flags, "flagged step", "flagged steps")}</a>` : ""}</td></tr>`).join("");
  return `<table class="stages"><thead><tr><th>stage</th><th>type</th><th>status</th><th>duration</th><th>start-up</th><th>step</th>
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
    <h3>${esc(p.name)} <span class="muted">${esc(p.path)}</span></h3>${missing(p.missing)}${problems(p.problems)}
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
      <span>last step: <b id="last-step">–</b></span></div><div id="job-missing"></div><div id="zero-series"></div><div class="plots" id="plots"></div>`;
    const update = () => { const [s, j] = document.getElementById("job-pick").value.split("|");
      const rs = [...document.querySelectorAll(".run-pick:checked")].map((b) => b.value).join(",") || "0";
      go("job", {stage: s, job: j, runs: rs}); };
    document.getElementById("job-pick").onchange = update;
    document.querySelectorAll(".run-pick").forEach((b) => (b.onchange = update));
    built = key;
  }
  const series = await api(`api/job?stage=${encodeURIComponent(stage)}&job=${encodeURIComponent(job)}&runs=${chosen.join(",")}`);
  document.getElementById("last-step").textContent = series.map((s) => fmt(s.last_step)).join(" / ");
  document.getElementById("job-missing").innerHTML = series.map((s) => problems(s.problems)).join("");
  const drawnAs = `${key}|${series.map((s) => `${s.steps}:${s.last_step}`)}`;
  if (drawnAs === lastDrawn) return;  // no new rows since the last poll: leave the plots as they are
  lastDrawn = drawnAs;
  drawPlots(document.getElementById("plots"), series);
  const drawnKeys = new Set(series.flatMap((s) => Object.values(s.plots).flatMap((p) => Object.keys(p.series))));
  const zero = [...new Set(series.flatMap((s) => s.zero || []))].filter((k) => !drawnKeys.has(k)).sort();
  document.getElementById("zero-series").innerHTML = zero.length
    ? `<p class="zero-series" data-keys="${esc(zero.join(" "))}"><b>${plural(zero.length, "series stays", "series stay")} at 0</b> (not drawn): ${zero.map((k) => `<code>${esc(k)}</code>`).join(", ")}</p>` : "";
  if (!Object.keys(series[0]?.plots || {}).length && !zero.length) {
    document.getElementById("zero-series").innerHTML = `<p class="muted">this job logged no numbers yet</p>`;
  }
}

// 20 colours that stay apart (Tableau 10, then its light and dark variants): no two traces
// of one plot share a colour below 20 traces; past that the dash pattern differs.
const PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f",
  "#79706e", "#1f3b73", "#a0cbe8", "#8cd17d", "#b6992d", "#d37295", "#86bcb6", "#d4a6c8", "#fabfd2", "#499894", "#e49444"];
const DASHES = ["solid", "dash", "dot", "dashdot"];

function axisTitle(unit) { return {text: unit, standoff: 6}; }

function drawPlots(plots, series) {
  const titles = [];  // every run's plots, in the server's order (curated first, then by prefix)
  for (const s of series) for (const t of Object.keys(s.plots)) if (!titles.includes(t)) titles.push(t);
  const drawn = [];
  for (const title of titles) {  // every card first, then the plots: sizes come from the final grid
    const first = series.find((s) => s.plots[title]).plots[title];
    const axes = first.axes;
    const traces = [];
    for (const s of series) {
      const plot = s.plots[title];
      if (!plot) continue;
      for (const [name, xy] of Object.entries(plot.series)) {
        const i = traces.length, right = axes.length > 1 && plot.units[name] === axes[1];
        traces.push({x: xy.x, y: xy.y, name: series.length > 1 ? `${s.name}: ${name}` : name, type: "scatter",
          mode: xy.x.length > 200 ? "lines" : "lines+markers", yaxis: right ? "y2" : "y",
          line: {color: PALETTE[i % PALETTE.length], dash: DASHES[Math.floor(i / PALETTE.length) % DASHES.length], width: 1.6},
          marker: {size: 4}, unit: plot.units[name], hovertemplate: `%{y:.4g} ${esc(plot.units[name])} at step %{x}<extra>${esc(name)}</extra>`});
      }
    }
    let card = plots.querySelector(`.plot-card[data-title="${CSS.escape(title)}"]`);
    if (!card) {
      card = document.createElement("div"); card.className = "plot-card"; card.dataset.title = title;
      card.innerHTML = `<h4 class="plot-title"></h4><div class="plot"></div><div class="legend"></div>`;
      card.querySelector(".plot").dataset.title = title;
      plots.appendChild(card);
    }
    card.querySelector(".plot-title").textContent = title;
    drawn.push([card, traces, axes]);
  }
  plots.querySelectorAll(".plot-card").forEach((d) => { if (!titles.includes(d.dataset.title)) d.remove(); });
  drawn.forEach(([card], i) => { if (plots.children[i] !== card) plots.insertBefore(card, plots.children[i]); });
  for (const [card, traces, axes] of drawn) {
    const div = card.querySelector(".plot");
    const xs = traces.flatMap((t) => [t.x[0], t.x[t.x.length - 1]]).filter((v) => v !== undefined);
    const few = xs.length && Math.max(...xs) - Math.min(...xs) <= 10;  // whole steps, not 1, 1, 2, 2
    const y = {title: axisTitle(axes[0]), exponentformat: "e", automargin: true, zeroline: false};
    const layout = {margin: {t: 8, r: axes.length > 1 ? 10 : 16, l: 10, b: 10}, showlegend: false,
      xaxis: {title: {text: "step", standoff: 4}, tickformat: "d", automargin: true, ...(few ? {dtick: 1} : {})}, yaxis: y};
    if (axes.length > 1) layout.yaxis2 = {...y, title: axisTitle(axes[1]), overlaying: "y", side: "right", showgrid: false};
    Plotly.react(div, traces, layout, {displaylogo: false, responsive: true});
    drawLegend(card.querySelector(".legend"), div, traces, axes);
  }
}

function drawLegend(legend, div, traces, axes) {  // below the plot, never over it; a click hides or shows a trace
  legend.innerHTML = traces.map((t, i) => `<span class="item" data-trace="${i}" title="click: hide or show">
    <i style="border-color:${t.line.color};border-style:${t.line.dash === "solid" ? "solid" : "dashed"}"></i>${esc(t.name)}${axes.length > 1 ? ` <span class="muted">(${esc(t.unit)}, ${t.yaxis === "y2" ? "right" : "left"})</span>` : ""}</span>`).join("");
  legend.querySelectorAll(".item").forEach((item) => (item.onclick = () => {
    const i = Number(item.dataset.trace), hidden = item.classList.toggle("hidden");
    Plotly.restyle(div, {visible: hidden ? "legendonly" : true}, [i]);
  }));
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
  return `<div class="card wide"><table class="health-summary"><thead><tr><th>job</th>${head}</tr></thead><tbody>${rows}</tbody></table>
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
  view.innerHTML = data.map((h) => `<h3>${esc(h.name)}</h3>${missing(h.missing)}${problems(h.problems)}
    ${h.config_problem ? `<p class="missing">${esc(h.config_problem)}</p>` : ""}
    ${h.jobs.length ? healthSummary(h) + healthDetails(h) : `<p class="muted">no metrics rows yet</p>`}`).join("");
}

// ------------------------------------------------------------ eval view

const EFFORTS = ["max", "high", "low"], DOMAINS = ["general", "coding", "agent"];
const f3 = (v) => (v === null || v === undefined) ? "–" : v.toFixed(3);

function heatColor(v, kind) {  // score in [0, 1]: white to green; difference: red below 0, blue above.
  // Light enough at its darkest (alpha 0.45) that the cell's dark text stays readable.
  if (v === null || v === undefined) return "#f0f2f5";
  if (kind === "difference") {
    const a = Math.min(Math.abs(v), 1);
    return v < 0 ? `rgba(207, 34, 46, ${0.08 + 0.37 * a})` : `rgba(9, 105, 218, ${0.08 + 0.37 * a})`;
  }
  return `rgba(26, 127, 55, ${0.06 + 0.39 * Math.min(Math.max(v, 0), 1)})`;
}

function heatCell(c, kind) {
  const at = `data-domain="${c.domain}" data-effort="${c.effort}"`;
  if (kind === "difference") {
    const has = c.diff !== undefined && c.diff !== null;
    return `<div class="heat-cell" ${at} style="background:${heatColor(has ? c.diff : null, kind)}">${has
      ? `<b class="value">${c.diff > 0 ? "+" : ""}${f3(c.diff)}</b>${c.diff_se !== null ? ` <span class="se">± ${f3(c.diff_se)}</span>` : ""}
        <br><span class="detail">${f3(c.student)} vs ${f3(c.teacher)}</span>` : "–"}</div>`;
  }
  const has = c.score !== undefined && c.score !== null;
  const overlap = c.overlap !== null && c.overlap !== undefined ? ` · overlap ${fmt(c.overlap)}` : "";
  const tip = has ? `${c.checkpoint}: n ${c.n ?? "?"}, unscored ${c.unscored ?? "?"}${overlap}` : "not evaluated";
  return `<div class="heat-cell" ${at} title="${esc(tip)}" style="background:${heatColor(has ? c.score : null, kind)}">${has
    ? `<b class="value">${f3(c.score)}</b>${c.score_se !== null && c.score_se !== undefined ? ` <span class="se">± ${f3(c.score_se)}</span>` : ""}
      <br><span class="detail">${fmt(c.mean_tokens, 1)} tok · n ${fmt(c.n)}${c.unscored ? ` · ${c.unscored} unscored` : ""}${overlap}</span>` : "–"}</div>`;
}

function heatmap(g) {
  let html = `<div class="head"></div>` + EFFORTS.map((e) => `<div class="head">${e}</div>`).join("");
  for (const d of DOMAINS) {
    html += `<div class="head">${d}</div>`;
    for (const e of EFFORTS) html += heatCell(g.cells.find((c) => c.domain === d && c.effort === e) || {domain: d, effort: e}, g.kind);
  }
  return `<div class="card heat" data-role="${esc(g.role)}" data-kind="${esc(g.kind)}"><h4>${esc(g.title)}</h4><div class="heat-grid">${html}</div></div>`;
}

function comparisonsTable(list) {  // eval.json's paired differences: the recipe's main result
  if (!list || !list.length) return "";
  const rows = list.map((c) => `<tr class="comparison${c.beyond ? " beyond" : ""}" data-kind="${esc(c.kind)}">
    <td>${esc(c.title)}</td><td><code>${esc(c.a)}</code></td><td><code>${esc(c.b)}</code></td>
    <td class="num"><b class="value">${c.diff > 0 ? "+" : ""}${f3(c.diff)}</b></td><td class="num se">± ${f3(c.se)}</td><td class="num">${fmt(c.n)}</td>
    <td>${c.beyond ? `<span class="mark" title="|difference| > 2 standard errors">beyond 2 SE</span>` : `<span class="muted">within noise</span>`}</td></tr>`).join("");
  return `<div class="card wide"><h4>paired comparisons <span class="muted">(a − b on the same tasks, ± standard error; marked: more than 2 SE from 0)</span></h4>
    <table class="comparisons"><thead><tr><th>comparison</th><th>a</th><th>b</th><th>a − b</th><th>SE</th><th>tasks</th><th></th></tr></thead><tbody>${rows}</tbody></table></div>`;
}

async function evalView() {
  const data = await api("api/eval");
  view.innerHTML = data.map((e) => {
    if (e.note) return `<section class="card"><h3>${esc(e.name)}</h3><p class="no-eval">${esc(e.note)}</p>${problems(e.problems)}</section>`;
    if (e.missing.length) return `<section class="card"><h3>${esc(e.name)}</h3>${missing(e.missing)}${problems(e.problems)}<p class="muted">written by the eval stage</p></section>`;
    return `<section><h3>${esc(e.name)}</h3>${problems(e.problems)}<p class="muted">score in [0, 1] ± its standard error, mean response tokens, tasks scored (n)</p>
      ${comparisonsTable(e.comparisons)}<div class="heats">${e.grids.map(heatmap).join("")}</div></section>`;
  }).join("");
}

// ------------------------------------------------------------ reward debugger

function comparisonsHtml(entry) {
  const rows = (Array.isArray(entry.comparisons) ? entry.comparisons : []).map((c) => {
    const why = c.by === "length cap" ? `over the length cap (${fmt(c.opponent_tokens)} tokens): lost without a judge call`
      : c.error ? `unreadable, left out: ${c.error}` : (Array.isArray(c.reasons) ? c.reasons : []).map((r, k) => `${k ? "as B" : "as A"}: ${r}`).join(" · ");
    return `<tr class="comparison"><td>${fmt(c.win)}</td><td>${fmt(c.as_first)}</td><td>${fmt(c.as_second)}</td>
      <td>${c.orders_agree === undefined ? "" : c.orders_agree ? "yes" : "no"}</td><td>${esc(c.opponent)}</td><td>${esc(why)}</td></tr>`; }).join("");
  return `<h4>GRM scoreboard (pairwise): ${esc(entry.status)} · score ${fmt(entry.score)} · judge ${esc(entry.judge_model)}</h4>
    <p>${esc(entry.reason)}</p><p class="muted">score = 2 × mean win − 1; win = the mean over both orders of P(this response is better)</p>
    <table class="rubric"><thead><tr><th>win</th><th>P as A</th><th>P as B</th><th>orders agree</th><th>opponent</th><th>reasons</th></tr></thead>
    <tbody>${rows || `<tr><td colspan="6">no comparison</td></tr>`}</tbody></table>`;
}

function rubricHtml(entry) {
  if (!entry) return `<p class="muted">not a GRM sample (no scoreboard entry)</p>`;
  if (entry.method === "pairwise") return comparisonsHtml(entry);
  const verdicts = Object.fromEntries((Array.isArray(entry.verdicts) ? entry.verdicts : []).map((v) => [v.criterion, v]));
  const items = (Array.isArray(entry.rubric) ? entry.rubric : []).map((c, j) => { const v = verdicts[j] || {};
    return `<tr class="criterion"><td>${j}</td><td>${esc(c.kind)}</td><td>${fmt(c.weight)}</td><td>${esc(c.text)}</td>
      <td class="verdict-${esc(v.verdict)}">${esc(v.verdict || "none")}</td><td>${fmt(v.score)}</td><td>${esc(v.reason)}</td></tr>`; }).join("");
  return `<h4>GRM scoreboard: ${esc(entry.status)} · score ${fmt(entry.score)} · judge ${esc(entry.judge_model)}</h4>
    <p>${esc(entry.reason)}</p>
    <table class="rubric"><thead><tr><th>#</th><th>kind</th><th>w</th><th>criterion</th><th>verdict</th><th>c</th><th>reason</th></tr></thead>
    <tbody>${items || `<tr><td colspan="7">no rubric</td></tr>`}</tbody></table>`;
}

const size = (n) => n >= 1 << 20 ? `${(n / (1 << 20)).toFixed(1)} MiB` : `${(n / 1024).toFixed(0)} KiB`;

async function openSample(run, stage, id) {
  const q = `run=${run}&stage=${encodeURIComponent(stage)}&id=${encodeURIComponent(id)}`;
  const s = await api(`api/sample?${q}`);
  const r = s.row;
  const cut = s.cut ? `<p class="missing cut">this sample is ${size(s.cut.bytes)}: shown cut (each text to its first ${s.cut.chars.toLocaleString()} characters);
    <a href="api/sample_raw?${q}" target="_blank">the whole sample (JSON)</a></p>` : "";
  document.getElementById("sample-detail").innerHTML = `<h3>sample ${esc(r.sample)} · step ${fmt(r.step)} · ${esc(r.family)}</h3>${cut}
    ${(Array.isArray(r.messages) ? r.messages : []).map((m) => (m && typeof m === "object") ? `<b>${esc(m.role)}</b><pre>${esc(m.content)}</pre>` : `<pre>${esc(m)}</pre>`).join("")}
    <b>response</b> <span class="muted">${fmt(r.response_tokens)} tokens, ${esc(r.finish_reason)}${r.budget ? ", budget " + fmt(r.budget) : ""}</span>
    <pre class="response">${esc(r.response)}</pre>
    <p>reward <b>${r.ok === false ? "unscored" : fmt(r.reward)}</b> · source ${esc(r.source)} · verifier ${esc(r.verifier)}<br>${esc(r.reason)}</p>${rubricHtml(s.scoreboard)}`;
}

const FILTERS = ["run", "stage", "steps", "min", "max", "source", "verifier", "criterion", "flag", "page"];

async function rewardsView(params) {
  runsCache = runsCache.length ? runsCache : await api("api/runs");
  const run = params.get("run") || "0";
  const steps = params.get("steps") || params.get("step") || "";
  const q = new URLSearchParams({run, stage: params.get("stage") || "", steps, min: params.get("min") || "",
    max: params.get("max") || "", source: params.get("source") || "", verifier: params.get("verifier") || "",
    criterion: params.get("criterion") || "",
    flag: params.get("flag") || "", page: params.get("page") || "0"});
  const data = await api(`api/samples?${q}`);
  const key = `rewards|${q}|${data.stages}|${JSON.stringify([data.sources, data.verifiers])}`;
  const update = (extra = {}) => go("rewards", Object.fromEntries(Object.entries({...Object.fromEntries(FILTERS.filter((k) => k !== "page" && k !== "flag")
    .map((k) => [k, document.getElementById(`f-${k}`).value])), flag: params.get("flag") || "", ...extra}).filter(([, v]) => v !== "")));
  if (built !== key) {
    const opt = (list, cur, all, counts) => (all ? `<option value="">${all}</option>` : "") + (cur && !list.includes(cur) ? [...list, cur] : list).map((v) =>
      `<option ${String(v) === cur ? "selected" : ""} value="${esc(v)}">${esc(v)}${counts ? ` (${counts[v] ?? 0})` : ""}</option>`).join("");
    const named = (counts) => Object.keys(counts || {});
    view.innerHTML = `<div class="controls">
      <label>run <select id="f-run">${runsCache.map((r) => `<option value="${r.run}" ${String(r.run) === run ? "selected" : ""}>${esc(r.name)}</option>`).join("")}</select></label>
      <label>stage <select id="f-stage">${opt(data.stages, data.stage)}</select></label>
      <label>steps <input id="f-steps" type="text" value="${esc(steps)}" placeholder="3,7-9"></label>
      <label>reward ≥ <input id="f-min" type="number" step="0.1" value="${esc(params.get("min") || "")}"></label>
      <label>≤ <input id="f-max" type="number" step="0.1" value="${esc(params.get("max") || "")}"></label>
      <label>source <select id="f-source">${opt(named(data.sources), params.get("source") || "", "any", data.sources)}</select></label>
      <label>verifier <select id="f-verifier">${opt(named(data.verifiers), params.get("verifier") || "", "any", data.verifiers)}</select></label>
      <label>criterion <input id="f-criterion" type="text" value="${esc(params.get("criterion") || "")}" placeholder="rubric text"></label>
      ${params.get("flag") ? `<span class="chip" id="flag-chip">steps where health/${esc(params.get("flag"))} fired <a href="#" id="flag-clear">✕</a></span>` : ""}
      <span class="muted" id="matched"></span>
      <span class="pager"><button id="newer">‹ newer</button> <span id="page-of"></span> <button id="older">older ›</button></span></div>${missing(data.missing)}<div id="rewards-problems"></div>
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
  document.getElementById("rewards-problems").innerHTML = problems(data.problems);
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
