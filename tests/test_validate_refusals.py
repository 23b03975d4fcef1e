"""`posttrain validate` refuses what would not work, in one line and exit 2, before any
engine starts (issue 56): a tool or reward of the user's that returns the wrong type on the
gold, a worked solution as the reference without `answer_format`, GRM-scored tasks without
a judge, `max_model_len` past the model's limit or too short for the longest prompt plus
`max_tokens`, a reward module in the current folder, empty data files of every format.

Each test drives the CLI as a user would (`python -m posttrain.cli validate`, or the
installed `posttrain` script where the module path matters); no Ray, no engine."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures"
ENV = {**os.environ, "PYTHONPATH": f"{ROOT}:{FIXTURES}"}


def pipeline(tasks: dict, **stage) -> dict:
    return {
        "name": "refusals",
        "model": {"name": "tiny"},
        "stages": [{"name": "rl", "type": "rl", "lr": 1e-4, "steps": 2, "tasks": tasks, **stage}],
    }


def validate(tmp_path: Path, config: dict, command=None, cwd: Path | None = None, env=None):
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(config))
    command = command or [sys.executable, "-m", "posttrain.cli"]
    return subprocess.run(
        [*command, "validate", str(tmp_path / "p.yaml")],
        capture_output=True,
        text=True,
        env=env or ENV,
        cwd=cwd or ROOT,
        timeout=300,
    )


def refused(proc: subprocess.CompletedProcess) -> str:
    """The one line of a refusal (exit 2)."""
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    return lines[0]


def accepted(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 0, proc.stderr


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def env_tasks(name: str, **kw) -> dict:
    return {"type": "env", "env": f"trap_envs:{name}", "size": 20, "timeout_s": 5, **kw}


def worked_rows(count: int = 20) -> list[dict]:
    """MATH's shape: a problem and a worked solution whose answer is its last \\boxed{}."""
    return [
        {
            "problem": f"What is {k} times 7?",
            "solution": f"We multiply {k} by 7, which is the same as adding seven {k} times, and we get "
            f"$\\boxed{{{7 * k}}}$.",
        }
        for k in range(2, count + 2)
    ]


# ---------------------------------------------------------------- wrong types on the gold


def test_a_tool_that_returns_a_dict_is_refused_naming_it(tmp_path):
    line = refused(validate(tmp_path, pipeline(env_tasks("DictTool"))))
    assert line.startswith(f"{tmp_path / 'p.yaml'}: stages[0].tasks: tool kv_")
    assert "(gold episode of task 'trap_envs:DictTool/" in line
    assert line.endswith("returned dict, not a reply string or (reply: str, done: bool)")
    sft = pipeline({})
    sft["stages"] = [{"name": "sft", "type": "sft", "lr": 1e-3, "steps": 1, "data": env_tasks("DictTool")}]
    assert "returned dict, not a reply string" in refused(validate(tmp_path, sft))  # SFT would train on str(dict)


def test_an_environment_reward_of_the_wrong_type_is_refused_gold_check_or_not(tmp_path):
    line = refused(validate(tmp_path, pipeline(env_tasks("DictReward"))))
    assert "DictReward.reward (gold episode of task 'trap_envs:DictReward/" in line
    assert "returned dict with NoneType as its score, not a number" in line
    assert "a reward returns a float, (float, reason) or {score, reason}" in line
    unchecked = refused(validate(tmp_path, pipeline(env_tasks("DictReward", gold_check=False))))
    assert "returned dict with NoneType as its score" in unchecked


def test_a_reward_function_of_the_wrong_type_is_refused_naming_it(tmp_path):
    rows = [{"id": str(i), "prompt": f"{i} + 1?", "answer": str(i + 1)} for i in range(20)]
    tasks = {"type": "user", "path": str(write_jsonl(tmp_path / "u.jsonl", rows)), "reward": "trap_rewards:as_text"}
    line = refused(validate(tmp_path, pipeline(tasks)))
    assert line.startswith(f"{tmp_path / 'p.yaml'}: stages[0].tasks: reward function trap_rewards:as_text")
    assert "returned str, not a number" in line
    assert "returned str" in refused(validate(tmp_path, pipeline({**tasks, "gold_check": False})))


# ---------------------------------------------------------------- worked solutions as references


@pytest.mark.parametrize("kind", ["hf", "user"])
def test_a_worked_solution_as_reference_is_refused_naming_answer_format(tmp_path, kind):
    rows = worked_rows()
    if kind == "hf":
        data = write_jsonl(tmp_path / "d.jsonl", rows)
        tasks = {"type": "hf", "path": str(data), "prompt_key": "problem", "answer_key": "solution"}
        tasks["verifier"] = "math"
    else:
        data = write_jsonl(tmp_path / "d.jsonl", [{"prompt": r["problem"], "answer": r["solution"]} for r in rows])
        tasks = {"type": "user", "path": str(data)}
    line = refused(validate(tmp_path, pipeline(tasks)))
    assert line.startswith(f"{tmp_path / 'p.yaml'}: stages[0].tasks: 16 of 16 sampled reference answers are worked")
    assert "set `answer_format: boxed`" in line
    accepted(validate(tmp_path, pipeline({**tasks, "answer_format": "boxed"})))


def test_with_a_format_the_verifier_compares_the_answer_read_never_the_whole_text():
    from posttrain.config.tasks import HFTasks
    from posttrain.data.tasks import load_tasks
    from posttrain.rewards.math_verifier import judge

    path = write_jsonl(Path(os.environ.get("TMPDIR", "/tmp")) / f"worked-{os.getpid()}.jsonl", worked_rows())
    source = HFTasks(type="hf", path=str(path), prompt_key="problem", answer_key="solution", answer_format="boxed")
    tasks = sorted(load_tasks(source), key=lambda t: int(t.answer))
    assert [t.answer for t in tasks[:2]] == ["14", "21"]
    assert tasks[0].entry["reference"].startswith("We multiply 2 by 7")
    assert judge(tasks[0].answer, "\\boxed{2 \\times 7}").score == 0.0  # an unevaluated product is not 14
    assert judge(tasks[0].answer, "\\boxed{14}").score == 1.0
    path.unlink()


# ---------------------------------------------------------------- the judge


def test_grm_tasks_without_a_judge_are_refused(tmp_path):
    line = refused(validate(tmp_path, pipeline({"type": "writing", "size": 20})))
    assert "scored by the generative reward model" in line and "has no `reward.grm`" in line
    rows = [{"prompt": f"Write a haiku about the number {i}."} for i in range(10)]
    own = {"type": "hf", "path": str(write_jsonl(tmp_path / "w.jsonl", rows)), "prompt_key": "prompt"}
    line = refused(validate(tmp_path, pipeline({**own, "verifier": "grm"})))
    assert line.startswith(f"{tmp_path / 'p.yaml'}: stages[0].tasks: its tasks are scored by the generative")
    judged = pipeline({"type": "writing", "size": 20}, reward={"grm": {"judge": {"type": "vllm", "model": "tiny"}}})
    accepted(validate(tmp_path, judged))


# ---------------------------------------------------------------- lengths


def test_max_model_len_above_the_models_own_limit_is_refused(tmp_path):
    config = pipeline({"type": "arithmetic", "size": 20})
    config["model"]["tiny"] = {"max_position": 256}
    line = refused(validate(tmp_path, config))
    assert line.startswith(f"{tmp_path / 'p.yaml'}: rollout.max_model_len: 512 is above the model's own limit of 256")
    assert "max_position_embeddings" in line
    accepted(validate(tmp_path, {**config, "rollout": {"max_model_len": 256}}))


def test_a_prompt_plus_max_tokens_above_max_model_len_is_refused_with_the_numbers(tmp_path):
    line = refused(validate(tmp_path, pipeline({"type": "agent", "size": 20}, max_tokens=384)))
    assert "the longest prompt is " in line and "+ max_tokens 384 = " in line and "> rollout.max_model_len 512" in line
    assert "raising max_tokens changes nothing; raise rollout.max_model_len to " in line
    accepted(validate(tmp_path, pipeline({"type": "agent", "size": 20}, max_tokens=64)))
    tools = {**pipeline(env_tasks("KVStore"), max_tokens=200), "rollout": {"max_model_len": 256}}
    line = refused(validate(tmp_path, tools))
    assert "the longest prompt with its tool schema and gold tool replies is " in line
    assert "+ max_tokens 200" in line and "> rollout.max_model_len 256" in line


# ---------------------------------------------------------------- modules and files


def test_a_reward_module_in_the_current_folder_loads_as_an_environment_does(tmp_path):
    """The installed `posttrain` script (unlike `python -m`) does not put the current folder
    on the path: a reward module there must load as an environment class there does."""
    script = Path(sys.executable).with_name("posttrain")
    if not script.is_file():
        pytest.skip("no installed posttrain script beside this interpreter")
    (tmp_path / "mcq_reward.py").write_text("def score(response, task):\n    return float(response == task['answer'])")
    rows = [{"prompt": f"{i} + 1?", "answer": str(i + 1)} for i in range(10)]
    tasks = {"type": "user", "path": str(write_jsonl(tmp_path / "u.jsonl", rows)), "reward": "mcq_reward:score"}
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    accepted(validate(tmp_path, pipeline(tasks), command=[str(script)], cwd=tmp_path, env=env))
    line = refused(validate(tmp_path, pipeline({**tasks, "reward": "mcq_absent:score"}), [str(script)], tmp_path, env))
    assert line.startswith(f"{tmp_path / 'p.yaml'}: stages[0].tasks.reward: cannot load mcq_absent:score")
    hf = {"type": "hf", "path": tasks["path"], "prompt_key": "prompt", "answer_key": "answer", "verifier": "user"}
    accepted(validate(tmp_path, pipeline({**hf, "reward": "mcq_reward:score"}), [str(script)], tmp_path, env))
    line = refused(validate(tmp_path, pipeline({**hf, "reward": "mcq_absent:score"}), [str(script)], tmp_path, env))
    assert line.startswith(f"{tmp_path / 'p.yaml'}: stages[0].tasks.reward: cannot load mcq_absent:score")


def _empty_files(tmp_path: Path) -> dict[str, Path]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    files = {name: tmp_path / name for name in ("e.parquet", "e.jsonl", "e.json", "e.csv", "blank.jsonl")}
    for name in ("e.parquet", "e.jsonl", "e.json", "e.csv"):
        files[name].write_bytes(b"")
    files["blank.jsonl"].write_text("\n  \n")
    files["rows0.parquet"] = tmp_path / "rows0.parquet"
    pq.write_table(pa.table({"prompt": pa.array([], pa.string())}), files["rows0.parquet"])
    return files


def test_empty_files_of_every_format_are_one_line(tmp_path):
    for name, path in _empty_files(tmp_path).items():
        hf = {"type": "hf", "path": str(path), "prompt_key": "prompt", "verifier": "user"}
        line = refused(validate(tmp_path, pipeline(hf)))
        assert "is empty (" in line and name in line, line
        if path.suffix in (".parquet", ".jsonl"):
            assert name in refused(validate(tmp_path, pipeline({"type": "user", "path": str(path)})))


# ---------------------------------------------------------------- the control


def test_a_correct_config_still_validates(tmp_path):
    rows = [{"id": str(i), "prompt": f"{i} + 1?", "answer": str(i + 1)} for i in range(20)]
    user = {"type": "user", "path": str(write_jsonl(tmp_path / "u.jsonl", rows)), "reward": "trap_rewards:constant"}
    user["gold_check"] = False  # its constant 0.5 is a score, not full marks
    mixture = {"type": "mixture", "sources": [env_tasks("KVStore"), user, {"type": "agent", "size": 10}]}
    proc = validate(tmp_path, pipeline(mixture, max_tokens=64))
    accepted(proc)
    assert proc.stderr.strip() == ""
