"""`posttrain rewards try --task-file TASK.json --response-file RESPONSE.txt` for every
verifier, through the real CLI: code (the two-sandbox check), reasoning_gym, math, agent
(the turns run against the real environment), user (a user function in a worker
process), and grm (the HTTP judge against a local OpenAI-compatible server)."""

import json
import os
import subprocess
import sys
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

FIXTURES = Path(__file__).parent / "fixtures"


def rewards_try(tmp_path, row, response, *extra, env=None, expect=0):
    (tmp_path / "task.json").write_text(json.dumps(row))
    (tmp_path / "response.txt").write_text(response)
    cmd = [sys.executable, "-m", "posttrain.cli", "rewards", "try", "--task-file", str(tmp_path / "task.json")]
    cmd += ["--response-file", str(tmp_path / "response.txt"), *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env or os.environ)
    assert proc.returncode == expect, proc.stderr[-3000:]
    return proc


def scored(tmp_path, row, response, *extra, env=None) -> dict:
    out = rewards_try(tmp_path, row, response, "--json", *extra, env=env).stdout
    result = json.loads(out.strip().splitlines()[-1])
    assert isinstance(result["score"], float) and {"ok", "reason"} <= set(result), result
    return result


CODE = {
    "verifier": "code",
    "prompt": "Write add(a, b).",
    "entry_point": "add",
    "tests": ["assert add(1, 2) == 3", "assert add(2, 2) == 4"],
}


def test_code_each_test_verdict(tmp_path):
    right = scored(tmp_path, CODE, "```python\ndef add(a, b):\n    return a + b\n```")
    assert right["ok"] and right["score"] == 1.0 and right["reason"] == "2/2 tests passed"
    product = "```python\ndef add(a, b):\n    return a * b\n```"
    wrong = scored(tmp_path, CODE, product)
    assert wrong["score"] == 0.0 and [t["passed"] for t in wrong["details"]["tests"]] == [False, True]
    text = rewards_try(tmp_path, CODE, product).stdout
    assert "[FAIL] assert add(1, 2) == 3" in text and "[pass] assert add(2, 2) == 4" in text
    io = {"verifier": "code", "prompt": "sum", "io": [{"input": "1 2", "output": "3"}], "reward": "fraction"}
    assert scored(tmp_path, io, "print(sum(map(int, input().split())))")["score"] == 1.0


def test_reasoning_gym_and_math(tmp_path):
    from posttrain.config import ReasoningGymFamily, ReasoningGymTasks
    from posttrain.data.families import reasoning_gym_tasks

    family = ReasoningGymFamily(name="basic_arithmetic", params={"max_digits": 2})
    (task,) = reasoning_gym_tasks(ReasoningGymTasks(families=[family], size=1, seed=4))
    row = {"verifier": "reasoning_gym", "family": task.family, **task.entry}
    assert scored(tmp_path, row, f"<answer>{task.answer}</answer>")["score"] == 1.0
    hedged = scored(tmp_path, row, f"<answer>{task.answer}</answer> or <answer>{int(task.answer) + 1}</answer>")
    assert hedged["score"] == 0.0 and hedged["reason"].startswith("hedged")
    math = {"verifier": "math", "prompt": "Half of one?", "answer": "0.5"}
    assert scored(tmp_path, math, "So \\boxed{\\frac{1}{2}}")["score"] == 1.0
    assert scored(tmp_path, math, "Answer: 0.25")["score"] == 0.0


def test_agent_turns_run_in_the_real_environment(tmp_path):
    from posttrain.config import AgentTasks
    from posttrain.data.builtin_env import agent_tasks

    (task,) = agent_tasks(AgentTasks(type="agent", families=["kv_store"], size=1, seed=3))
    row = {"verifier": "agent", "id": task.task_id, "prompt": task.messages[-1].content, "entry": task.entry}
    gold_turns = [text for role, text in task.entry["gold"] if role == "assistant"]
    right = scored(tmp_path, row, json.dumps(gold_turns))
    assert right["ok"] and right["score"] == 1.0, right["reason"]
    skipped = scored(tmp_path, row, json.dumps(gold_turns[-1:]))  # the final answer without doing the work
    assert skipped["score"] == 0.0 and "store[" in skipped["reason"], skipped["reason"]


def test_user_function_and_answer_matching(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(FIXTURES), os.environ.get("PYTHONPATH", "")]))
    row = {"verifier": "user", "prompt": "Say 42.", "answer": "42", "reward": "user_rewards:exact"}
    assert scored(tmp_path, row, "42", env=env)["score"] == 1.0
    assert scored(tmp_path, row, "41", env=env)["score"] == 0.0
    broken = scored(tmp_path, dict(row, reward="user_rewards:raises"), "42", env=env)
    assert broken["ok"] and broken["score"] == 0.0 and "user bug" in broken["reason"]
    matched = {"verifier": "user", "prompt": "Say 42.", "answer": "42"}
    assert scored(tmp_path, matched, "The answer is 42")["score"] == 1.0


def test_multiple_choice_row(tmp_path):
    row = {"verifier": "user", "answer_form": "choice", "prompt": "4 * 4?\nA) 12\nB) 16\nC) 20", "answer": "B"}
    assert scored(tmp_path, row, "4 times 4 is 16, so I choose B.")["score"] == 1.0
    refused = scored(tmp_path, row, "B) 20")
    assert refused["score"] == 0.0 and "several options" in refused["reason"]
    assert scored(tmp_path, dict(row, verifier="math"), "The answer is A or B.")["score"] == 0.0
    proc = rewards_try(tmp_path, dict(row, answer="E"), "B", expect=2)
    assert "not one of the option letters A, B, C" in proc.stderr


def test_grm_with_an_http_judge(tmp_path):
    from test_grm_http import KEY, Judge

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Judge)
    httpd.lock, httpd.bodies, httpd.in_flight, httpd.max_in_flight = threading.Lock(), [], 0, 0
    httpd.delay, httpd.slow_first, httpd.structured = 0.0, 0, True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        judge = {
            "type": "http",
            "base_url": f"http://127.0.0.1:{httpd.server_port}/v1",
            "model": "judge-7b",
            "api_key_env": "TEST_JUDGE_KEY",
        }
        (tmp_path / "reward.yaml").write_text(yaml.safe_dump({"grm": {"judge": judge}}))
        row = {"verifier": "grm", "prompt": "Write a poem about bicycles."}
        env = dict(os.environ, TEST_JUDGE_KEY=KEY)
        result = scored(
            tmp_path, row, "A bicycle poem\nwheels turn", "--reward", str(tmp_path / "reward.yaml"), env=env
        )
        assert result["ok"] and result["status"] == "scored" and len(result["verdicts"]) == 3
        assert result["score"] > 0.5  # essential and important met, the pitfall avoided
        assert any("bicycles" in b["messages"][-1]["content"] for b in httpd.bodies)
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.mark.parametrize(
    "row, words",
    [
        ({"prompt": "x"}, "verifier must be one of"),
        ({"verifier": "code", "prompt": "x", "entry_point": "f"}, "needs exactly one of `tests`, `check`, `io`"),
        ({"verifier": "reasoning_gym", "prompt": "x", "answer": "1"}, "needs its `family`"),
        ({"verifier": "agent", "prompt": "x"}, "needs its success `check`"),
    ],
)
def test_bad_task_files_are_one_line_and_exit_2(tmp_path, row, words):
    proc = rewards_try(tmp_path, row, "x", expect=2)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("posttrain rewards try: ") and words in lines[0], proc.stderr


def test_try_pays_what_the_pipeline_pays_for_a_row_with_an_answer_form(tmp_path):
    """`try` builds the task as the pipeline's source does (issue 55): a reasoning-gym row of
    a family whose answers are decimals, and a math row whose question asks for a decimal,
    refuse a fraction there as they do in training, and credit the decimal."""
    from fractions import Fraction

    from posttrain.config import ReasoningGymFamily, ReasoningGymTasks
    from posttrain.data.tasks import load_tasks
    from posttrain.rewards.base import score_sync
    from posttrain.rewards.math_verifier import MathVerifier
    from posttrain.rewards.reasoning_gym import ReasoningGymVerifier
    from posttrain.types import Completion, Message, Sample, Task, infer_answer_form

    def pipeline_score(verifier, task, text):
        return score_sync(verifier, [Sample(task, 0, (1,), Completion((5,), (0.0,), text, "stop"))])[0].score

    rg = load_tasks(ReasoningGymTasks(families=[ReasoningGymFamily(name="decimal_arithmetic")], size=1))[0]
    assert rg.answer_form == "decimal"
    exact = Fraction(rg.answer).limit_denominator(10**12)
    row = {"verifier": "reasoning_gym", "family": rg.family, "question": rg.entry["question"], "answer": rg.answer}
    row["metadata"] = rg.entry["metadata"]
    math_row = {"verifier": "math", "prompt": "Write 3/8 as a decimal.", "answer": "0.375"}
    question = math_row["prompt"]
    form = infer_answer_form(question)
    math_task = Task("m", "math", (Message("user", question),), answer="0.375", verifier="math", answer_form=form)
    cases = [
        (row, ReasoningGymVerifier(), rg, f"\\boxed{{{exact.numerator}/{exact.denominator}}}", 0.0),
        (row, ReasoningGymVerifier(), rg, f"\\boxed{{{rg.answer}}}", 1.0),
        (math_row, MathVerifier(), math_task, "\\boxed{3/8}", 0.0),
        (math_row, MathVerifier(), math_task, "\\boxed{0.375}", 1.0),
    ]
    for task_row, verifier, task, text, expected in cases:
        pipeline = pipeline_score(verifier, task, text)
        tried = scored(tmp_path, task_row, text)
        assert tried["score"] == pipeline == expected, (task_row["verifier"], text, tried["reason"])
