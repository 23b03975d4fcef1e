"""The saved rollouts, the scoreboard and `posttrain rewards show / replay / try`, on a
real run folder: a short GRPO stage through the CLI whose writing prompts are scored by
the GRM with a real (tiny, random-weight) judge served by vLLM."""

import json
import subprocess
import sys

import pytest
import yaml

ROW_FIELDS = {
    "stage",
    "step",
    "sample",
    "group",
    "task_id",
    "family",
    "verifier",
    "messages",
    "answer",
    "entry",
    "response",
    "prompt_tokens",
    "response_tokens",
    "finish_reason",
    "reward",
    "ok",
    "reason",
    "source",
    "details",
    "budget",
    "policy_version",
}


def judge_config(judge_dir) -> dict:
    return {
        "judge": {"type": "vllm", "model": str(judge_dir), "max_model_len": 1536, "kv_cache_gib": 0.25},
        "length_cap": 16,
        "max_criteria": 3,
        "retries": 2,
    }


def cli(*args, timeout=600):
    proc = subprocess.run(
        [sys.executable, "-m", "posttrain.cli", *args], capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.fixture(scope="module")
def judge_dir(tmp_path_factory):
    from posttrain.config import TinyModelConfig
    from posttrain.models import build_tiny

    return build_tiny(TinyModelConfig(max_position=2048), seed=0, target=tmp_path_factory.mktemp("judge") / "tiny")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, judge_dir):
    root = tmp_path_factory.mktemp("grm-run")
    pipeline = {
        "name": "grm-e2e",
        "model": {"name": "tiny"},
        "rollout": {"max_model_len": 256},
        "trainer": {"workers": 1},
        "stages": [
            {
                "name": "grpo",
                "type": "rl",
                "steps": 2,
                "lr": 1e-4,
                "prompts_per_step": 4,
                "group_size": 2,
                "max_tokens": 12,
                "reward": {"grm": judge_config(judge_dir)},
                "tasks": {
                    "type": "mixture",
                    "sources": [
                        {
                            "type": "reasoning_gym",
                            "families": [{"name": "basic_arithmetic", "params": {"max_digits": 1}}],
                            "size": 8,
                            "seed": 5,
                        },
                        {"type": "writing", "size": 8, "seed": 5},
                    ],
                },
            }
        ],
    }
    (root / "p.yaml").write_text(yaml.safe_dump(pipeline))
    cli("run", str(root / "p.yaml"), "--run-dir", str(root / "run"))
    return root / "run"


def rows_of(run_dir):
    return [json.loads(line) for line in (run_dir / "rollouts" / "grpo.jsonl").read_text().splitlines()]


def test_every_sample_is_saved_and_grm_samples_are_on_the_scoreboard(run_dir):
    rows = rows_of(run_dir)
    assert sorted({r["step"] for r in rows}) == [1, 2] and len(rows) == 16
    assert all(ROW_FIELDS <= set(r) for r in rows)
    grm_rows = [r for r in rows if r["source"] == "grm"]
    assert grm_rows and {r["source"] for r in rows} == {"grm", "reasoning_gym"}
    board = [json.loads(line) for line in (run_dir / "scoreboard.jsonl").read_text().splitlines()]
    assert sorted(e["sample"] for e in board) == sorted(r["sample"] for r in grm_rows)
    by_id = {r["sample"]: r for r in grm_rows}
    for entry in board:
        assert (
            entry["score"] == by_id[entry["sample"]]["reward"] and entry["task_id"] == by_id[entry["sample"]]["task_id"]
        )
        assert entry["status"] == "scored" and len(entry["verdicts"]) == len(entry["rubric"]) == 3
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    with_grm = [m for m in metrics if "grm/score_mean" in m]
    assert with_grm and all(
        k in with_grm[0] for k in ("grm/unscored", "grm/cache_hit", "grm/latency_s", "grm/length_capped")
    )


def test_show_prints_the_rubric_verdicts_and_reasons(run_dir):
    grm_row = next(r for r in rows_of(run_dir) if r["source"] == "grm")
    entry = next(
        json.loads(line)
        for line in (run_dir / "scoreboard.jsonl").read_text().splitlines()
        if json.loads(line)["sample"] == grm_row["sample"]
    )
    out = cli("rewards", "show", str(run_dir), "--sample", grm_row["sample"])
    assert grm_row["messages"][-1]["content"] in out and grm_row["response"].strip()[:5] in out
    for criterion, verdict in zip(entry["rubric"], entry["verdicts"]):
        assert criterion["text"].split()[0] in out and verdict["reason"][:20] in out
    table = cli("rewards", "show", str(run_dir), "--step", "1")
    assert table.count("\n") == 2 + 8  # header lines and one line per sample of the step
    worst = cli("rewards", "show", str(run_dir), "--worst", "3")
    assert worst.count("=== grpo step") == 3


def test_replay_with_the_same_config_changes_nothing_and_a_lower_cap_shows_the_shift(run_dir):
    same = cli("rewards", "replay", str(run_dir), "--stage", "grpo")
    assert "replayed 16 samples" in same and "no reward changed" in same
    capped = cli("rewards", "replay", str(run_dir), "-o", "reward.grm.length_cap=4", "--top", "2")
    grm_line = next(line for line in capped.splitlines() if line.startswith("grm "))
    n_grm = sum(r["source"] == "grm" for r in rows_of(run_dir))
    assert "-> -1.000" in grm_line and grm_line.split()[-1] == str(n_grm)  # every GRM sample moved to -1
    assert "2 samples whose reward changed most" in capped and "now: over length cap: 12 > 4 tokens" in capped


def test_replay_with_the_pairwise_method_ranks_each_steps_groups(run_dir):
    out = cli("rewards", "replay", str(run_dir), "--stage", "grpo", "-o", "reward.grm.method=pairwise")
    parts = next(line for line in out.splitlines() if line.startswith("grm ")).split()
    # each step's groups of two are judged against each other (both orders): the scores of a
    # group sum to 0, so their mean is 0, and none is left unscored
    assert float(parts[4]) == pytest.approx(0.0, abs=1e-6) and parts[-2] == "0", out


@pytest.mark.system
def test_try_prints_one_json_object_with_the_whole_procedure(tmp_path, judge_dir):
    (tmp_path / "reward.yaml").write_text(yaml.safe_dump({"grm": judge_config(judge_dir)}))
    out = cli(
        "rewards",
        "try",
        "--task",
        "Write a haiku about rain.",
        "--response",
        "Rain taps the window.",
        "--reward",
        str(tmp_path / "reward.yaml"),
        "--json",
    )
    result = json.loads(out.strip().splitlines()[-1])
    assert result["ok"] and -1 <= result["score"] <= 1 and result["status"] == "scored"
    assert len(result["rubric"]) == len(result["verdicts"]) == 3
    assert all(v["verdict"] in ("yes", "no") and v["reason"] for v in result["verdicts"])
    assert result["judge_model"].startswith(str(judge_dir))
    assert not result["procedure_version"].endswith("/bare")
    # a judge named on the command line (as a judge stage's checkpoint is), without worked examples
    out = cli(
        "rewards", "try", "--task", "Say YES.", "--response", "YES", "--judge", str(judge_dir), "--bare", "--json"
    )
    named = json.loads(out.strip().splitlines()[-1])
    assert (
        named["ok"] and named["judge_model"].startswith(str(judge_dir)) and named["procedure_version"].endswith("/bare")
    )


@pytest.mark.system
def test_try_scores_several_responses_against_each_other_with_the_pairwise_method(tmp_path, judge_dir):
    out = cli(
        "rewards", "try", "--task", "Name the capital of France.", "--response", "Paris.", "--response", "Lyon.",
        "--response", "Paris.", "--judge", str(judge_dir), "--bare", "--method", "pairwise", "--json",
    )  # fmt: skip
    result = json.loads(out.strip().splitlines()[-1])
    first, second, third = result["responses"]
    assert first["ok"] and second["ok"] and first == third  # the same response is judged once
    assert first["score"] == pytest.approx(-second["score"], abs=1e-3)  # one comparison: relative scores
    (row,) = first["comparisons"]
    assert row["opponent"] == "Lyon." and len(row["raw"]) == 2 and 0 <= row["win"] <= 1
    assert first["procedure_version"].startswith("pairwise-v3/")
    alone = cli("rewards", "try", "--task", "Say YES.", "--response", "YES", "--judge", str(judge_dir), "--bare",
                "--method", "pairwise", "--json")  # fmt: skip
    lone = json.loads(alone.strip().splitlines()[-1])
    assert not lone["ok"] and "only one to its task" in lone["reason"]
