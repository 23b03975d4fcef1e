"""`posttrain dashboard` in a real headless browser (Debian's chromium driven by
Playwright), on the run folder of a real short pipeline run through the CLI: SFT, the
nine experts (general: writing prompts the GRM scores with a tiny random-weight judge),
MOPD from the experts; its pipeline file sets a tiny `health.logp_mismatch_max`, so the
health flag fires. Also: the wandb offline files of that run, and the refusal of a
non-loopback bind without a token."""

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import quote

import pytest
import yaml

CHROMIUM = Path(os.environ.get("POSTTRAIN_TEST_CHROMIUM", "/usr/bin/chromium"))  # as in conftest.py
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def needs_browser(test):
    """Without chromium: skipped, or failed in CI (conftest.py, for every browser-marked test)."""
    return pytest.mark.browser(test)


JOB_PLOTS = {  # plots of series that never stay at 0 in a real job (a reward or a queue may: folded then)
    "response tokens vs budget",
    "logp mismatch",
    "throughput (tokens/s)",
    "sync seconds",
}


MISMATCH_BOUND = 1e-9


def pipeline(judge: Path) -> dict:
    """SFT, the nine experts (general: writing prompts, scored by the GRM), MOPD from them."""
    arithmetic = {"type": "reasoning_gym", "families": [{"name": "basic_arithmetic", "params": {"max_digits": 1}}]}
    grm = {
        "judge": {"type": "vllm", "model": str(judge), "max_model_len": 1536, "kv_cache_gib": 0.25},
        "length_cap": 16,
        "max_criteria": 3,
        "retries": 2,
    }
    experts = {
        "name": "experts",
        "type": "experts",
        "steps": 2,
        "lr": 1e-4,
        "prompts_per_step": 2,
        "group_size": 2,
        "max_tokens": 12,
        "parallel": 1,
        "reward": {"grm": grm},
        "domains": {
            "general": {"type": "writing", "size": 8, "seed": 5},
            "coding": {"type": "coding", "size": 8, "seed": 5},
            "agent": {"type": "agent", "size": 8, "seed": 5, "families": ["calculator"], "system_prompt": ""},
        },
        "efforts": {"max": {"tokens": 10}, "high": {"tokens": 8}, "low": {"tokens": 6}},
    }
    return {
        "name": "dash",
        "model": {"name": "tiny"},
        "health": {"logp_mismatch_max": MISMATCH_BOUND},  # fp32 engines agree to ~1e-7: over this bound
        "rollout": {"max_model_len": 256, "kv_cache_gib": 0.25},
        "trainer": {"workers": 2},
        "stages": [
            {"name": "sft", "type": "sft", "steps": 2, "lr": 1e-3, "batch_size": 8, "data": {**arithmetic, "size": 40}},
            experts,
            {
                "name": "mopd",
                "type": "mopd",
                "experts": "experts",
                "init_from": "sft",
                "steps": 2,
                "lr": 1e-4,
                "prompts_per_step": 3,
                "group_size": 2,
                "max_tokens": 6,
                "teacher_pool": {"memory_gib": 1},
            },
        ],
    }


# The first test to ask for run_dir pays for its pipeline run (up to 900 s).
pytestmark = pytest.mark.timeout(1200)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    from posttrain.config import TinyModelConfig
    from posttrain.models import build_tiny

    root = tmp_path_factory.mktemp("dashboard-run")
    judge = build_tiny(TinyModelConfig(max_position=2048), seed=0, target=root / "judge")
    (root / "p.yaml").write_text(yaml.safe_dump(pipeline(judge)))
    proc = subprocess.run(
        [sys.executable, "-m", "posttrain.cli", "run", str(root / "p.yaml"), "--run-dir", str(root / "run")],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Ray dashboard: off (ray.dashboard: true starts it)" in proc.stdout
    (root / "run" / "console.txt").write_text(proc.stdout + proc.stderr)  # for the health warnings' test
    return root / "run"


@pytest.fixture(scope="module")
def live_dir(run_dir, tmp_path_factory):
    """A second run folder, a copy of the real run's records, that the live test appends to."""
    live = tmp_path_factory.mktemp("dashboard-live") / "run-b"
    shutil.copytree(run_dir, live, ignore=shutil.ignore_patterns("checkpoints", "wandb"))
    return live


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_dashboard(*args: str) -> tuple[subprocess.Popen, int]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "posttrain.cli", "dashboard", *args, "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    return proc, port


def wait_http(url: str, proc: subprocess.Popen, timeout: float = 60) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read()
        try:
            return urllib.request.urlopen(url, timeout=5).status
        except urllib.error.HTTPError as exc:
            return exc.code
        except OSError:
            time.sleep(0.3)
    raise TimeoutError(url)


@pytest.fixture(scope="module")
def server(run_dir, live_dir):
    proc, port = start_dashboard(str(run_dir), str(live_dir))
    url = f"http://127.0.0.1:{port}/"
    assert wait_http(url, proc) == 200
    yield url
    proc.terminate()
    proc.wait(10)


@pytest.fixture(scope="module")
def browser():
    assert CHROMIUM.exists(), "only browser-marked tests use the browser (conftest.py skips or fails them)"
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser):
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    errors = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    yield page
    page.close()
    assert not errors, errors


def open_view(page, url: str, view: str):
    page.goto(f"{url}#{view}")
    page.wait_for_function("document.getElementById('updated').textContent.startsWith('updated')", timeout=30_000)


def points(page) -> dict[str, int]:
    """Data points of each drawn plot, read from Plotly's own state on the page."""
    return page.evaluate("""() => Object.fromEntries([...document.querySelectorAll('.plot')].map(
        (d) => [d.dataset.title, (d.data || []).reduce((n, t) => n + t.x.length, 0)]))""")


def js_number(value: float, digits: int = 3) -> str:
    """A number as the page writes it (fmt() in app.js)."""
    return str(int(value)) if float(value).is_integer() else f"{value:.{digits}f}"


def metrics(run: Path, stage: str) -> list[dict]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if r["stage"] == stage]


CELLS = [(d, e) for d in ("general", "coding", "agent") for e in ("max", "high", "low")]  # the grid's order
JOB = "job?stage=experts&job=general-max"


@needs_browser
def test_pages_load(page, server, run_dir):
    open_view(page, server, "pipeline")
    assert page.locator(".run-column").count() == 2  # both runs, side by side
    first = page.locator(".run-column").first
    for stage in ("sft", "experts", "mopd"):
        assert first.locator(f"tr[data-stage={stage}] .status-done").count() == 1
    reward = metrics(run_dir, "mopd")[-1]["reward/mean"]
    column = first.locator("table.stages thead th").all_inner_texts().index("reward")  # by its header, not its place
    assert first.locator("tr[data-stage=mopd] td").nth(column).inner_text() == js_number(reward)
    open_view(page, server, "eval")
    # the pipeline has no eval stage: said so, not "missing: eval.json"
    assert page.locator(".no-eval").first.inner_text() == "this run has no eval stage (eval.json is written by one)"
    open_view(page, server, "rewards?stage=experts/coding-high")
    saved = (run_dir / "rollouts" / "experts" / "coding-high.jsonl").read_text().splitlines()
    page.wait_for_function(f"document.querySelectorAll('#samples tbody tr').length === {len(saved)}")


@needs_browser
def test_the_expert_grid_shows_nine_cells(page, server, run_dir):
    open_view(page, server, "pipeline")
    cells = page.locator(".run-column").first.locator(".expert-grid .cell")
    assert cells.count() == 9
    assert [cells.nth(i).get_attribute("data-job") for i in range(9)] == [f"{d}-{e}" for d, e in CELLS]
    for i, (domain, effort) in enumerate(CELLS):
        last = metrics(run_dir, f"experts/{domain}-{effort}")[-1]
        assert cells.nth(i).get_attribute("class") == "cell done"
        assert cells.nth(i).locator(".reward").inner_text() == js_number(last["reward/mean"], 3)


@needs_browser
def test_plots_have_data_points(page, server, run_dir):
    open_view(page, server, f"{JOB}&runs=0")
    page.wait_for_function("document.querySelectorAll('.plot').length >= 6")
    drawn = points(page)
    assert JOB_PLOTS <= set(drawn), drawn
    steps = len(metrics(run_dir, "experts/general-max"))
    assert steps >= 2 and all(drawn[title] >= steps for title in JOB_PLOTS), drawn
    open_view(page, server, "job?stage=mopd&runs=0")
    page.wait_for_function("[...document.querySelectorAll('.plot')].some((d) => d.dataset.title.startsWith('reverse'))")
    # one point per value logged: which cells a step samples depends on the machine (timing,
    # arithmetic), so count the values the rows hold rather than assume every cell at every step
    logged = sum(
        1
        for row in metrics(run_dir, "mopd")
        for k, v in row.items()
        if k.startswith("mopd/reverse_kl") and v is not None
    )
    assert logged >= len(metrics(run_dir, "mopd")) and points(page)["reverse KL (MOPD)"] == logged


@needs_browser
def test_runs_side_by_side_in_one_plot(page, server):
    open_view(page, server, f"{JOB}&runs=0,1")
    page.wait_for_function("document.querySelectorAll('.plot').length >= 6")
    names = page.evaluate("() => document.querySelector('.plot[data-title=\"logp mismatch\"]').data.map((t) => t.name)")
    assert names == ["dash: logp/mismatch", "dash: logp/mismatch"] and page.locator(".run-pick:checked").count() == 2


def judged(run_dir: Path) -> list[dict]:
    board = [json.loads(line) for line in (run_dir / "scoreboard.jsonl").read_text().splitlines()]
    found = [e for e in board if e["rubric"]]
    assert found, "the GRM wrote no rubric in the run"
    return found


@needs_browser
def test_a_grm_samples_rubric_is_visible(page, server, run_dir):
    entry = judged(run_dir)[0]
    open_view(page, server, f"rewards?run=0&stage={entry['stage']}&source=grm&step={entry['step']}")
    page.locator(f"#samples tr[data-sample='{entry['sample']}']").click()
    page.wait_for_selector(".rubric tr.criterion")
    rows = page.locator(".rubric tr.criterion")
    assert rows.count() == len(entry["rubric"])
    for j, criterion in enumerate(entry["rubric"]):
        text = rows.nth(j).inner_text()
        assert criterion["text"] in text and entry["verdicts"][j]["reason"] in text
    shown = page.locator("pre.response").inner_text()
    assert entry["candidate"].split() == shown.split()  # the browser shows a carriage return as a line break


@needs_browser
def test_criterion_filter(page, server, run_dir):
    entries = judged(run_dir)
    stage, word = entries[0]["stage"], entries[0]["rubric"][0]["text"]
    wanted = {
        e["sample"]
        for e in entries
        if e["stage"] == stage and any(word.lower() in c["text"].lower() for c in e["rubric"])
    }
    open_view(page, server, f"rewards?run=0&stage={stage}&criterion={quote(word)}")
    shown = {
        page.locator("#samples tbody tr").nth(i).get_attribute("data-sample")
        for i in range(page.locator("#samples tbody tr").count())
    }
    assert shown == wanted


@needs_browser
def test_a_new_metrics_line_appears_live(page, server, live_dir):
    open_view(page, server, f"{JOB}&runs=1")
    page.wait_for_function("document.querySelectorAll('.plot').length >= 6")
    last = metrics(live_dir, "experts/general-max")[-1]
    before = points(page).get("reward", 0)  # a reward that stayed at 0 has no plot yet
    assert page.locator("#last-step").inner_text() == str(last["step"])
    row = dict(last, step=last["step"] + 1, time=time.time(), **{"reward/mean": 0.625})
    with (live_dir / "metrics.jsonl").open("a") as f:
        f.write(json.dumps(row) + "\n")
    page.wait_for_function(f"document.getElementById('last-step').textContent === '{last['step'] + 1}'", timeout=15_000)
    assert points(page)["reward"] > before
    ys = page.evaluate(
        "() => document.querySelector('.plot[data-title=reward]').data.find((t) => t.name === 'reward/mean').y"
    )
    assert ys[-1] == 0.625


def test_wandb_offline_files_hold_the_metrics(run_dir):
    from wandb_files import history, run_config, run_meta

    files = {run_meta(p)["name"]: p for p in (run_dir / "wandb").glob("offline-run-*/run-*.wandb")}
    assert set(files) == {"sft", "mopd"} | {f"experts/{d}-{e}" for d, e in CELLS}
    state = json.loads((run_dir / "run_state.json").read_text())
    assert {run_meta(p)["group"] for p in files.values()} == {state["run_id"]}
    for job in ("experts/agent-low", "mopd"):
        logged, rows = history(files[job]), metrics(run_dir, job)
        assert [r["reward/mean"] for r in logged] == [r["reward/mean"] for r in rows]
        assert [r["logp/mismatch"] for r in logged] == [r["logp/mismatch"] for r in rows]
    assert run_config(files["mopd"])["pipeline"]["stages"][2]["name"] == "mopd"


def test_a_non_loopback_bind_needs_a_token(run_dir):
    proc = subprocess.run(
        [sys.executable, "-m", "posttrain.cli", "dashboard", str(run_dir), "--host", "0.0.0.0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "--host 0.0.0.0 is reachable from other machines: give --token" in proc.stderr
    proc, port = start_dashboard(str(run_dir), "--host", "0.0.0.0", "--token", "s3cret")
    try:
        assert wait_http(f"http://127.0.0.1:{port}/api/pipeline", proc) == 401
        assert wait_http(f"http://127.0.0.1:{port}/api/pipeline?token=wrong", proc) == 401
        assert wait_http(f"http://127.0.0.1:{port}/api/pipeline?token=s3cret", proc) == 200
    finally:
        proc.terminate()
        proc.wait(10)


# ------------------------------------------------------------ job states and the eval heatmaps
# A real short run ends with every job done and, to stay short, has no eval stage: a copy
# of its folder gets other job states in run_state.json and an eval.json as the eval stage
# writes it (posttrain/stages/evaluate.py).


@pytest.fixture(scope="module")
def states_dir(run_dir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("dashboard-states") / "run-c"
    shutil.copytree(run_dir, folder, ignore=shutil.ignore_patterns("checkpoints", "wandb"))
    state = json.loads((folder / "run_state.json").read_text())
    jobs = state["stages"]["experts"]["jobs"]
    for name, status in (
        ("coding-high", "running"),
        ("agent-max", "running"),
        ("agent-high", "failed"),
        ("agent-low", "pending"),
    ):
        jobs[name]["status"] = status
    (folder / "run_state.json").write_text(json.dumps(state))
    rows = [
        {
            "checkpoint": "mopd",
            "role": "student",
            "path": "x",
            "domain": d,
            "effort": e,
            "score": 0.5,
            "mean_tokens": 9.0,
            "n": 3,
            "unscored": 0,
            "score_se": 0.04,
            "overlap": 0.0,
        }
        for d, e in CELLS
    ]
    rows += [
        {
            "checkpoint": "sft",
            "role": "sft",
            "path": "x",
            "domain": d,
            "effort": e,
            "score": 0.25,
            "mean_tokens": 7.0,
            "n": 3,
            "unscored": 0,
        }  # as an older eval.json: no score_se or overlap
        for d, e in CELLS
    ]
    rows += [
        {
            "checkpoint": f"experts/{d}-{e}",
            "role": "expert",
            "path": "x",
            "domain": d,
            "effort": e,
            "score": 0.75,
            "mean_tokens": 12.0,
            "n": 3,
            "unscored": 0,
            "score_se": 0.03,
            "overlap": 0.0,
        }
        for d, e in CELLS
    ]
    (folder / "eval.json").write_text(json.dumps({"stage": "eval", "rows": rows}))
    return folder


@needs_browser
def test_job_states_and_the_eval_heatmaps(page, states_dir):
    proc, port = start_dashboard(str(states_dir))
    url = f"http://127.0.0.1:{port}/"
    try:
        assert wait_http(url, proc) == 200
        open_view(page, url, "pipeline")
        assert page.locator(".expert-grid .cell").count() == 9
        assert page.locator(".expert-grid .cell.running").count() == 2
        assert page.locator(".expert-grid .cell.failed").count() == 1
        assert page.locator(".expert-grid .cell.pending").count() == 1
        open_view(page, url, "eval")
        for role in ("sft", "expert", "student", "difference"):
            grid = page.locator(f".heat[data-role={role}]")
            assert grid.count() == 1, role
            assert grid.locator(".heat-cell").count() == 9 and grid.locator(".heat-cell .value").count() == 9, role
        cell = page.locator(".heat[data-role=student] .heat-cell[data-domain=general][data-effort=max]")
        assert cell.locator(".value").inner_text() == "0.500" and cell.locator(".se").inner_text() == "± 0.040"
        assert "9 tok" in cell.inner_text()
        assert page.locator(".heat[data-role=sft] .se").count() == 0  # rows without score_se: no ± shown
        diff = page.locator(".heat[data-role=difference] .heat-cell[data-domain=agent][data-effort=low]")
        assert diff.locator(".value").inner_text() == "-0.250" and diff.locator(".se").inner_text() == "± 0.050"
    finally:
        proc.terminate()
        proc.wait(10)


# ------------------------------------------------------------ every series, health


def jobs_of(run: Path) -> dict[str, list[str]]:
    """Each job's numeric keys, as metrics.jsonl has them."""
    keys: dict[str, set] = {}
    for row in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()):
        numeric = {k for k, v in row.items() if isinstance(v, (int, float)) and k not in ("step", "time")}
        keys.setdefault(row["stage"], set()).update(numeric)
    return {job: sorted(k) for job, k in keys.items()}


def job_view(stage: str) -> str:
    name, _, job = stage.partition("/")
    return f"job?stage={quote(name)}&job={quote(job)}&runs=0"


TRACE_NAMES = """() => [...document.querySelectorAll('.plot')].flatMap((d) => (d.data || []).map((t) => t.name)).concat(
    (document.querySelector('.zero-series')?.dataset.keys || '').split(' ').filter((k) => k))"""  # drawn, or at 0


@needs_browser
def test_the_sft_job_view_draws_its_loss_and_grad_norm(page, server, run_dir):
    open_view(page, server, job_view("sft"))
    page.wait_for_function("document.querySelector('.plot[data-title=\"grad norm\"]') !== null")
    drawn = points(page)
    steps = len(metrics(run_dir, "sft"))
    assert drawn["loss"] == steps and drawn["grad norm"] == steps
    titles = page.evaluate("() => [...document.querySelectorAll('.plot')].map((d) => d.dataset.title)")
    assert titles[:2] == ["loss", "grad norm"]  # the curated plots first


@needs_browser
def test_every_series_of_every_job_is_drawn(page, server, run_dir):
    jobs = jobs_of(run_dir)
    assert len(jobs) == 11  # sft, nine experts, mopd
    for stage, keys in jobs.items():
        open_view(page, server, job_view(stage))
        page.wait_for_function(
            f"(keys) => {{ const n = new Set(({TRACE_NAMES})()); return keys.every((k) => n.has(k)); }}",
            arg=keys,
            timeout=15_000,
        )
        assert sorted(set(page.evaluate(TRACE_NAMES))) == keys, stage


def fired_steps(run: Path, job: str) -> list[int]:
    return [r["step"] for r in metrics(run, job) if r["logp/mismatch"] > MISMATCH_BOUND]


def test_the_run_logged_and_printed_its_health_flags(run_dir):
    rows = metrics(run_dir, "experts/general-max")
    assert rows and all("health/flags" in r for r in rows)
    assert [r["step"] for r in rows if "health/logp_mismatch" in r] == fired_steps(run_dir, "experts/general-max") != []
    console = (run_dir / "console.txt").read_text()
    first = fired_steps(run_dir, "experts/general-max")[0]
    assert f"warning: [experts/general-max] step {first} health/logp_mismatch: logp/mismatch " in console


@needs_browser
def test_the_health_panel_flags_the_mismatch_and_links_to_its_samples(page, server, run_dir):
    job = "experts/general-max"
    steps = fired_steps(run_dir, job)
    open_view(page, server, "health")
    card = page.locator(".health-job[data-stage=experts][data-job=general-max]").first
    flag = card.locator("tr.flag[data-flag=logp_mismatch]")
    assert flag.count() == 1
    assert f"{len(steps)} step" in flag.inner_text() and f"> {MISMATCH_BOUND}" in flag.inner_text()
    flag.locator("a.samples-link").click()
    saved = [json.loads(line) for line in (run_dir / "rollouts" / f"{job}.jsonl").read_text().splitlines()]
    wanted = sorted(r["sample"] for r in saved if r["step"] in steps)
    page.wait_for_function(f"document.querySelectorAll('#samples tbody tr').length === {len(wanted)}")
    shown = page.locator("#samples tbody tr").evaluate_all("(rows) => rows.map((r) => r.dataset.sample)")
    assert sorted(shown) == wanted
    assert page.locator("#f-stage").input_value() == job
    open_view(page, server, "pipeline")
    assert page.locator(".run-column").first.locator("tr[data-stage=experts] a.flagged").count() == 1


# ------------------------------------------------------------ hostile files, units, comparisons (issue 33)
# Two folders written by the project's own writers, no pipeline run: `good` logs series of
# mixed units (one plot of two units, one of three, series that stay at 0) and has an
# eval.json with paired comparisons; `hostile` has rows of the wrong type in every JSON-lines
# file, a torn line followed by a whole row, a config.resolved.yaml that is not YAML, a torn
# eval.json, and a sample of a few MiB.


def _write_rollouts(folder: Path, stage: str, steps: int, per_step: int, big: int | None = None) -> None:
    from posttrain.records.rollouts import RolloutLog
    from posttrain.types import Completion, Message, RewardResult, Sample, Task

    log = RolloutLog(folder, stage)
    for step in range(1, steps + 1):
        samples, results = [], []
        for i in range(per_step):
            grm = i % 2 == 0
            task = Task(f"t/{i}", "writing" if grm else "arith", (Message("user", f"task {i}"),), None, {},
                        "grm" if grm else "reasoning_gym")  # fmt: skip
            text = "x" * big if big and (step, i) == (steps, 0) else f"answer {step}-{i}"
            samples.append(Sample(task, 0, (1, 2), Completion((4, 5), (0.0, 0.0), text, "stop"), 0))
            results.append(RewardResult(i / per_step, f"reason {step}-{i}", "grm" if grm else "reasoning_gym", {}))
        log.write(step, samples, results, [None] * per_step)


@pytest.fixture(scope="module")
def synthetic_dirs(tmp_path_factory):
    from posttrain.records.metrics import MetricsLog

    root = tmp_path_factory.mktemp("dashboard-synthetic")
    good, hostile = root / "good", root / "hostile"
    for folder in (good, hostile):
        log = MetricsLog(folder)
        for step in range(1, 9):
            log.log("grpo", step, {
                "reward/mean": step / 10, "reward/over_budget_frac": 0.5 - step / 20,  # two units: two axes
                "queue/depth": float(step % 5), "staleness/mean": 1.0, "offpolicy/token_frac": 0.1,  # three
                "time/generate_s": 20.0 + step, "loss/nll": 2.0 - step / 10, "loss/policy": 0.01 * step,
                **{f"samples/dropped/{k}": 0.0 for k in ("a", "b", "c")}, "health/flags": 0.0,
                **({"startup/ray_s": 4.0, "startup/trainers_s": 9.5, "startup/total_s": 21.0} if step == 1 else {}),
            })  # fmt: skip
    (good / "config.resolved.yaml").write_text(
        "name: good\nstages: [{name: sft, type: sft}, {name: grpo, type: rl}, {name: eval, type: eval}]\n"
    )
    (good / "run_state.json").write_text(json.dumps({"run_id": "g", "stages": {
        "sft": {"status": "done", "seconds": 3 * 3600 + 62}, "grpo": {"status": "done", "seconds": 75},
        "eval": {"status": "done", "seconds": 5}}}))  # fmt: skip
    _write_rollouts(good, "grpo", 3, 4)
    _write_rollouts(good, "eval/sft/general-max", 1, 4)
    comparisons = [
        {"kind": "max_minus_low", "a": "experts/general-max@general-max", "b": "experts/general-low@general-low",
         "domain": "general", "effort": "max", "diff": 0.25, "se": 0.05, "n": 40},
        {"kind": "expert_minus_sft", "a": "experts/coding-max@coding-max", "b": "sft@coding-max",
         "domain": "coding", "effort": "max", "diff": 0.02, "se": 0.04, "n": 40},
        {"kind": "student_minus_teacher", "a": "mopd@agent-low", "b": "experts/agent-low@agent-low",
         "domain": "agent", "effort": "low", "diff": -0.2, "se": 0.06, "n": 40},
    ]  # fmt: skip
    rows = [{"checkpoint": "sft", "role": "sft", "domain": d, "effort": e, "score": 0.9, "score_se": 0.02,
             "mean_tokens": 12.0, "n": 40, "unscored": 0} for d, e in CELLS]  # fmt: skip
    (good / "eval.json").write_text(json.dumps({"stage": "eval", "rows": rows, "comparisons": comparisons}))

    with (hostile / "metrics.jsonl").open("a") as f:
        f.write(json.dumps({"stage": "grpo", "job": ["x"], "step": 9}) + "\n")
        f.write(json.dumps({"stage": "grpo", "step": "ten"}) + "\n")
        f.write('{"stage": "grpo", "st' + json.dumps({"stage": "grpo", "step": 9, "reward/mean": 0.95}) + "\n")
    (hostile / "config.resolved.yaml").write_text("name: hostile\nstages: [\n  - {name: grpo\n")
    (hostile / "eval.json").write_text('{"stage": "eval", "rows": [{"checkpoint": "sft", "sc')
    _write_rollouts(hostile, "grpo", 3, 4, big=3 << 20)
    path = hostile / "rollouts" / "grpo.jsonl"
    with path.open("a") as f:
        f.write(json.dumps({"sample": "4-0", "step": "four", "reward": 0.5}) + "\n")
    return good, hostile


@pytest.fixture(scope="module")
def synthetic_server(synthetic_dirs):
    proc, port = start_dashboard(*map(str, synthetic_dirs))
    url = f"http://127.0.0.1:{port}/"
    assert wait_http(url, proc) == 200
    yield url
    proc.terminate()
    proc.wait(10)


@pytest.fixture
def narrow(browser):
    """A page 800 px wide (a laptop's half screen)."""
    page = browser.new_page(viewport={"width": 800, "height": 900})
    errors = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    yield page
    page.close()
    assert not errors, errors


def bad_counts(page) -> dict[str, int]:
    return page.evaluate("""() => Object.fromEntries([...document.querySelectorAll('.problems .bad-file')].map(
        (li) => [li.dataset.file, Number(li.dataset.count)]))""")


@needs_browser
def test_hostile_files_every_view_answers_and_names_each_bad_row(narrow, synthetic_server):
    page = narrow
    for view in ("pipeline", "job?stage=grpo&runs=1", "health", "eval", "rewards?run=1"):
        open_view(page, synthetic_server, view)
        assert page.locator("#updated").inner_text().startswith("updated"), view
        problems = page.locator(".problems").last.inner_text()
        if view != "eval":
            assert bad_counts(page)["metrics.jsonl"] == 3, view
            assert "line 9: job: ['x'] is a list, not a string" in problems, view
            assert "line 10: step: 'ten' is a string, not a number" in problems, view
            assert "line 11: torn line (21 bytes) before a whole row" in problems, view
        assert "config.resolved.yaml" in problems and "not valid YAML (" in problems, view
    open_view(page, synthetic_server, "eval")
    assert page.locator(".missing").count() == 0  # torn is not missing
    assert "eval.json: not valid JSON (" in page.locator(".problems").last.inner_text()
    open_view(page, synthetic_server, "rewards?run=1")
    page.wait_for_timeout(2 * 2000 + 500)  # two more polls: counts stay, nothing added twice
    assert bad_counts(page) == {"metrics.jsonl": 3, "rollouts/grpo.jsonl": 1}
    assert page.locator("#matched").inner_text() == "12 of 12 samples"
    assert "line 13: step: 'four' is a string, not an integer" in page.locator(".problems").inner_text()
    open_view(page, synthetic_server, "job?stage=grpo&runs=1")
    ys = page.evaluate(
        "() => document.querySelector('.plot[data-title=reward]').data.find((t) => t.name === 'reward/mean').y"
    )
    assert ys[-1] == 0.95  # the whole row after the torn line was kept


@needs_browser
def test_a_sample_over_the_limit_is_shown_cut_with_a_link_to_the_whole(narrow, synthetic_server):
    open_view(narrow, synthetic_server, "rewards?run=1&stage=grpo&steps=3")
    narrow.locator("#samples tr[data-sample='3-0']").click()
    note = narrow.locator("#sample-detail .cut")
    note.wait_for(timeout=15_000)
    assert "this sample is 3.0 MiB: shown cut" in note.inner_text()
    href = note.locator("a").get_attribute("href")
    whole = json.loads(urllib.request.urlopen(synthetic_server + href, timeout=30).read())
    assert len(whole["response"]) == 3 << 20
    assert len(narrow.locator("pre.response").inner_text()) < 30_000


def layout_of(page) -> list[dict]:
    """Per plot: title, axis titles, trace names, legend names, and the boxes of the plot
    area, the legend and the x axis title."""
    return page.evaluate("""() => [...document.querySelectorAll('.plot-card')].map((card) => {
        const div = card.querySelector('.plot'), box = (el) => el ? el.getBoundingClientRect().toJSON() : null;
        return {title: card.querySelector('.plot-title').textContent,
                y: div.layout.yaxis.title.text, y2: div.layout.yaxis2 ? div.layout.yaxis2.title.text : null,
                x: div.layout.xaxis.title.text, traces: div.data.map((t) => t.name),
                colours: div.data.map((t) => t.line.color + t.line.dash),
                legend: [...card.querySelectorAll('.legend .item')].map((i) => i.textContent.trim()),
                plotBox: box(div.querySelector('.main-svg')), legendBox: box(card.querySelector('.legend')),
                xTitle: box(div.querySelector('.g-xtitle')), yTitle: box(div.querySelector('.g-ytitle'))};
    })""")


@needs_browser
def test_plots_of_mixed_units_have_their_own_axes_and_every_label(narrow, synthetic_server):
    open_view(narrow, synthetic_server, "job?stage=grpo&runs=0")
    narrow.wait_for_function("document.querySelectorAll('.plot-card').length >= 6")
    plots = {p["title"]: p for p in layout_of(narrow)}
    assert (plots["loss"]["y"], plots["loss"]["y2"]) == ("nats", "loss")  # two units: two axes
    assert sorted(t for t in plots if t.startswith("queue depth, staleness, off-policy")) == [
        "queue depth, staleness, off-policy (fraction)",
        "queue depth, staleness, off-policy (policy versions)",
        "queue depth, staleness, off-policy (trajectories)",
    ]  # three units: a plot each
    assert plots["time split (s)"]["y"] == "seconds" and plots["reward"]["y"] == "reward"
    for p in plots.values():
        assert p["x"] == "step" and p["y"], p
        assert len(p["legend"]) == len(p["traces"]) and all(n in " ".join(p["legend"]) for n in p["traces"]), p
        assert len(set(p["colours"])) == len(p["colours"]), p  # distinct within a plot
        legend, area = p["legendBox"], p["plotBox"]
        assert legend["top"] >= area["bottom"] - 1, p  # below the plot, never over it
        assert p["xTitle"]["bottom"] <= area["bottom"] + 1 and p["yTitle"]["left"] >= area["left"] - 1, p
    zero = narrow.locator(".zero-series")
    assert zero.get_attribute("data-keys").split() == [
        "health/flags", "samples/dropped/a", "samples/dropped/b", "samples/dropped/c"
    ]  # fmt: skip
    assert zero.inner_text().startswith("4 series stay at 0")
    assert not any(t.startswith("samples/") or t == "health flags" for t in plots)
    assert narrow.evaluate("document.documentElement.scrollWidth") <= 800


@needs_browser
def test_the_eval_view_shows_the_paired_comparisons(narrow, synthetic_server):
    open_view(narrow, synthetic_server, "eval")
    rows = narrow.locator("table.comparisons tr.comparison")
    assert rows.count() == 3
    assert [rows.nth(i).get_attribute("data-kind") for i in range(3)] == [
        "max_minus_low", "expert_minus_sft", "student_minus_teacher"
    ]  # fmt: skip
    assert narrow.locator("table.comparisons tr.beyond").count() == 2  # 0.25 ± 0.05 and -0.2 ± 0.06
    first = rows.nth(0).inner_text()
    assert "max − low effort" in first and "+0.250" in first and "± 0.050" in first and "beyond 2 SE" in first
    assert "within noise" in rows.nth(1).inner_text()
    colour = narrow.evaluate(
        "getComputedStyle(document.querySelector('.heat[data-role=sft] .heat-cell .detail')).color"
    )
    assert colour == "rgb(43, 49, 64)"  # dark text on a light cell, even at score 0.9


@needs_browser
def test_links_durations_the_debuggers_stage_and_800_px(narrow, synthetic_server):
    open_view(narrow, synthetic_server, "pipeline")
    good = narrow.locator(".run-column").first
    assert good.locator("tr[data-stage=eval] a").get_attribute("href") == "#eval"
    assert good.locator("tr[data-stage=grpo] a").get_attribute("href") == "#job?stage=grpo&job=&runs=0"
    assert good.locator("tr[data-stage=sft] a").count() == 0  # logged nothing: no link to an empty page
    assert good.locator("tr[data-stage=sft] td").nth(3).inner_text() == "3h01m02s"
    assert good.locator("tr[data-stage=grpo] td").nth(3).inner_text() == "1m15s"
    startup = good.locator("tr[data-stage=grpo] td.startup")  # seconds to the first step, by phase
    assert startup.inner_text().split() == ["21.0s", "ray", "4.0s", "·", "trainers", "9.5s"]
    assert good.locator("tr[data-stage=sft] td.startup").inner_text() == ""
    open_view(narrow, synthetic_server, "rewards?run=0")
    assert narrow.locator("#f-stage").input_value() == "grpo"  # the newest RL stage, not the eval cell
    assert narrow.locator("#f-stage option").all_inner_texts() == ["eval/sft/general-max", "grpo"]  # newest first
    shown = narrow.locator("#samples tbody tr").evaluate_all("(rows) => rows.map((r) => r.dataset.sample)")
    assert shown[:2] == ["3-3", "3-2"] and shown[-1] == "1-0"  # newest first
    assert narrow.locator("#f-verifier option").all_inner_texts() == ["any", "grm (6)", "reasoning_gym (6)"]
    narrow.select_option("#f-verifier", "grm")
    narrow.wait_for_function("document.getElementById('matched').textContent === '6 of 12 samples'")
    for view in ("pipeline", "health", "rewards?run=0", "eval", "job?stage=grpo&runs=0"):
        open_view(narrow, synthetic_server, view)
        assert narrow.evaluate("document.documentElement.scrollWidth") <= 800, view
