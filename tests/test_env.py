"""Your own tool environments (`type: env`): tasks and tools rendered with the chat template,
episodes run turn by turn in real worker processes, a tool that raises, hangs or returns
garbage ending only its episode (flagged, never trained on), an episode's state surviving
a checkpoint of the queue, and the environment's reward."""

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from posttrain.config import EnvTasks, SFTStage
from posttrain.data.chat import format_call
from posttrain.data.tasks import load_tasks
from posttrain.data.tools import render_task, tool_format
from posttrain.rewards.env_reward import EnvReward
from posttrain.rollout.agent_loop import AgentLoop
from posttrain.rollout.env_workers import close_all
from posttrain.rollout.queue import PartialRolloutQueue
from posttrain.types import Completion, Sample

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))  # env_fixtures, for this process and its spawned workers


@pytest.fixture(scope="module")
def tokenizer(tiny_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_dir)


@pytest.fixture(autouse=True)
def fresh_workers():
    yield
    close_all()


def turn_ids(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]


def start(tokenizer, tasks, max_tokens=200):
    queue = PartialRolloutQueue(max_staleness=4)
    trajs = [
        queue.add_group(t, tuple(render_task(tokenizer, t.messages, t.entry["tools"])), 1, max_tokens, None, 0)[0]
        for t in tasks
    ]
    return queue, trajs


def sample_of(queue, traj) -> Sample:
    return Sample(
        queue.task_of(traj),
        0,
        traj.prompt_ids,
        Completion(tuple(traj.response_ids), (), "", traj.finish_reason),
        env=traj.env,
        action_mask=tuple(traj.action_mask),
    )


def test_example_environment_tasks_tools_and_gold_episodes(tokenizer, monkeypatch):
    monkeypatch.chdir(ROOT)  # `examples.kv_env` is found from the directory the command runs in
    source = EnvTasks(type="env", env="examples.kv_env:KVStore", size=30, seed=1)
    tasks = load_tasks(source)
    assert len(tasks) == 30 and {t.entry["data"]["kind"] for t in tasks} == {"store", "recall", "delete"}
    assert all(
        t.verifier == "env" and [f["function"]["name"] for f in t.entry["tools"]] == ["kv_set", "kv_get", "kv_delete"]
        for t in tasks
    )
    held = {t.messages[-1].content for t in load_tasks(source.model_copy(update={"part": "eval"}))}
    assert held and not held & {t.messages[-1].content for t in tasks}  # the environment's own parts
    assert tool_format(tokenizer) == "tools-v1"  # the tiny model's ChatML ignores `tools`
    prompt = tokenizer.decode(render_task(tokenizer, tasks[0].messages, tasks[0].entry["tools"]))
    assert "Tools: kv_set(key, value): Store a value under a key.; kv_get(key)" in prompt
    assert prompt.endswith(tasks[0].messages[-1].content + "<|im_end|>\n<|im_start|>assistant\n")
    recall = next(t for t in tasks if t.entry["data"]["kind"] == "recall")
    call = format_call("kv_get", {"key": recall.entry["data"]["key"]})
    assert recall.entry["gold"] == [["assistant", call], ["tool", recall.answer], ["assistant", recall.answer]]
    from posttrain.stages.sft import sft_conversations

    conversation = sft_conversations(SFTStage(name="s", type="sft", lr=1e-3, steps=1, data=source))[0]
    assert conversation[0].role == "system" and conversation[0].content.startswith("You can use tools.")
    assert [m.role for m in conversation[-3:]] == ["assistant", "tool", "assistant"]


def test_a_tool_that_raises_hangs_or_returns_garbage_ends_only_its_episode(tokenizer):
    source = EnvTasks(type="env", env="env_fixtures:Faulty", args={"hang_s": 600}, size=4, timeout_s=4)
    tasks = load_tasks(source)
    queue, trajs = start(tokenizer, tasks)
    calls = [("echo", {"text": tasks[0].answer}), ("boom", {}), ("sleep", {}), ("junk", {})]
    for traj, (name, arguments) in zip(trajs, calls):
        ids = turn_ids(tokenizer, format_call(name, arguments))
        traj.extend(ids, [0.0] * len(ids), 0, "stop")
    loop = AgentLoop(tokenizer, max_model_len=1024)
    loop.advance(queue, trajs[:1], 0)  # the pool starts (imports, builds the environment) outside the timing
    started = time.perf_counter()
    assert loop.advance(queue, trajs[1:], 0) == 0
    spent = time.perf_counter() - started
    echo, boom, sleep, junk = trajs
    assert not echo.finished and echo.env["calls"][0]["reply"] == tasks[0].answer
    assert echo.action_mask[-1] == 0 and tokenizer.decode(echo.response_ids).count(tasks[0].answer) == 2
    assert [t.finish_reason for t in (boom, sleep, junk)] == ["env_error"] * 3
    assert boom.env["error"] == "RuntimeError: the tool exploded"
    # the hung worker was killed, not waited on; the reason names the tool it was running
    assert sleep.env["error"] == "tool 'sleep' (or the reset before it, on the episode's first turn) timed out after 4s"
    assert spent < 200
    assert junk.env["error"] == "TypeError: step returned int, not a reply string or (reply, done)"
    results = asyncio.run(EnvReward().score([sample_of(queue, t) for t in (boom, sleep, junk)]))
    # the policy's own calls made the environment fail: 0 with why, never a void
    assert [(r.ok, r.score, r.details["call_error"]) for r in results] == [
        (True, 0.0, k) for k in ("raised", "timeout", "raised")
    ]
    assert (
        results[0].reason == "scored 0: the environment's call on this episode raised: RuntimeError: the tool exploded"
    )
    assert results[1].reason == (
        "scored 0: the environment's call on this episode timed out: tool 'sleep' (or the reset before it, on the "
        "episode's first turn) timed out after 4s"
    )
    # the healthy episode goes on: its next turn answers, and its reward comes from the environment
    final = turn_ids(tokenizer, tasks[0].answer)
    echo.extend(final, [0.0] * len(final), 0, "stop")
    assert loop.advance(queue, [echo], 0) == 0 and echo.env["final"] == tasks[0].answer
    good = asyncio.run(EnvReward().score([sample_of(queue, echo)]))[0]
    assert good.ok and good.score == 1.0 and good.reason == f"echoed ['{tasks[0].answer}']"


def test_an_unknown_tool_is_recorded_with_the_error_the_model_read(tokenizer):
    tasks = load_tasks(EnvTasks(type="env", env="env_fixtures:Faulty", size=1))
    queue, (traj,) = start(tokenizer, tasks)
    ids = turn_ids(tokenizer, format_call("teleport", {"to": "mars"}) + format_call("echo", {"text": "x"}))
    traj.extend(ids, [0.0] * len(ids), 0, "stop")
    assert AgentLoop(tokenizer, 1024).advance(queue, [traj], 0) == 1
    unknown = traj.env["calls"][0]
    assert unknown["name"] == "teleport" and not unknown["ok"]
    assert unknown["reply"].startswith("error: unknown tool 'teleport' (tools: ")
    observation = tokenizer.decode(traj.response_ids[len(ids) :])
    assert unknown["reply"] in observation  # the record holds what the model saw


def test_a_reward_that_hangs_or_is_not_a_number_scores_0_with_why(tokenizer):
    tasks = load_tasks(EnvTasks(type="env", env="env_fixtures:Faulty", args={"hang_s": 600}, size=2, timeout_s=3))
    queue, trajs = start(tokenizer, tasks)
    for traj, text in zip(trajs, ["hang", "nan"]):
        ids = turn_ids(tokenizer, text)
        traj.extend(ids, [0.0] * len(ids), 0, "stop")
    AgentLoop(tokenizer, 1024).advance(queue, trajs, 0)
    hung, nan = asyncio.run(EnvReward().score([sample_of(queue, t) for t in trajs]))
    # a hang is the response's verdict too: 0 with why, never a void (its worker was replaced)
    assert hung.ok and hung.score == 0.0 and hung.reason == "scored 0: reward timed out after 3s"
    # a reward that returns no number is the response's verdict (0, with why), as for user reward functions
    assert nan.ok and nan.score == 0.0 and nan.reason == "scored 0: user reward returned nan"


def test_an_episode_continues_from_a_checkpoint_of_the_queue(tokenizer):
    tasks = load_tasks(EnvTasks(type="env", env="env_fixtures:Faulty", size=1))
    queue, (traj,) = start(tokenizer, tasks)
    first = turn_ids(tokenizer, format_call("echo", {"text": "one"}))
    traj.extend(first, [0.0] * len(first), 0, "stop")
    assert AgentLoop(tokenizer, 1024).advance(queue, [traj], 0) == 1
    close_all()  # the run stops: its workers are gone
    restored = PartialRolloutQueue.from_json(queue.to_json())  # what a checkpoint holds
    again = restored.groups[traj.group_id].trajectories[0]
    assert again.env == traj.env and again.env["state"] == {"echoed": ["one"], "i": 0}
    second = turn_ids(tokenizer, format_call("echo", {"text": tasks[0].answer}) + format_call("finish", {}))
    again.extend(second, [0.0] * len(second), 1, "stop")
    assert AgentLoop(tokenizer, 1024).advance(restored, [again], 1) == 0  # fresh workers, same episode
    assert again.finish_reason == "env_done" and again.env["state"]["echoed"] == ["one", tasks[0].answer]
    assert [c["name"] for c in again.env["calls"]] == ["echo", "echo", "finish"] and again.env["turns"] == 2
    assert asyncio.run(EnvReward().score([sample_of(restored, again)]))[0].score == 1.0


HERMES = (
    "{%- if tools %}<|im_start|>system\nYou may call tools.\n<tools>\n{%- for tool in tools %}\n{{ tool | tojson }}"
    '{%- endfor %}\n</tools>\nCall one as <tool_call>{"name": ..., "arguments": ...}</tool_call><|im_end|>\n'
    "{%- endif %}{%- for message in messages %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n"
    "{%- endfor %}{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}"
)


def test_a_template_that_renders_tools_gets_them_natively(tiny_dir, tmp_path):
    from transformers import AutoTokenizer

    folder = tmp_path / "hermes"
    shutil.copytree(tiny_dir, folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": HERMES}))
    (folder / "chat_template.jinja").unlink(missing_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert tool_format(tokenizer) == "hermes"
    task = load_tasks(EnvTasks(type="env", env="env_fixtures:Faulty", size=1))[0]
    prompt = tokenizer.decode(render_task(tokenizer, task.messages, task.entry["tools"]))
    assert '<tools>{"type": "function", "function": {"name": "echo"' in prompt
    assert "You can use tools." not in prompt  # no tools-v1 message when the template states them


def test_an_environment_that_cannot_load_is_a_one_line_config_error(tmp_path):
    stage = {"name": "rl", "type": "rl", "lr": 1e-4, "steps": 1, "tasks": {"type": "env", "env": "no_such_mod:Env"}}
    (tmp_path / "p.yaml").write_text(yaml.safe_dump({"name": "e", "model": {"name": "tiny"}, "stages": [stage]}))
    proc = subprocess.run(
        [sys.executable, "-m", "posttrain.cli", "validate", str(tmp_path / "p.yaml")],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=tmp_path,
        timeout=300,
    )
    assert proc.returncode == 2
    # reported at its own key (issue 27), not at the source's
    assert proc.stderr.strip() == (
        f"{tmp_path / 'p.yaml'}: stages[0].tasks.env: cannot load no_such_mod:Env: No module named 'no_such_mod'"
    )
