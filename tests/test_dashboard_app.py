"""The dashboard's JSON endpoints and guards, through Starlette's test client (no browser):
missing files are named, torn lines skipped, files read incrementally (appended, replaced,
rewritten), series downsampled with their extremes, every key plotted, the eval grids, the
reward debugger's pages and filters, bad queries answered 400, the token enforced, and a
non-loopback bind refused without one."""

import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
from starlette.testclient import TestClient

from posttrain.dashboard.app import DashboardError, check_bind, create_app
from posttrain.dashboard.eval_view import eval_grids
from posttrain.dashboard.series import CURATED, downsample, plot_groups
from posttrain.dashboard.tail import CHUNK, JsonlTail

ROOT_STATIC = Path(__file__).resolve().parents[1] / "posttrain" / "dashboard" / "static"


def client(*folders, token=None) -> TestClient:
    return TestClient(create_app([str(f) for f in folders], token))


def test_an_empty_folder_names_what_is_missing(tmp_path):
    c = client(tmp_path)
    pipeline = c.get("/api/pipeline").json()[0]
    assert pipeline["missing"] == ["config.resolved.yaml", "run_state.json", "metrics.jsonl"]
    assert pipeline["stages"] == [] and pipeline["experts"] is None
    assert c.get("/api/eval").json()[0]["missing"] == ["eval.json"]
    assert c.get("/api/samples").json()["missing"] == ["rollouts/STAGE.jsonl"]
    assert c.get("/").status_code == 200 and c.get("/static/plotly.min.js").status_code == 200


def test_a_torn_last_line_is_skipped_and_the_series_follow_the_file(tmp_path):
    rows = [{"stage": "grpo", "step": s, "time": 0.0, "reward/mean": s / 10, "logp/mismatch": 1e-7} for s in (1, 2)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"stage": "grpo", "st')
    c = client(tmp_path)
    series = c.get("/api/job?stage=grpo").json()[0]
    assert series["last_step"] == 2
    assert series["plots"]["reward"]["series"] == {"reward/mean": {"x": [1, 2], "y": [0.1, 0.2]}}
    assert series["plots"]["reward"]["axes"] == ["reward"] and series["problems"]["bad_rows"] == []
    assert list(series["plots"]) == ["reward", "logp mismatch"]  # plots without data are left out
    with (tmp_path / "metrics.jsonl").open("a") as f:
        f.write('ep": 3, "time": 0.0, "reward/mean": 0.3}\n')
    assert c.get("/api/job?stage=grpo").json()[0]["plots"]["reward"]["series"]["reward/mean"]["y"] == [0.1, 0.2, 0.3]


def lines(tail: JsonlTail) -> list[bytes]:
    reset, found = tail.poll()
    return ["reset"] * reset + [line for _, _, line in found]


def test_only_appended_bytes_are_read_and_a_torn_line_waits(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_bytes(b'{"a": 1}\n{"a": 2}\n{"a"')
    tail = JsonlTail(path)
    assert lines(tail) == [b'{"a": 1}', b'{"a": 2}'] and tail.offset == 18
    assert lines(tail) == []
    with path.open("ab") as f:
        f.write(b': 3}\n\n{"a": 4}\n')
    assert lines(tail) == [b'{"a": 3}', b'{"a": 4}']
    big = b'{"a": "' + b"x" * (CHUNK + 10) + b'"}'  # a line longer than a read chunk
    with path.open("ab") as f:
        f.write(big + b"\n")
    assert lines(tail) == [big] and tail.offset == path.stat().st_size


def test_a_file_replaced_or_rewritten_is_read_again(tmp_path):
    from posttrain.records.run_state import set_aside_rows

    path = tmp_path / "metrics.jsonl"
    rows = [{"stage": "grpo", "step": s} for s in range(1, 6)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tail = JsonlTail(path)
    assert len(lines(tail)) == 5
    set_aside_rows(path, tmp_path / "metrics.replaced.jsonl", "grpo", 3)  # a resume from step 3: a new file
    assert lines(tail) == ["reset", *[json.dumps(r).encode() for r in rows[:3]]]
    path.write_text("".join(json.dumps(dict(r, stage="sft")) + "\n" for r in rows))  # rewritten in place, longer
    assert lines(tail)[:2] == ["reset", json.dumps(dict(rows[0], stage="sft")).encode()]
    os.truncate(path, 0)
    assert lines(tail) == ["reset"]


def test_a_resume_set_aside_redraws_the_series(tmp_path):
    from posttrain.records.metrics import MetricsLog
    from posttrain.records.run_state import set_aside_rows

    log = MetricsLog(tmp_path)
    for step in range(1, 6):
        log.log("grpo", step, {"reward/mean": float(step)})
    c = client(tmp_path)
    assert c.get("/api/job?stage=grpo").json()[0]["plots"]["reward"]["series"]["reward/mean"]["x"] == [1, 2, 3, 4, 5]
    set_aside_rows(tmp_path / "metrics.jsonl", tmp_path / "metrics.replaced.jsonl", "grpo", 2)
    log.log("grpo", 3, {"reward/mean": 30.0})
    series = c.get("/api/job?stage=grpo").json()[0]
    assert series["plots"]["reward"]["series"]["reward/mean"] == {"x": [1, 2, 3], "y": [1.0, 2.0, 30.0]}


def test_downsampling_keeps_every_buckets_extremes():
    rng = np.random.default_rng(0)
    x = np.arange(1, 100_001, dtype=float)
    y = rng.normal(size=x.size)
    y[[123, 45_678, 99_998]] = [50.0, -40.0, 30.0]  # spikes anywhere, the last one near the end
    dx, dy = downsample(x, y, 2000)
    assert len(dx) <= 2000 and np.all(np.diff(dx) > 0)  # in step order
    assert dx[0] == 1 and dx[-1] == 100_000  # the first and the newest point
    assert {50.0, -40.0, 30.0} <= set(dy.tolist())
    # each bucket's min and max: the downsampled envelope matches the full one over any window
    for lo in range(0, 100_000, 10_000):
        full, kept = y[lo : lo + 10_000], dy[(dx > lo) & (dx <= lo + 10_000)]
        assert full.max() == kept.max() and full.min() == kept.min()
    short_x, short_y = downsample(x[:50], y[:50], 2000)
    assert short_x.tolist() == x[:50].tolist() and short_y.tolist() == y[:50].tolist()


def test_every_key_lands_in_exactly_one_plot_curated_first():
    keys = [
        "reward/mean",
        "reward/std",
        "reward_source/code",
        "grad/norm",
        "policy/entropy",
        "policy/version",
        "time/generate_s",
        "time/train_s",
        "agent/turns_mean",
        "grm/unscored",
        "samples/dropped/empty_response",
        "samples/drawn",
        "tokens",
        "health/logp_mismatch",
    ]
    plots = plot_groups(sorted(keys))
    placed = [k for ks in plots.values() for k in ks]
    assert sorted(placed) == sorted(keys)  # each key once
    curated = [t for t in plots if t in CURATED]
    assert list(plots)[: len(curated)] == curated
    assert curated == ["reward", "policy entropy", "grad norm", "time split (s)", "health flags"]
    assert plots["reward"] == ["reward/mean", "reward_source/code"] and plots["reward/*"] == ["reward/std"]
    assert plots["samples/dropped/*"] == ["samples/dropped/empty_response"] and plots["tokens"] == ["tokens"]
    assert plots["agent/*"] == ["agent/turns_mean"] and plots["policy/*"] == ["policy/version"]


def eval_row(checkpoint, role, domain, effort, score, **extra):
    return {
        "checkpoint": checkpoint,
        "role": role,
        "path": "x",
        "domain": domain,
        "effort": effort,
        "score": score,
        "mean_tokens": 10.0,
        "n": 32,
        "unscored": 0,
        **extra,
    }


CELLS = [(d, e) for d in ("general", "coding", "agent") for e in ("max", "high", "low")]


def test_eval_grids_per_role_and_student_minus_teacher():
    rows = [eval_row("sft", "sft", d, e, 0.2) for d, e in CELLS]  # an older eval.json: no score_se, no overlap
    rows += [eval_row(f"experts/{d}-{e}", "expert", d, e, 0.6, score_se=0.03, overlap=0.0) for d, e in CELLS]
    rows += [eval_row("mopd", "student", d, e, 0.5, score_se=0.04, overlap=0.0) for d, e in CELLS]
    grids = eval_grids(rows)
    assert [(g["title"], g["kind"]) for g in grids] == [
        ("SFT: sft", "score"),
        ("experts (each on its own cell)", "score"),
        ("student: mopd", "score"),
        ("student: mopd minus teacher", "difference"),
    ]
    assert all(len(g["cells"]) == 9 for g in grids)
    sft, experts, _, diff = grids
    assert sft["cells"][0]["score_se"] is None and sft["cells"][0]["overlap"] is None
    assert experts["cells"][4] == {
        "domain": "coding",
        "effort": "high",
        "checkpoint": "experts/coding-high",
        "score": 0.6,
        "score_se": 0.03,
        "mean_tokens": 10.0,
        "n": 32,
        "unscored": 0,
        "overlap": 0.0,
    }
    assert diff["cells"][0]["diff"] == pytest.approx(-0.1) and diff["cells"][0]["diff_se"] == pytest.approx(0.05)
    assert eval_grids(rows[:9] + rows[18:])[-1]["kind"] == "score"  # no experts: no difference grid


def rollouts_folder(tmp_path, steps: int = 30, per_step: int = 10):
    """A run folder with saved samples written by RolloutLog, as the RL driver writes them."""
    from posttrain.records.metrics import MetricsLog
    from posttrain.records.rollouts import RolloutLog
    from posttrain.types import Completion, Message, RewardResult, Sample, Task

    task = Task("t/1", "writing", (Message("user", "Write a haiku."),), None, {}, "grm")
    sample = Sample(task, 0, (1, 2, 3), Completion((4, 5), (0.0, 0.0), "a haiku", "stop"), 0)
    log, metrics = RolloutLog(tmp_path, "grpo"), MetricsLog(tmp_path)
    for step in range(1, steps + 1):
        results = []
        for i in range(per_step):
            rubric = [
                {"text": f"mentions the {'moon' if (step + i) % 3 == 0 else 'sea'}", "kind": "essential", "weight": 1.0}
            ]
            details = {"status": "scored", "rubric": rubric, "verdicts": [], "judge_model": "j"} if i < 5 else {}
            results.append(RewardResult(i / 10, f"reason {step}-{i}", "grm" if i < 5 else "rg", details, ok=i != 9))
        log.write(step, [sample] * per_step, results, [None] * per_step)
        metrics.log("grpo", step, {"logp/mismatch": 0.2 if step in (4, 5, 6, 20) else 1e-6})
    return tmp_path


def test_the_reward_debugger_pages_and_filters_on_the_server(tmp_path):
    c = client(rollouts_folder(tmp_path))
    first = c.get("/api/samples?stage=grpo").json()
    assert (first["total"], first["matched"], first["page"], first["pages"]) == (300, 300, 0, 2)
    assert first["samples"][0]["sample"] == "30-9" and first["samples"][-1]["sample"] == "11-0"  # the newest 200
    older = c.get("/api/samples?stage=grpo&page=1").json()["samples"]
    assert [s["sample"] for s in older] == [f"{s}-{i}" for s in range(10, 0, -1) for i in range(9, -1, -1)]
    assert c.get("/api/samples?stage=grpo&page=7").json()["samples"] == []
    steps = c.get("/api/samples?stage=grpo&steps=3,7-8").json()
    assert sorted({s["step"] for s in steps["samples"]}) == [3, 7, 8] and steps["matched"] == 30
    rewards = c.get("/api/samples?stage=grpo&min=0.25&max=0.45&source=grm").json()
    assert {s["sample"].split("-")[1] for s in rewards["samples"]} == {"3", "4"} and rewards["matched"] == 60
    assert c.get("/api/samples?stage=grpo&min=0.85").json()["matched"] == 0  # i = 9 is unscored
    moon = c.get("/api/samples?stage=grpo&criterion=MOON").json()
    wanted = {f"{s}-{i}" for s in range(1, 31) for i in range(5) if (s + i) % 3 == 0}
    assert {s["sample"] for s in moon["samples"]} == wanted and all(s["criteria"] == 1 for s in moon["samples"])
    flagged = c.get("/api/samples?stage=grpo&flag=logp_mismatch").json()
    assert sorted({s["step"] for s in flagged["samples"]}) == [4, 5, 6, 20]  # recomputed for a run that logged none
    assert flagged["steps"] == [[4, 6], [20, 20]]
    assert c.get("/api/samples?stage=grpo&flag=entropy_floor").json()["matched"] == 0  # never fired
    detail = c.get("/api/sample?stage=grpo&id=12-3").json()
    assert detail["row"]["reason"] == "reason 12-3" and detail["scoreboard"]["rubric"][0]["text"] == "mentions the moon"
    assert c.get("/api/samples?stage=grpo&steps=4-x").json() == {"error": "steps: '4-x' is not a step or a range A-B"}


def test_the_health_api_lists_each_check_with_its_steps(tmp_path):
    folder = rollouts_folder(tmp_path)
    (folder / "config.resolved.yaml").write_text("name: h\nhealth: {logp_mismatch_max: 0.1}\nstages: []\n")
    (job,) = client(folder).get("/api/health").json()[0]["jobs"]
    assert (job["stage"], job["job"], job["rollouts"], job["source"]) == ("grpo", None, "grpo", "recomputed")
    fired = {c["name"]: c for c in job["checks"] if c["count"]}
    assert list(fired) == ["logp_mismatch"]
    assert fired["logp_mismatch"]["steps"] == [[4, 6], [20, 20]] and fired["logp_mismatch"]["last_value"] == 0.2
    assert fired["logp_mismatch"]["rule"] == "> 0.1 (health.logp_mismatch_max)"
    (folder / "config.resolved.yaml").write_text("health: {window: 1}\n")
    assert "health" in client(folder).get("/api/health").json()[0]["config_problem"]


def test_bad_queries_get_a_clear_400(tmp_path):
    c = client(tmp_path)
    assert c.get("/api/samples?run=3").json() == {"error": "run must be 0..0"}
    assert c.get("/api/samples?min=abc").json() == {"error": "min must be a number, got 'abc'"}
    assert c.get("/api/job").status_code == 400
    assert c.get("/api/sample?stage=grpo&id=1-0").status_code == 404


def test_the_token_is_required_on_every_request(tmp_path):
    c = client(tmp_path, token="s3cret")
    assert c.get("/api/pipeline").status_code == 401
    assert c.get("/static/app.js").status_code == 401
    assert c.get("/api/pipeline", headers={"Authorization": "Bearer s3cret"}).status_code == 200
    assert c.get("/?token=s3cret").status_code == 200  # sets the cookie the page's requests carry
    assert c.get("/api/pipeline").status_code == 200


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1", "127.0.0.2"])
def test_loopback_binds_need_no_token(host):
    check_bind(host, None)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.5", "example.org"])
def test_other_binds_need_a_token(host):
    with pytest.raises(DashboardError, match=f"--host {host} is reachable from other machines: give --token"):
        check_bind(host, None)
    check_bind(host, "t")


def test_a_missing_run_folder_is_refused(tmp_path):
    with pytest.raises(DashboardError, match="no such run folder"):
        create_app([str(tmp_path / "nope")])


RAY_WITH_DASHBOARD = """
from posttrain.config.files import validate_pipeline
from posttrain.runtime.infra import start_ray
config = validate_pipeline({"model": {"name": "tiny"}, "ray": {"dashboard": True, "num_cpus": 1}, "stages": [
    {"name": "s", "type": "sft", "steps": 1, "lr": 1e-3,
     "data": {"type": "reasoning_gym", "families": [{"name": "chain_sum"}]}}]})
start_ray(config, verbose=False)
"""


def test_a_run_prints_the_ray_dashboard_url():
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", RAY_WITH_DASHBOARD], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = next(line for line in proc.stdout.splitlines() if line.startswith("Ray dashboard"))
    assert line.startswith("Ray dashboard (local): http://127.0.0.1:"), line


def test_a_nan_that_json_dumps_wrote_is_read_and_served(tmp_path):
    (tmp_path / "rollouts").mkdir()
    row = {"stage": "grpo", "step": 1, "sample": "1-0", "reward": float("nan"), "ok": False, "source": "user"}
    (tmp_path / "rollouts" / "grpo.jsonl").write_text(json.dumps(row) + "\n")  # json.dumps writes NaN
    c = client(tmp_path)
    found = c.get("/api/samples?stage=grpo").json()
    assert found["total"] == 1 and found["samples"][0]["reward"] == "nan"
    assert c.get("/api/samples?stage=grpo&min=-1").json()["matched"] == 0  # unscored: no reward bound passes
    assert c.get("/api/sample?stage=grpo&id=1-0").json()["row"]["reward"] == "nan"


# ------------------------------------------------------------ hostile files (issue 33)
# Rows that are whole JSON but not rows of their file, torn lines, unreadable YAML and JSON:
# every view answers 200, each bad row is named (file, line, why) and counted once however
# many polls, nothing is added twice, and a fixed file is read again.

VIEWS = ("/api/pipeline", "/api/job?stage=grpo", "/api/health", "/api/eval", "/api/samples?stage=grpo", "/api/runs")


def problems_of(c, path: str) -> dict:
    found = c.get(path).json()
    found = found[0] if isinstance(found, list) else found
    return found["problems"]


def test_rows_of_the_wrong_type_are_skipped_named_and_counted_once(tmp_path):
    rows = [{"stage": "grpo", "step": s, "time": 0.0, "reward/mean": s / 10} for s in (1, 2, 3)]
    bad = [
        {"stage": "grpo", "job": ["x"], "step": 4, "reward/mean": 9.0},  # a list as the job
        {"stage": "grpo", "step": "abc", "reward/mean": 9.0},  # a string step
        {"stage": "grpo", "step": 10**30, "reward/mean": 9.0},  # a step no array can hold
        [1, 2],
    ]
    good = {"stage": "grpo", "step": 4, "time": 0.0, "reward/mean": 0.4}
    text = "".join(json.dumps(r) + "\n" for r in rows + bad + [good])
    (tmp_path / "metrics.jsonl").write_text(text)
    c = client(tmp_path)
    for _ in range(4):  # every poll: 200, the same counts, nothing added twice
        for view in VIEWS:
            assert c.get(view).status_code == 200, view
        pipeline = c.get("/api/pipeline").json()[0]
        assert pipeline["rows"] == 4
        (report,) = pipeline["problems"]["bad_rows"]
        assert report["file"] == "metrics.jsonl" and report["count"] == 4
        assert [e["line"] for e in report["examples"]] == [4, 5, 6, 7]
        whys = [e["why"] for e in report["examples"]]
        assert whys[0] == "job: ['x'] is a list, not a string"
        assert whys[1] == "step: 'abc' is a string, not a number"
        assert "step" in whys[2] and whys[3] == "a JSON list, not an object"
        series = c.get("/api/job?stage=grpo").json()[0]
        assert series["plots"]["reward"]["series"]["reward/mean"]["y"] == [0.1, 0.2, 0.3, 0.4]
        assert series["problems"] == pipeline["problems"]


def test_a_torn_line_followed_by_a_whole_row_keeps_the_row(tmp_path):
    whole = {"stage": "grpo", "step": 2, "time": 0.0, "reward/mean": 0.2}
    first = {"stage": "grpo", "step": 1, "time": 0.0, "reward/mean": 0.1}
    torn = '{"stage": "grpo", "step": 9, "rew'  # a writer stopped here; the next one appended a whole row
    (tmp_path / "metrics.jsonl").write_text(json.dumps(first) + "\n" + torn + json.dumps(whole) + "\n")
    c = client(tmp_path)
    series = c.get("/api/job?stage=grpo").json()[0]
    assert series["plots"]["reward"]["series"]["reward/mean"]["y"] == [0.1, 0.2] and series["last_step"] == 2
    (report,) = series["problems"]["bad_rows"]
    assert report["count"] == 1 and report["examples"] == [
        {"line": 2, "why": f"torn line ({len(torn)} bytes) before a whole row"}
    ]


def bad_rollouts(tmp_path, step_of_row_5):
    folder = rollouts_folder(tmp_path, steps=3, per_step=4)
    path = folder / "rollouts" / "grpo.jsonl"
    lines = path.read_text().splitlines()
    row = json.loads(lines[5])
    row["step"] = step_of_row_5
    lines[5] = json.dumps(row)
    path.write_text("\n".join(lines) + "\n")
    return folder, path, row


def test_a_bad_rollouts_row_is_skipped_and_the_filters_work_after_it_is_fixed(tmp_path):
    folder, path, row = bad_rollouts(tmp_path, "two")
    c = client(folder)
    for _ in range(3):
        found = c.get("/api/samples?stage=grpo").json()
        assert (found["total"], found["matched"]) == (11, 11)  # never added twice
        (report,) = found["problems"]["bad_rows"]
        assert report == {
            "file": "rollouts/grpo.jsonl",
            "count": 1,
            "examples": [{"line": 6, "why": "step: 'two' is a string, not an integer"}],
        }
        assert c.get("/api/samples?stage=grpo&steps=2").json()["matched"] == 3
        assert c.get("/api/samples?stage=grpo&min=0.05").json()["matched"] == 8  # 3 steps x 3, less the bad
        assert c.get(f"/api/sample?stage=grpo&id={row['sample']}").status_code == 404
    lines = path.read_text().splitlines()
    lines[5] = json.dumps(dict(row, step=2))
    path.write_text("\n".join(lines) + "\n")  # fixed in place: read again, no restart
    fixed = c.get("/api/samples?stage=grpo&steps=2").json()
    assert fixed["total"] == 12 and fixed["matched"] == 4 and fixed["problems"]["bad_rows"] == []
    assert c.get("/api/samples?stage=grpo&min=0.05").json()["matched"] == 9


def test_unreadable_yaml_and_json_are_named_and_torn_is_not_missing(tmp_path):
    rollouts_folder(tmp_path, steps=2, per_step=2)
    (tmp_path / "config.resolved.yaml").write_text("name: x\nstages: [\n  - {name: a\n")
    (tmp_path / "run_state.json").write_text('{"stages": {"grpo": {"status": "done", "seconds": "long"}}}')
    (tmp_path / "eval.json").write_text('{"stage": "eval", "rows": [{"checkpoint": "a", "sc')
    c = client(tmp_path)
    for view in VIEWS:
        assert c.get(view).status_code == 200, view
    files = {f["file"]: f["why"] for f in problems_of(c, "/api/pipeline")["files"]}
    assert files["config.resolved.yaml"].startswith("not valid YAML (") and "line" in files["config.resolved.yaml"]
    assert files["run_state.json"] == "stages.grpo.seconds: 'long' is not a number"
    ev = c.get("/api/eval").json()[0]
    assert ev["missing"] == [] and ev["grids"] == []
    assert {f["file"]: f["why"] for f in ev["problems"]["files"]}["eval.json"].startswith("not valid JSON (")
    (tmp_path / "eval.json").write_text(
        json.dumps({"rows": [{"checkpoint": "a", "domain": "general", "effort": "max", "score": "high"}]})
    )
    ev = c.get("/api/eval").json()[0]
    assert ev["problems"]["bad_rows"] == [
        {
            "file": "eval.json",
            "count": 1,
            "examples": [{"line": "rows[0]", "why": "score: 'high' is a string, not a number"}],
        }
    ]


def test_a_sample_over_the_limit_is_sent_cut_with_a_link_to_the_whole(tmp_path):
    from posttrain.dashboard.data import CUT_CHARS, SAMPLE_LIMIT

    folder = rollouts_folder(tmp_path, steps=1, per_step=2)
    path = folder / "rollouts" / "grpo.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows[1]["response"] = "x" * (2 * SAMPLE_LIMIT)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    c = client(folder)
    small = c.get("/api/sample?stage=grpo&id=1-0").json()
    assert small["cut"] is None and small["row"]["response"] == rows[0]["response"]
    big = c.get("/api/sample?stage=grpo&id=1-1").json()
    assert big["cut"]["bytes"] == len(json.dumps(rows[1]).encode())
    assert big["row"]["response"].startswith("x" * CUT_CHARS) and len(big["row"]["response"]) < CUT_CHARS + 100
    assert "524,288 characters in all" in big["row"]["response"]
    whole = c.get("/api/sample_raw?stage=grpo&id=1-1")
    assert whole.status_code == 200 and json.loads(whole.content)["response"] == rows[1]["response"]


def test_the_eval_view_serves_the_paired_comparisons_and_marks_those_beyond_two_se(tmp_path):
    rows = [eval_row("experts/general-max", "expert", "general", "max", 0.75)]
    found = [
        {"kind": "student_minus_teacher", "a": "mopd@general-max", "b": "experts/general-max@general-max",
         "domain": "general", "effort": "max", "diff": -0.05, "se": 0.04, "n": 40},
        {"kind": "max_minus_low", "a": "experts/general-max@general-max", "b": "experts/general-low@general-low",
         "domain": "general", "effort": "max", "diff": 0.25, "se": 0.05, "n": 40},
        {"kind": "expert_minus_sft", "a": "x", "b": "y", "diff": "big", "se": 0.1, "n": 3},
    ]  # fmt: skip
    (tmp_path / "eval.json").write_text(json.dumps({"rows": rows, "comparisons": found}))
    ev = client(tmp_path).get("/api/eval").json()[0]
    shown = [(c["kind"], c["title"], c["diff"], c["se"], c["beyond"]) for c in ev["comparisons"]]
    assert shown == [
        ("max_minus_low", "max − low effort", 0.25, 0.05, True),
        ("student_minus_teacher", "student − teacher", -0.05, 0.04, False),
    ]
    assert ev["problems"]["bad_rows"][0]["examples"] == [
        {"line": "comparisons[2]", "why": "diff: 'big' is a string, not a number"}
    ]


def test_every_metric_has_a_unit_and_a_plot_holds_at_most_two():
    from posttrain.dashboard.series import layout, unit_of

    assert unit_of("time/generate_s") == "seconds" and unit_of("grm/latency_s") == "seconds"
    assert unit_of("offpolicy/token_frac") == "fraction" and unit_of("queue/depth") == "trajectories"
    assert unit_of("response_tokens/mean") == "tokens" and unit_of("throughput/tokens_per_s") == "tokens/s"
    assert unit_of("mopd/reverse_kl/t1") == "nats" and unit_of("reward_source/grm") == "reward"
    plots = layout(plot_groups(["queue/depth", "staleness/mean", "offpolicy/token_frac", "reward/mean"]), set())
    assert plots["reward"]["axes"] == ["reward"]
    split = [t for t in plots if t.startswith("queue depth, staleness, off-policy (")]
    assert len(split) == 3 and all(len(plots[t]["axes"]) == 1 for t in split)
    two = layout({"reward": ["reward/mean", "reward/over_budget_frac"]}, set())
    assert two["reward"]["axes"] == ["reward", "fraction"]
    folded = layout({"reward": ["reward/mean"], "health flags": ["health/flags"]}, {"health/flags"})
    assert list(folded) == ["reward"]


def test_rewards_show_filters_by_source_and_verifier(tmp_path, capsys):
    from posttrain.cli import main

    folder = rollouts_folder(tmp_path, steps=3, per_step=10)
    (folder / "config.resolved.yaml").write_text("name: r\nstages: [{name: grpo, type: rl}]\n")
    assert main(["rewards", "show", str(folder), "--source", "grm"]) == 0
    out = capsys.readouterr().out
    assert "stage grpo: 15 samples with source grm at steps 1-3" in out
    listed = [line.split()[0] for line in out.splitlines()[3:]]
    assert listed == [f"3-{i}" for i in range(5)]  # the last step with such samples, those only
    assert main(["rewards", "show", str(folder), "--source", "rg", "--step", "1"]) == 0
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()[3:]] == [f"1-{i}" for i in range(5, 10)]
    assert main(["rewards", "show", str(folder), "--verifier", "grm", "--worst", "2"]) == 0
    assert capsys.readouterr().out.count("=== grpo step") == 2
    assert main(["rewards", "show", str(folder), "--verifier", "code"]) == 2
    assert "no saved samples with verifier 'code' in any stage (have sources: grm, rg; verifiers: grm)" in (
        capsys.readouterr().err
    )


def test_the_reward_debugger_filters_by_verifier_and_opens_on_the_newest_rl_stage(tmp_path):
    folder = rollouts_folder(tmp_path, steps=2, per_step=10)
    cell = folder / "rollouts" / "eval" / "sft" / "general-max.jsonl"
    cell.parent.mkdir(parents=True)
    cell.write_text((folder / "rollouts" / "grpo.jsonl").read_text())
    (folder / "config.resolved.yaml").write_text(
        "name: r\nstages: [{name: sft, type: sft}, {name: grpo, type: rl}, {name: eval, type: eval}]\n"
    )
    c = client(folder)
    found = c.get("/api/samples").json()
    assert found["stages"] == ["eval/sft/general-max", "grpo"] and found["stage"] == "grpo"
    assert found["sources"] == {"grm": 10, "rg": 10} and found["verifiers"] == {"grm": 20}
    assert c.get("/api/samples?stage=grpo&verifier=grm").json()["matched"] == 20
    assert c.get("/api/samples?stage=grpo&verifier=code").json()["matched"] == 0


def test_rewards_show_into_a_closed_pipe_ends_quietly_and_leaves_sigpipe_alone(tmp_path):
    """`posttrain rewards show RUN | head -1` exits 0 with nothing on stderr, and calling the
    CLI in-process leaves the process's SIGPIPE disposition as Python set it (ignored):
    with SIGPIPE at its default, this test process was later killed outright when an HTTP
    server thread of another test wrote to a socket its client had closed."""
    import signal
    import subprocess
    import sys

    from posttrain.cli import main

    folder = rollouts_folder(tmp_path, steps=3, per_step=400)
    (folder / "config.resolved.yaml").write_text("name: r\nstages: [{name: grpo, type: rl}]\n")
    before = signal.getsignal(signal.SIGPIPE)
    assert main(["rewards", "show", str(folder), "--worst", "1"]) == 0
    assert signal.getsignal(signal.SIGPIPE) == before == signal.SIG_IGN
    piped = subprocess.run(
        f"{sys.executable} -m posttrain.cli rewards show {folder} --worst 1200 | head -1",  # ~200 kB, past the buffer
        shell=True, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert piped.returncode == 0 and piped.stdout.startswith("=== grpo step"), piped.stdout
    assert "Traceback" not in piped.stderr and "BrokenPipe" not in piped.stderr, piped.stderr[-2000:]


def test_health_values_are_plotted_in_their_metrics_units_apart_from_the_flag_count():
    from posttrain.dashboard.series import layout, unit_of

    assert unit_of("health/flags") == "flagged (count)"
    assert unit_of("health/truncated") == "fraction" and unit_of("health/entropy_floor") == "nats"
    plots = layout(plot_groups(["health/flags", "health/truncated", "health/dropped"]), set())
    health = {t: p for t, p in plots.items() if t.startswith("health flags")}
    assert sorted(a for p in health.values() for a in p["axes"]) == ["flagged (count)", "fraction"]
    for p in health.values():  # no fraction on the count's axis
        assert all(p["units"][k] == ("flagged (count)" if k == "health/flags" else "fraction") for k in p["keys"])


def test_a_run_with_no_eval_stage_says_so_instead_of_a_missing_file(tmp_path):
    (tmp_path / "config.resolved.yaml").write_text("name: r\nstages: [{name: grpo, type: rl}]\n")
    ev = client(tmp_path).get("/api/eval").json()[0]
    assert ev["missing"] == [] and ev["note"] == "this run has no eval stage (eval.json is written by one)"
    (tmp_path / "config.resolved.yaml").write_text(
        "name: r\nstages: [{name: grpo, type: rl}, {name: ev, type: eval}]\n"
    )
    assert client(tmp_path).get("/api/eval").json()[0]["missing"] == ["eval.json"]  # not written yet
    assert "e.note" in (ROOT_STATIC / "app.js").read_text()  # the view shows the note


def css_rules(text: str) -> list[tuple[list[str], dict[str, str]]]:
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.DOTALL)
    rules = []
    for selectors, body in re.findall(r"([^{}]+)\{([^{}]*)\}", text):
        props = dict(p.split(":", 1) for p in body.split(";") if ":" in p)
        rules.append(([s.strip() for s in selectors.split(",")], {k.strip(): v.strip() for k, v in props.items()}))
    return rules


def test_table_headers_wrap_between_words_only():
    # the cascade for a bare `th`: the last rule naming it decides how its text may break
    found = {}
    for selectors, props in css_rules((ROOT_STATIC / "style.css").read_text()):
        if "th" in selectors:
            found.update({k: v for k, v in props.items() if k in ("overflow-wrap", "word-break")})
    assert found.get("overflow-wrap", "normal") in ("normal", "break-word"), found
    assert found.get("word-break", "normal") in ("normal", "keep-all"), found


def test_the_pipeline_view_gives_each_stages_startup_by_phase(tmp_path):
    phases = {"preflight": 2.5, "ray": 4.0, "slot": 1.5, "data": 0.5, "trainers": 9.0, "engines": 3.0}
    first = {f"startup/{k}_s": v for k, v in phases.items()} | {"startup/total_s": 21.0}
    rows = [
        {"stage": "grpo", "step": 1, "time": 0.0, "reward/mean": 0.1, **first},
        {"stage": "grpo", "step": 2, "time": 1.0, "reward/mean": 0.2},
        {"stage": "experts", "job": "general-max", "step": 1, "time": 2.0, "startup/total_s": 30.0},
        {"stage": "experts", "job": "general-high", "step": 1, "time": 3.0, "reward/mean": 0.0},
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "config.resolved.yaml").write_text(
        "name: s\nstages: [{name: grpo, type: rl}, {name: experts, type: experts}, {name: eval, type: eval}]\n"
    )
    stages = {s["name"]: s for s in client(tmp_path).get("/api/pipeline").json()[0]["stages"]}
    assert stages["grpo"]["startup"] == {**phases, "total": 21.0}  # as step 1 logged it, kept after step 2
    assert stages["experts"]["startup"] == {"total": 30.0}  # its first job's
    assert stages["eval"]["startup"] == {}
    app_js = (ROOT_STATIC / "app.js").read_text()
    assert "startupCell(s.startup)" in app_js and "<th>start-up</th>" in app_js
