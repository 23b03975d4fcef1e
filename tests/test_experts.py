"""The experts stage and the eval stage.

Unit: how a job's RL stage is derived (effort chain, budget annealing), the placement
plan, config errors. End to end, on real Ray, vLLM and DeepSpeed: a pipeline SFT -> nine
experts -> MOPD from the experts -> eval, in which a trainer rank is SIGKILLed during one
expert job (the job goes on from its checkpoint, the accounting stays whole) and then
the driver itself is SIGKILLed during a later job; `posttrain run --resume` finishes the
run without rerunning finished jobs, and eval.json has every cell.
"""

import json
import os
import signal
import time

import psutil
import pytest
import yaml
from cli_process import start_cli
from sample_accounting import assert_accounting_matches_rollouts

from posttrain.config import PipelineConfig
from posttrain.config.files import ConfigError, load_pipeline

GENERAL = {
    "type": "reasoning_gym",
    "families": [{"name": "basic_arithmetic", "params": {"max_digits": 1}}],
    "size": 30,
    "seed": 5,
}
EXPERTS = {
    "name": "experts",
    "type": "experts",
    "steps": 3,
    "lr": 1e-4,
    "prompts_per_step": 2,
    "group_size": 4,
    "max_tokens": 20,
    "save_every": 1,
    "partial": {"lambda": 0.75, "max_staleness": 4},
    "domains": {
        "general": GENERAL,
        "coding": {"type": "coding", "size": 10, "seed": 5},
        "agent": {"type": "agent", "size": 10, "seed": 5, "families": ["calculator"], "system_prompt": ""},
    },
    "efforts": {
        "max": {"tokens": 16},
        "high": {"tokens": {"general": 8, "coding": 12, "agent": 12}},
        "low": {"tokens": 4, "steps": 4},
    },
    "anneal": {"steps": 2},
}
PIPELINE = {
    "name": "experts-e2e",
    "model": {"name": "tiny"},
    "rollout": {"max_model_len": 320},
    "trainer": {"workers": 2},
    "stages": [
        {
            "name": "sft",
            "type": "sft",
            "steps": 3,
            "lr": 1e-3,
            "batch_size": 8,
            "think": {"max_words": 3},
            "data": {"type": "reasoning_gym", "families": [{"name": "basic_arithmetic"}], "size": 50},
        },
        EXPERTS,
        {
            "name": "mopd",
            "type": "mopd",
            "experts": "experts",
            "init_from": "sft",
            "steps": 2,
            "lr": 1e-4,
            "prompts_per_step": 9,
            "group_size": 2,
            "max_tokens": 20,
            "teacher_pool": {"memory_gib": 1},
        },
        {"name": "eval", "type": "eval", "checkpoints": ["sft", "experts", "mopd"], "tasks_per_cell": 3},
    ],
}
CELLS = [(d, e) for e in ("max", "high", "low") for d in ("general", "coding", "agent")]


def config(**changes) -> PipelineConfig:
    data = json.loads(json.dumps(PIPELINE))
    for key, value in changes.items():
        target = data
        *path, last = key.split(".")
        for part in path:
            target = target[int(part)] if part.isdigit() else target[part]
        target[last] = value
    return PipelineConfig.model_validate(data)


# ---------------------------------------------------------------- unit


def test_jobs_chain_efforts_and_anneal_budgets():
    from posttrain.config.jobs import expert_jobs

    jobs = expert_jobs(config().stages[1])
    assert list(jobs) == [f"{d}-{e}" for d, e in CELLS]
    assert jobs["general-max"].after is None and jobs["general-high"].after == "general-max"
    assert jobs["coding-low"].after == "coding-high"
    stage = jobs["general-max"].stage
    assert stage.name == "experts/general-max" and stage.budget.tokens == 16 and stage.budget.effort == "max"
    assert stage.tasks.type == "reasoning_gym" and stage.steps == 3 and stage.save_every == 1
    high = jobs["coding-high"].stage.budget.anneal
    assert (high.start, high.end, high.steps) == (16, 12, 2)  # from max's budget down to high's
    low = jobs["general-low"].stage
    assert (low.budget.anneal.start, low.budget.anneal.end) == (8, 4) and low.steps == 4
    no_anneal = expert_jobs(config(**{"stages.1.anneal": None}).stages[1])
    assert no_anneal["general-high"].stage.budget.tokens == 8 and no_anneal["general-high"].stage.budget.anneal is None
    assert all(j.stage.budget.margin == 0.25 for j in jobs.values())  # the default


def test_experts_budget_takes_a_margin_and_nothing_else():
    from posttrain.config.jobs import expert_jobs

    jobs = expert_jobs(config(**{"stages.1.budget": {"margin": 0.5}}).stages[1])
    assert {j.stage.budget.margin for j in jobs.values()} == {0.5}
    with pytest.raises(ValueError, match="takes `margin` only"):
        config(**{"stages.1.budget": {"tokens": 10}})


def test_placement_plan_spreads_slots_over_nodes():
    from posttrain.runtime.slots import plan, slot_bundles

    cfg = config()
    assert [b["CPU"] for b in slot_bundles(cfg)] == [1, 1, 1]  # engine, two trainer ranks
    nodes = [{"node": n, "resources": {"CPU": 4}} for n in ("head", "w1", "w2")]
    placed = plan(cfg, nodes, 4)
    assert [p["node"] for p in placed] == ["head", "w1", "w2", None]  # the fourth waits


@pytest.mark.parametrize(
    "key,value,message",
    [
        ("stages.1.domains", {"math": GENERAL}, "stages[1].domains.math"),
        ("stages.1.efforts", {"medium": {"tokens": 4}}, "stages[1].efforts.medium"),
        ("stages.1.efforts", {"max": {"tokens": 40}}, "needs max_tokens above it"),
        ("stages.1.efforts", {"max": {"tokens": {"general": 4}}}, "efforts.max: tokens has no budget for domain"),
        ("stages.1.budget", {"tokens": 4}, "set the budgets per effort"),
        ("stages.2.experts", "nope", "stages[2] (mopd).experts: 'nope' names no earlier experts stage"),
        ("stages.2.init_from", "experts", "name one of its jobs, e.g. 'experts/"),
        ("stages.2.init_from", "experts/general-mid", "has no job 'general-mid'"),
        ("stages.3.checkpoints", ["sft", "later"], "stages[3] (eval).checkpoints[1]: 'later' names no earlier stage"),
        ("stages.3.checkpoints", ["eval"], "names no earlier stage"),
    ],
)
def test_broken_experts_configs_name_the_problem(tmp_path, key, value, message):
    data = json.loads(json.dumps(PIPELINE))
    target = data
    *path, last = key.split(".")
    for part in path:
        target = target[int(part)] if part.isdigit() else target[part]
    target[last] = value
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as err:
        load_pipeline(tmp_path / "p.yaml")
    assert message in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_eval_needs_an_experts_stage(tmp_path):
    data = json.loads(json.dumps(PIPELINE))
    data["stages"] = [data["stages"][0], data["stages"][3] | {"checkpoints": ["sft"]}]
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=r"stages\[1\] \(eval\)\.experts: name the experts stage"):
        load_pipeline(tmp_path / "p.yaml")


# ---------------------------------------------------------------- end to end with faults


def cli(*args):
    # Ray's memory monitor watches the whole machine: other programs' memory would get this
    # run's actors killed (as faults this test did not plan)
    return start_cli(*args, env={"RAY_memory_monitor_refresh_ms": "0"})


def wait_for(predicate, proc, seconds, what):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if predicate():
            return
        if proc.poll() is not None:
            raise AssertionError(f"run ended before {what}: {proc.communicate()[0][-3000:]}")
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def state(run):
    try:
        return json.loads((run / "run_state.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {"stages": {}}


def jobs(run):
    return state(run)["stages"].get("experts", {}).get("jobs", {})


FAULTED_RUN_WAITS = 2000  # the first test to ask for faulted_run pays its waits: 400 + 600 + 900 s


@pytest.fixture(scope="module")
def faulted_run(tmp_path_factory):
    """The pipeline with two faults; returns (run folder, facts seen before the resume)."""
    root = tmp_path_factory.mktemp("experts")
    (root / "p.yaml").write_text(yaml.safe_dump(PIPELINE, sort_keys=False))  # jobs: general, coding, agent
    run = root / "run"
    proc = cli("run", str(root / "p.yaml"), "--run-dir", str(run))
    facts = {}
    try:
        # fault 1: a trainer rank dies in general-max (the first job) after its first checkpoint
        ckpt = run / "checkpoints" / "experts" / "general-max"
        wait_for(lambda: (ckpt / "step_000001" / "rollout_state.json").exists(), proc, 400, "general-max step 1")
        ranks = [
            p for p in psutil.Process(proc.pid).children(recursive=True) if "TrainerWorker" in " ".join(p.cmdline())
        ]
        assert ranks, "no trainer rank process found"
        ranks[0].kill()

        # fault 2: the driver dies (whole process group) once general-max and coding-max are
        # done and a later job has a checkpoint
        def later_job_checkpointed():
            js = jobs(run)
            return all(js.get(n, {}).get("status") == "done" for n in ("general-max", "coding-max")) and any(
                (run / "checkpoints" / "experts" / name / "step_000001" / "rollout_state.json").exists()
                for name, j in js.items()
                if j["status"] == "running"
            )

        wait_for(later_job_checkpointed, proc, 600, "a later job's checkpoint")
        facts["before"] = jobs(run)
        facts["interrupted"] = [n for n, j in facts["before"].items() if j["status"] == "running"]
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    resumed = cli("run", "--resume", str(run))
    facts["resume_output"] = resumed.communicate(timeout=900)[0]
    assert resumed.returncode == 0, facts["resume_output"][-4000:]
    return run, facts


def rows_of(run, stage):
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if r["stage"] == stage]


@pytest.mark.timeout(FAULTED_RUN_WAITS)
@pytest.mark.system
def test_trainer_death_restarts_the_job_from_its_checkpoint(faulted_run):
    run, facts = faulted_run
    job = facts["before"]["general-max"]
    assert job["status"] == "done" and job["attempts"] == 1
    assert any("general-max/step_" in r for r in job["resumed_from"]), job
    rows = assert_accounting_matches_rollouts(run, "experts/general-max", group_size=EXPERTS["group_size"])
    assert [r["step"] for r in rows] == [1, 2, 3]  # steps past the checkpoint were redone once, not doubled
    assert rows[1]["samples/drawn"] > rows[0]["samples/drawn"]  # counters continued from the checkpoint


@pytest.mark.timeout(FAULTED_RUN_WAITS)
@pytest.mark.system
def test_resume_reruns_no_finished_job_and_continues_the_interrupted_one(faulted_run):
    run, facts = faulted_run
    final = jobs(run)
    done_before = [n for n, j in facts["before"].items() if j["status"] == "done"]
    assert "coding-max" in done_before and facts["interrupted"]
    for name in done_before:
        assert final[name]["started"] == facts["before"][name]["started"]
        assert final[name]["checkpoint"] == facts["before"][name]["checkpoint"]
        assert f"{name}: start" not in facts["resume_output"]
    for name in facts["interrupted"]:
        assert any(f"experts/{name}/step_" in r for r in final[name]["resumed_from"]), final[name]
        steps = [r["step"] for r in assert_accounting_matches_rollouts(run, f"experts/{name}", EXPERTS["group_size"])]
        assert steps == list(range(1, len(steps) + 1)) and steps
    assert all(j["status"] == "done" for j in final.values()) and len(final) == 9


@pytest.mark.timeout(FAULTED_RUN_WAITS)
@pytest.mark.system
def test_eval_json_has_every_cell_for_sft_experts_and_student(faulted_run):
    run, _ = faulted_run
    rows = json.loads((run / "eval.json").read_text())["rows"]
    got = {(r["checkpoint"], r["role"], r["domain"], r["effort"]) for r in rows}
    want = {("sft", "sft", d, e) for d, e in CELLS} | {("mopd", "student", d, e) for d, e in CELLS}
    want |= {(f"experts/{d}-{e}", "expert", d, e) for d, e in CELLS}  # each expert on its own cell
    assert got == want
    for r in rows:
        assert 0.0 <= r["score"] <= 1.0 and r["mean_tokens"] >= 0 and r["n"] + r["unscored"] == 3
    manifest = json.loads((run / "checkpoints" / "mopd" / "final" / "mopd_manifest.json").read_text())
    assert sorted(t["teacher_id"] for t in manifest["teachers"]) == sorted(f"{d}-{e}" for d, e in CELLS)


def test_sft_scratchpads_open_some_first_answers_with_part_of_the_question():
    import random

    from posttrain.config.stages import ThinkConfig
    from posttrain.stages.sft import with_scratchpad
    from posttrain.types import Message

    think = ThinkConfig(prob=0.5, max_words=3)
    convo = (Message("user", "What is 2 + 3 ?"), Message("assistant", "5"))
    code = (Message("user", "Write solve: add one"), Message("assistant", "def solve(x):\n    return x + 1"))
    rng = random.Random(0)
    outs = [with_scratchpad(convo, think, False, rng) for _ in range(200)]
    padded = [o for o in outs if o[1].content != "5"]
    assert 60 < len(padded) < 140  # about half
    lines = {o[1].content.split("\n")[0] for o in padded}
    assert lines == {"Thinking: What", "Thinking: What is", "Thinking: What is 2"}  # 1..3 words of the question
    assert all(o[1].content.endswith("\n5") and o[0] == convo[0] for o in padded)
    coded = [with_scratchpad(code, think, True, rng) for _ in range(50)]
    assert any(c[1].content.startswith("# Thinking: Write") for c in coded)
    for c in coded:  # a comment line: the program still runs
        namespace = {}
        exec(c[1].content, namespace)
        assert namespace["solve"](1) == 2
    assert with_scratchpad(convo, None, False, rng) == convo


def test_sft_scratchpads_by_effort_think_longer_at_higher_effort():
    import random

    from posttrain.config.stages import SFTStage, ThinkConfig
    from posttrain.stages.sft import with_scratchpad
    from posttrain.types import Message

    think = ThinkConfig(prob=1.0, max_words=8, by_effort={"low": (0, 0), "high": (1, 2), "max": (4, 5)})
    convo = (Message("user", "What is 2 + 3 + 4 - 1 ?"), Message("assistant", "8"))
    rng = random.Random(0)
    words = {
        e: {len(with_scratchpad(convo, think, False, rng, e)[1].content.split("\n")[0].split()) - 1 for _ in range(100)}
        for e in ("low", "high", "max")
    }
    assert words["high"] == {1, 2} and words["max"] == {4, 5}
    assert {with_scratchpad(convo, think, False, rng, "low") for _ in range(20)} == {convo}  # [0, 0]: no scratchpad
    assert {
        len(with_scratchpad(convo, think, False, rng, None)[1].content.split("\n")[0].split()) - 1 for _ in range(200)
    } == set(range(1, 9))  # no effort: 1..max_words
    with pytest.raises(ValueError, match="not a range"):
        ThinkConfig(by_effort={"low": (3, 1)})
    stage = dict(
        name="sft",
        type="sft",
        lr=1e-3,
        steps=1,
        data={"type": "reasoning_gym", "families": [{"name": "basic_arithmetic"}]},
        think={"by_effort": {"low": [0, 0]}},
    )
    with pytest.raises(ValueError, match="needs effort_lines"):
        SFTStage(**stage)
    assert SFTStage(**stage, effort_lines=True).think.by_effort == {"low": (0, 0)}
