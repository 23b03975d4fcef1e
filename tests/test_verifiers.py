"""The ecosystem's environments: a `verifiers` (v0.4) taskset defined in the tests, offline,
as a task source (its tasks become prompts) and a reward (its `@vf.reward` functions,
weighted, run in worker processes; one that raises or hangs flags its sample)."""

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytest.importorskip("verifiers.v1", reason="the verifiers extra is not installed: pip install -e '.[verifiers]'")

from posttrain.config import RLStage, VerifiersTasks  # noqa: E402
from posttrain.data.tasks import load_tasks  # noqa: E402
from posttrain.rewards.router import reward_router  # noqa: E402
from posttrain.types import Completion, Sample  # noqa: E402

TESTS = Path(__file__).parent
sys.path.insert(0, str(TESTS))  # vf_fixtures, here and in the reward workers


def test_a_taskset_becomes_tasks():
    tasks = load_tasks(VerifiersTasks(type="verifiers", taskset="vf_fixtures", args={"size": 4, "start": 5}))
    assert [t.task_id for t in tasks] == ["sum-5", "sum-6", "sum-7", "sum-8"]
    assert [(m.role, m.content) for m in tasks[0].messages] == [("system", "Be brief."), ("user", "What is 5 + 1?")]
    assert tasks[0].answer == "6" and tasks[0].verifier == "verifiers" and tasks[0].entry["data"]["answer"] == "6"
    assert len(load_tasks(VerifiersTasks(type="verifiers", taskset="vf_fixtures", size=3))) == 3


def test_its_reward_functions_score_and_failures_are_flagged():
    source = VerifiersTasks(type="verifiers", taskset="vf_fixtures", args={"size": 5}, timeout_s=20)
    tasks = load_tasks(source)
    stage = RLStage(name="rl", type="rl", lr=1e-4, steps=1, tasks=source)
    router = reward_router(stage)
    responses = ["1", "9", "a long wrong answer", "boom", "hang"]
    samples = [Sample(t, 0, (1,), Completion((1,), (0.0,), r, "stop")) for t, r in zip(tasks, responses)]
    try:
        right, short_wrong, long_wrong, boom, hang = asyncio.run(router.score(samples))
    finally:
        router.close()
    assert right.ok and right.score == 1.5 and right.reason == "brief=1 (x0.5), correct=1"
    assert short_wrong.score == 0.5 and long_wrong.score == 0.0 and long_wrong.reason == "brief=0 (x0.5), correct=0"
    assert right.source == "verifiers" and right.details["scores"]["correct"] == [1.0, 1.0]
    # a reward function that raises or hangs scores 0 with why: no response can void its verdict
    assert boom.ok and boom.score == 0.0 and "the rubric exploded" in boom.reason
    assert boom.details == {"call_error": "raised", "fault": "reward_raised"}  # counted in reward/raised
    assert hang.ok and hang.score == 0.0 and hang.reason == "scored 0: verifiers reward timed out after 20s"


def test_validate_takes_a_verifiers_source(tmp_path):
    stage = {"name": "rl", "type": "rl", "lr": 1e-4, "steps": 1}
    for taskset, code in (("vf_fixtures", 0), ("no_such_taskset", 2)):
        stage["tasks"] = {"type": "verifiers", "taskset": taskset, "args": {"size": 3}}
        (tmp_path / "p.yaml").write_text(yaml.safe_dump({"name": "v", "model": {"name": "tiny"}, "stages": [stage]}))
        proc = subprocess.run(
            [sys.executable, "-m", "posttrain.cli", "validate", str(tmp_path / "p.yaml")],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS.parent), str(TESTS)])},
            timeout=600,
        )
        assert proc.returncode == code, proc.stderr
        if code:
            assert proc.stderr.startswith(
                f"{tmp_path / 'p.yaml'}: stages[0].tasks: taskset 'no_such_taskset' not found"
            )
