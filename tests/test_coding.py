"""Coding tasks and their verifier: reference answers score 1, wrong ones 0, through the
real sandbox; the router sends each sample to its task's reward source."""

import pytest

from posttrain.config import CodingTasks, ReasoningGymFamily, ReasoningGymTasks
from posttrain.data.tasks import load_tasks
from posttrain.rewards.base import score_sync
from posttrain.rewards.code import CodeVerifier, extract_code
from posttrain.rewards.reasoning_gym import ReasoningGymVerifier
from posttrain.rewards.router import RewardRouter
from posttrain.types import Completion, Sample


def sample(task, text):
    return Sample(task, 0, (1,), Completion((5,), (-0.1,), text, "stop"))


@pytest.fixture(scope="module")
def verifier():
    v = CodeVerifier(workers=2)
    yield v
    v.close()


@pytest.mark.parametrize(
    "text, code",
    [
        ("```python\ndef f():\n    return 1\n```", "def f():\n    return 1\n"),
        ("first\n```py\nx = 1\n```\nthen\n```python\nx = 2\n```", "x = 2\n"),
        ("```python\ndef f():\n    return 3", "def f():\n    return 3"),
        ("def g(): pass", "def g(): pass"),
    ],
)
def test_extract_code(text, code):
    assert extract_code(text) == code


def test_generated_tasks_reference_passes_and_wrong_fails(verifier):
    tasks = load_tasks(CodingTasks(type="coding", size=12, seed=3))
    assert len({t.task_id for t in tasks}) == 12 and all(t.verifier == "code" for t in tasks)
    right = score_sync(verifier, [sample(t, t.answer) for t in tasks])
    wrong = score_sync(verifier, [sample(t, "```python\ndef solve(*args):\n    return None\n```") for t in tasks])
    assert [r.score for r in right] == [1.0] * 12, [r.reason for r in right]
    assert all(r.score == 0.0 for r in wrong)
    assert right[0].reason == "5/5 tests passed"


def test_fraction_reward_and_hostile_answer(verifier):
    (task,) = load_tasks(CodingTasks(type="coding", size=1, seed=1, reward="fraction"))
    half = (
        "```python\n_calls = 0\n"
        + task.answer.split("```python\n")[1].split("```")[0].replace("def solve(", "def _ref(")
        + "def solve(*a):\n    global _calls\n    _calls += 1\n"
        "    return _ref(*a) if _calls % 2 else 'nope'\n```"
    )
    (result,) = score_sync(verifier, [sample(task, half)])
    assert result.score == pytest.approx(3 / 5) and result.details["passed"] == 3
    loop_task = type(task)(
        task.task_id, task.family, task.messages, task.answer, dict(task.entry, timeout_s=1.5), "code"
    )
    (loop,) = score_sync(verifier, [sample(loop_task, "```python\nwhile True:\n    pass\n```")])
    assert loop.score == 0.0 and "time limit" in loop.reason, loop.reason


def test_humaneval_tasks(verifier):
    tasks = load_tasks(CodingTasks(type="coding", split="humaneval", size=164))
    assert len(tasks) == 164 and tasks[0].task_id == "HumanEval/0"
    results = score_sync(verifier, [sample(t, t.answer) for t in tasks[:8]])
    assert all(r.score == 1.0 for r in results), [r.reason for r in results]


def test_router_sends_each_sample_to_its_source(verifier):
    code_task = load_tasks(CodingTasks(type="coding", size=1))[0]
    math_task = load_tasks(ReasoningGymTasks(families=[ReasoningGymFamily(name="chain_sum")], size=1))[0]
    router = RewardRouter({"reasoning_gym": ReasoningGymVerifier(), "code": verifier})
    results = score_sync(
        router, [sample(math_task, math_task.answer), sample(code_task, code_task.answer), sample(math_task, "-12345")]
    )
    assert [(r.source, r.score) for r in results] == [("reasoning_gym", 1.0), ("code", 1.0), ("reasoning_gym", 0.0)]
    (orphan,) = score_sync(RewardRouter({}), [sample(code_task, "x")])
    assert not orphan.ok and "no reward source 'code'" in orphan.reason


def test_identical_programs_run_once_per_call(verifier, monkeypatch):
    tasks = load_tasks(CodingTasks(type="coding", size=2, seed=4))
    runs = []
    real_run = verifier.pool.run
    monkeypatch.setattr(verifier.pool, "run", lambda fn, jobs: runs.append(len(jobs)) or real_run(fn, jobs))
    group = [sample(tasks[0], tasks[0].answer)] * 3 + [sample(tasks[0], "wrong")] + [sample(tasks[1], tasks[0].answer)]
    results = score_sync(verifier, group)
    assert runs == [3]  # three distinct (program, tests) pairs among five samples
    assert [r.score for r in results[:4]] == [1.0, 1.0, 1.0, 0.0]


def test_instruction_can_be_replaced():
    task = load_tasks(CodingTasks(type="coding", size=1, instruction="Write solve:"))[0]
    assert task.messages[-1].content.startswith("Write solve:\n\ndef solve(...):")
