"""Agent domain: tools, tool-call parsing, success checks, and the multi-turn loop's token
masks, first as units, then on the real engine and trainer."""

import json
import random

import pytest

from posttrain.config import AgentTasks
from posttrain.data import builtin_env
from posttrain.data.tasks import load_tasks
from posttrain.rewards.agent_verifier import AgentVerifier
from posttrain.rewards.base import score_sync
from posttrain.types import Completion, Message, Sample


def call(name, **arguments):
    return builtin_env.format_call(name, arguments)


def test_tool_calls_are_parsed_and_executed():
    state = builtin_env.EnvState()
    assert (
        builtin_env.step(state, "Let me compute. " + call("calculator", expression="(17 + 3) * 4 - 2 ** 3"), 0) == "72"
    )
    assert (
        builtin_env.step(state, call("kv_set", key="a", value="blue") + call("kv_set", key="b", value=7), 0) == "ok\nok"
    )
    assert state.kv == {"a": "blue", "b": "7"}
    assert builtin_env.step(state, call("kv_get", key="b"), 0) == "7"
    assert builtin_env.step(state, call("kv_delete", key="a"), 0) == "ok" and state.kv == {"b": "7"}
    doc = builtin_env.corpus(0)[5]
    assert builtin_env.step(state, call("search", query=f"{doc.name} mayor"), 0).startswith(
        f"[{doc.doc_id}] {doc.name} is"
    )
    assert [c["name"] for c in state.calls] == ["calculator", "kv_set", "kv_set", "kv_get", "kv_delete", "search"]
    assert all(c["ok"] for c in state.calls) and state.turns == 5 and state.final is None
    assert builtin_env.step(state, "The answer is 72.", 0) is None and state.final == "The answer is 72."


@pytest.mark.parametrize(
    "turn, message",
    [
        ('<tool_call>{"name": "calculator", "arguments": {"expression": "1+</tool_call>', "not valid JSON"),
        ("<tool_call>[1, 2]</tool_call>", "must be a JSON object"),
        ('<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>', "unknown tool 'rm_rf'"),
        (call("kv_set", key="a"), "missing value"),
        (call("kv_get", key="a", extra=1), "unexpected extra"),
        (call("kv_get", key="nothing"), "no key 'nothing'"),
        ('<tool_call>{"name": "kv_get", "arguments": ["a"]}</tool_call>', "must be a JSON object"),
        ('<tool_call>{"name": "calculator", "arguments": {"expression": "2+', "without a closing"),
        (call("calculator", expression="__import__('os').system('id')"), "only numbers"),
        (call("calculator", expression="9 ** 9 ** 9"), "too large"),
        (call("calculator", expression="1 / 0"), "division by zero"),
        (call("calculator", expression="1" * 300), "longer than 200"),
        (call("kv_set", key="k", value={"nested": 1}), "strings or numbers"),
        (call("search", query="  "), "empty query"),
    ],
)
def test_malformed_calls_get_an_error_as_the_tool_result(turn, message):
    state = builtin_env.EnvState()
    reply = builtin_env.step(state, turn, 0)
    assert reply is not None and reply.startswith("error:") and message in reply, reply
    assert state.final is None  # the episode goes on: the model can correct itself


def test_arguments_as_a_json_string_and_call_limits():
    state = builtin_env.EnvState()
    openai_style = "<tool_call>" + json.dumps({"name": "calculator", "arguments": json.dumps({"expression": "6*7"})})
    assert builtin_env.step(state, openai_style + "</tool_call>", 0) == "42"
    many = "".join(call("kv_set", key=f"k{i}", value=i) for i in range(6))
    reply = builtin_env.step(state, many, 0)
    assert reply.count("ok") == builtin_env.MAX_CALLS_PER_TURN and "at most 4 tool calls" in reply
    assert (
        len(builtin_env.step(state, call("search", query="is its a the") * 4, 0)) <= builtin_env.MAX_RESULT_CHARS + 10
    )


def sample_for(task, state: builtin_env.EnvState, finish="stop") -> Sample:
    return Sample(task, 0, (1,), Completion((5,), (0.0,), "", finish), env=state.to_dict())


def play(task, turns):
    state = builtin_env.initial_state(task.entry)
    for turn in turns:
        builtin_env.step(state, turn, task.entry["corpus_seed"])
    return state


def test_gold_episodes_succeed_and_wrong_ones_fail_for_every_family():
    tasks = load_tasks(AgentTasks(type="agent", families=list(builtin_env.FAMILIES), size=120, seed=3, corpus_seed=9))
    assert {t.family for t in tasks} == {f"agent_{f}" for f in builtin_env.FAMILIES}
    verifier, rng = AgentVerifier(), random.Random(0)
    for task in tasks:
        gold = [content for role, content in task.entry["gold"] if role == "assistant"]
        good = verifier.score_one(sample_for(task, play(task, gold)))
        assert good.score == 1.0 and good.reason.startswith("success"), (task.task_id, good.reason)
        if "answer" in task.entry["check"]:
            wrong = play(task, gold[:-1] + [str(rng.randint(100000, 999999))])
        else:  # the store is checked: skip the last call that writes it
            wrong = play(task, gold[:-2] + gold[-1:])
        bad = verifier.score_one(sample_for(task, wrong))
        assert bad.score == 0.0 and bad.ok, (task.task_id, bad.reason)
        if "answer" in task.entry["check"]:  # store checks hold with or without a final answer
            unanswered = verifier.score_one(sample_for(task, play(task, gold[:1]), finish="max_turns"))
            assert unanswered.score == 0.0 and "max_turns" in unanswered.reason


def test_answer_matching_is_lenient_on_form_only():
    task = load_tasks(AgentTasks(type="agent", size=1, families=["calculator"]))[0]
    expected = task.entry["check"]["answer"]
    verifier = AgentVerifier()
    calls = [content for role, content in task.entry["gold"] if role == "assistant"][:-1]
    for final in (f"The answer is {expected}.", f" '{expected}' ", f"Answer: {expected}"):
        assert verifier.score_one(sample_for(task, play(task, calls + [final]))).score == 1.0, final
    assert verifier.score_one(sample_for(task, play(task, calls + [f"{expected}0"]))).score == 0.0


def test_a_broken_agent_task_is_flagged_not_crashed():
    task = load_tasks(AgentTasks(type="agent", size=1))[0]
    broken = Sample(
        task.__class__(task.task_id, task.family, task.messages, entry={}, verifier="agent"),
        0,
        (1,),
        Completion((), (), "", "stop"),
        env={},
    )
    ok = sample_for(task, play(task, ["x"]))
    results = score_sync(AgentVerifier(), [broken, ok])
    assert not results[0].ok and "no success check" in results[0].reason
    assert results[1].ok


# ---------------------------------------------------------------- token masks


@pytest.fixture(scope="module")
def tokenizer(tiny_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_dir)


def test_multi_turn_masks_cover_exactly_the_models_tokens(tokenizer):
    from posttrain.data.chat import render_prompt
    from posttrain.rollout.agent_loop import AgentLoop
    from posttrain.rollout.queue import PartialRolloutQueue

    task = load_tasks(AgentTasks(type="agent", size=5, families=["lookup_store"]))[0]
    queue = PartialRolloutQueue(max_staleness=4)
    prompt = tuple(render_prompt(tokenizer, task.messages))
    traj = queue.add_group(task, prompt, 1, max_tokens=400, budget=None, version=0)[0]
    loop = AgentLoop(tokenizer, max_model_len=4096)
    model_turns = [content for role, content in task.entry["gold"] if role == "assistant"]
    model_ids = []
    for number, text in enumerate(model_turns):
        ids = tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        model_ids += ids
        traj.extend(ids, [-0.5] * len(ids), version=number, finish_reason="stop")
        continued = loop.advance(queue, [traj], version=number)
        assert continued == (number < len(model_turns) - 1)
        assert traj.finished == (number == len(model_turns) - 1)
    assert [t for t, m in zip(traj.response_ids, traj.action_mask) if m] == model_ids
    assert traj.model_tokens == len(model_ids) < len(traj.response_ids)
    # the tokens are those of the conversation rendered by the chat template
    rendered = tokenizer.apply_chat_template(
        [{"role": m.role, "content": m.content} for m in task.messages]
        + [{"role": r, "content": c} for r, c in task.entry["gold"]],
        tokenize=False,
    )
    assert tokenizer.decode(list(prompt) + traj.response_ids) == rendered.rstrip("\n")
    assert traj.env["kv"] == task.entry["check"]["kv"] and traj.env["done"]
    assert AgentVerifier().score_one(sample_for(task, builtin_env.EnvState.from_dict(traj.env))).score == 1.0
    # masks and environment state survive a checkpoint of the queue
    restored = PartialRolloutQueue.from_json(queue.to_json())
    again = restored.groups[traj.group_id].trajectories[0]
    assert again.action_mask == traj.action_mask and again.env == traj.env
    assert restored.task_of(again).verifier == "agent"


def test_turn_limit_and_context_end_an_episode(tokenizer):
    from posttrain.data.chat import render_prompt
    from posttrain.rollout.agent_loop import AgentLoop
    from posttrain.rollout.queue import PartialRolloutQueue

    task = load_tasks(AgentTasks(type="agent", size=1, families=["calculator"], max_turns=2))[0]
    queue = PartialRolloutQueue(max_staleness=4)
    prompt = tuple(render_prompt(tokenizer, task.messages))
    traj, tight = queue.add_group(task, prompt, 2, max_tokens=400, budget=None, version=0)
    loop = AgentLoop(tokenizer, max_model_len=len(prompt) + 60)
    turn = tokenizer(call("calculator", expression="1+1"), add_special_tokens=False)["input_ids"] + [
        tokenizer.eos_token_id
    ]
    for _ in range(2):
        traj.extend(turn, [0.0] * len(turn), 0, "stop")
        loop.advance(queue, [traj], 0)
    assert traj.finish_reason == "max_turns" and traj.env["turns"] == 2 and traj.env["final"] is None
    tight.extend(turn * 2, [0.0] * len(turn) * 2, 0, "stop")  # no room left for another turn
    loop.advance(queue, [tight], 0)
    assert tight.finish_reason == "length" and tight.env["done"]


def test_a_broken_environment_flags_its_episode_and_the_others_go_on(tokenizer):
    from posttrain.data.chat import render_prompt
    from posttrain.rollout.agent_loop import AgentLoop
    from posttrain.rollout.queue import PartialRolloutQueue

    good, bad = load_tasks(AgentTasks(type="agent", size=2, families=["calculator"]))
    bad = bad.__class__(bad.task_id, bad.family, bad.messages, bad.answer, dict(bad.entry, max_turns="x"), "agent")
    queue = PartialRolloutQueue(max_staleness=4)
    trajs = [queue.add_group(t, tuple(render_prompt(tokenizer, t.messages)), 1, 100, None, 0)[0] for t in (good, bad)]
    turn = tokenizer(call("calculator", expression="2+2"), add_special_tokens=False)["input_ids"] + [
        tokenizer.eos_token_id
    ]
    for traj in trajs:
        traj.extend(turn, [0.0] * len(turn), 0, "stop")
    assert AgentLoop(tokenizer, 1024).advance(queue, trajs, 0) == 1
    assert not trajs[0].finished and trajs[1].finish_reason == "env_error"
    result = AgentVerifier().score_one(
        Sample(bad, 0, (1,), Completion((1,), (0.0,), "", "env_error"), env=trajs[1].env)
    )
    assert not result.ok and "environment failed: TypeError" in result.reason


def test_sft_examples_mask_tool_results(tokenizer):
    from posttrain.config import SFTStage
    from posttrain.stages.sft import sft_conversations, sft_sequences

    stage = SFTStage(name="s", type="sft", lr=1e-3, steps=1, data=AgentTasks(type="agent", size=10))
    convs = sft_conversations(stage)
    seqs = sft_sequences(tokenizer, convs, max_len=2048)
    for messages, seq in zip(convs, seqs):
        trained = [t for t, m in zip(seq.token_ids[seq.prompt_len :], seq.loss_mask) if m]
        want = [
            t
            for m in messages
            if m.role == "assistant"
            for t in tokenizer(m.content, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        ]
        assert trained == want
        assert messages[-1] == Message("assistant", messages[-1].content) and any(m.role == "tool" for m in messages)


# ---------------------------------------------------------------- on the real stack


@pytest.fixture(scope="module")
def agent_run(ray_session, tiny_dir, tmp_path_factory):
    """The tiny model after a short SFT on gold calculator episodes (so it calls tools),
    with one engine, two ZeRO-2 ranks, and an RL stage over agent tasks."""
    from transformers import AutoTokenizer

    from posttrain.config import AgentTasks, PipelineConfig, RLStage, RolloutConfig, SFTStage, TrainerConfig
    from posttrain.rollout.engine import RolloutEngine
    from posttrain.rollout.pool import EnginePool
    from posttrain.runtime.infra import Infra
    from posttrain.stages.rl import RLRun
    from posttrain.stages.sft import sft_conversations, sft_sequences
    from posttrain.train.group import TrainerGroup
    from posttrain.train.spec import loss_spec

    tokenizer = AutoTokenizer.from_pretrained(tiny_dir)
    tasks = AgentTasks(type="agent", size=64, families=["calculator"], max_turns=3, system_prompt="")
    stage = RLStage(
        name="agent",
        type="rl",
        lr=1e-4,
        steps=1,
        tasks=tasks,
        prompts_per_step=4,
        group_size=4,
        max_tokens=80,
        temperature=1.0,
    )
    config = PipelineConfig(
        model={"name": "tiny"},
        rollout=RolloutConfig(max_model_len=320),
        # every sequence through the passes (not only those with a gradient): the test compares
        # the trainer's token count and logprobs with the engine's on every model token
        trainer=TrainerConfig(workers=2, micro_batch_tokens=1024, skip_zero_gradient=False),
        stages=[stage],
    )
    trainers = TrainerGroup(config.trainer, seed=0)
    trainers.load(str(tiny_dir), "float32", lr=3e-3, warmup_steps=0)
    sft = sft_sequences(tokenizer, sft_conversations(SFTStage(name="s", type="sft", lr=1e-3, steps=1, data=tasks)), 320)
    rng = random.Random(0)
    for _ in range(30):
        trainers.train_step([sft[rng.randrange(len(sft))] for _ in range(16)], loss_spec("nll"))
    pool = EnginePool([RolloutEngine.remote_actor(str(tiny_dir), config.rollout, "float32", 0)], None)
    trainers.sync_weights(pool.engines)
    run = RLRun(stage, Infra(config, tmp_path_factory.mktemp("agent"), trainers, pool, None, tokenizer))
    yield run
    pool.shutdown()
    trainers.shutdown()


@pytest.mark.system
def test_episodes_on_the_engine_alternate_turns_and_train_on_model_tokens_only(agent_run):
    import numpy as np

    from posttrain.stages.rl import logp_mismatch

    run = agent_run
    version = run.infra.trainers.version
    groups, _ = run.iterate(version, None)
    samples = run.samples(groups)
    rewards = run.score(groups, samples)
    multi = [s for s in samples if 0 in s.action_mask]
    assert multi, "no episode made a tool call after SFT on tool-use episodes"
    for s in multi:
        assert s.env["calls"] and s.env["turns"] >= 2
        assert s.completion.finish_reason in ("stop", "max_turns", "length")
    assert all(r.ok and r.source == "agent" for r in rewards)
    seqs, _ = run.batch(groups, rewards, version)
    for seq, s in zip(seqs, [s for s in samples if s.completion.token_ids]):
        assert list(seq.loss_mask) == [float(m) for m in s.action_mask]
    out = run.infra.trainers.train_step(seqs, run_spec(run))
    assert out.sums.tokens == sum(sum(s.loss_mask) for s in seqs)
    # the engine's logprobs agree with the trainer's on every token the model sampled,
    # also after tool messages were spliced into the context
    assert logp_mismatch(seqs, out.logp) < 1e-4
    later = [(lt, s) for s, lt in zip(seqs, out.logp) if 0.0 in s.loss_mask]
    tail = [
        abs(a - b)
        for lt, s in later
        for i, (a, b, m) in enumerate(zip(lt, s.logp_engine, s.loss_mask))
        if m and i > s.loss_mask.index(0.0)
    ]
    assert tail and float(np.mean(tail)) < 1e-4


def run_spec(run):
    from posttrain.stages.rl import stage_loss_spec

    return stage_loss_spec(run.stage)
