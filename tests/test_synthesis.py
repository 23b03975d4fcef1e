"""Synthesized SFT data: the serialization template's round trip, each verification stage
rejecting what it should, the review queue changing the SFT set (unit tests); the real
stack (a tiny teacher on vLLM) in test_synthesis_run.py."""

import json

import pytest

from posttrain.config import AgentTasks, ReasoningGymTasks, SynthesisStage
from posttrain.data import builtin_env
from posttrain.data.chat import (
    TEMPLATE_VERSION,
    TemplateError,
    format_call,
    parse_response,
    render_prompt,
    render_response,
    sft_example,
    tool_turn_ids,
)
from posttrain.data.tasks import load_tasks
from posttrain.synthesis.store import ReviewError, SynthesisStore, from_messages
from posttrain.synthesis.verify import PASSED, REJECTED, REVIEW, Verifier, check_format, check_messages
from posttrain.types import Message, RewardResult


@pytest.fixture(scope="module")
def tokenizer(tiny_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_dir)


def gold_conversation(family="lookup_store", index=0):
    task = load_tasks(AgentTasks(type="agent", size=5, families=[family]))[index]
    return task, task.messages + tuple(Message(r, c) for r, c in task.entry["gold"])


def stage(**kw):
    base = {"name": "syn", "type": "synthesis", "teacher": {"model": "tiny"}, "tasks": {"type": "agent", "size": 4}}
    return SynthesisStage(**{**base, **kw})


# ---------------------------------------------------------------- the template


def test_template_round_trip_is_lossless(tokenizer):
    """render (chat template on top of the tool-call serialization), then parse: the same
    messages, and rendering those again gives the same token ids and mask."""
    tricky = (
        Message("user", 'Compute 2+2, then say "done".\n  Keep spaces  '),
        Message("assistant", "Sure.\n" + format_call("calculator", {"expression": "2 + 2"})),
        Message("tool", "4\nerror: nothing"),
        Message("assistant", ""),  # an empty turn survives too
        Message("user", 'and the café? {"x": 1}'),
        Message("assistant", "done \u00e9 \U0001f600"),
    )
    for messages in [gold_conversation(f, i)[1] for f in builtin_env.FAMILIES for i in range(2)] + [tricky]:
        ids, prompt_len, mask = sft_example(tokenizer, messages, 10**9)
        first = next(i for i, m in enumerate(messages) if m.role == "assistant")
        back = parse_response(tokenizer, ids[prompt_len:], mask)
        assert back == tuple(messages[first:])
        assert sft_example(tokenizer, messages[:first] + back, 10**9) == (ids, prompt_len, mask)
        assert ids[:prompt_len] == render_prompt(tokenizer, messages[:first])
    assert TEMPLATE_VERSION == "tools-v1"


def test_rollout_tokens_are_the_sft_tokens(tokenizer):
    """An agent episode built turn by turn (as rollouts build it) parses into messages whose
    SFT rendering is exactly the rollout's tokens and mask."""
    task, conversation = gold_conversation("lookup_store")
    response, mask = [], []
    for m in conversation[len(task.messages) :]:
        ids = render_response(tokenizer, m.content) if m.role == "assistant" else tool_turn_ids(tokenizer, m.content)
        response += ids
        mask += [int(m.role == "assistant")] * len(ids)
    turns = parse_response(tokenizer, response, mask)
    ids, prompt_len, sft_mask = sft_example(tokenizer, task.messages + turns, 10**9)
    assert ids[prompt_len:] == response and sft_mask == [float(m) for m in mask]


def test_template_refuses_what_it_cannot_have_written(tokenizer):
    ids = tokenizer("an answer cut short", add_special_tokens=False)["input_ids"]
    with pytest.raises(TemplateError, match="not closed"):
        parse_response(tokenizer, ids, [1] * len(ids))
    with pytest.raises(TemplateError, match="starts with a non-assistant"):
        parse_response(tokenizer, ids, [0] * len(ids))
    closed = ids + [tokenizer.eos_token_id]
    with pytest.raises(TemplateError, match="does not match the template"):
        parse_response(tokenizer, closed + ids + closed, [1] * len(closed) + [0] * len(ids) + [1] * len(closed))


# ---------------------------------------------------------------- verification stages


def response_of(tokenizer, turns):
    ids, mask = [], []
    for role, content in turns:
        piece = render_response(tokenizer, content) if role == "assistant" else tool_turn_ids(tokenizer, content)
        ids += piece
        mask += [int(role == "assistant")] * len(piece)
    return ids, mask


def test_format_stage_rejects_malformed_trajectories(tokenizer):
    task, _ = gold_conversation("calculator")
    call = format_call("calculator", {"expression": "2 + 3"})
    cases = {
        "ok": ([("assistant", call), ("tool", "5"), ("assistant", "5")], "stop", None, True),
        "bad json": (
            [("assistant", '<tool_call>{"name": "calculator", </tool_call>'), ("tool", "error"), ("assistant", "5")],
            "stop",
            None,
            False,
        ),
        "unknown tool": (
            [("assistant", format_call("rm", {"path": "/"})), ("tool", "error"), ("assistant", "5")],
            "stop",
            None,
            False,
        ),
        "bad arguments": (
            [("assistant", format_call("calculator", {"expr": "1"})), ("tool", "error"), ("assistant", "5")],
            "stop",
            None,
            False,
        ),
        "unclosed call": (
            [("assistant", '<tool_call>{"name": "calculator"'), ("tool", "error"), ("assistant", "5")],
            "stop",
            None,
            False,
        ),
        "ends on a call": ([("assistant", call), ("tool", "5"), ("assistant", call)], "max_turns", None, False),
        "env error": ([("assistant", "5")], "env_error", {"error": "TypeError: boom"}, False),
    }
    for name, (turns, finish, env, ok) in cases.items():
        ids, mask = response_of(tokenizer, turns)
        v, messages = check_format(task.messages, ids, mask, finish, env, tokenizer, tokenizer, tools=True)
        assert v["pass"] == ok, (name, v)
    cut = tokenizer("5 and then", add_special_tokens=False)["input_ids"]  # cut by max_tokens: no eos
    v, _ = check_format(task.messages, cut, [1] * len(cut), "length", None, tokenizer, tokenizer, tools=True)
    assert not v["pass"] and "not closed" in v["reason"]
    ids, mask = response_of(tokenizer, [("assistant", call), ("tool", "5"), ("assistant", "5")])
    v, _ = check_format(task.messages, ids, mask, "stop", None, tokenizer, tokenizer, tools=False)
    assert not v["pass"] and "without tools" in v["reason"]


def test_outcome_length_and_dedup_stages_reject_what_they_should():
    s = stage(
        verify={"outcome": {"threshold": 1.0, "grm_threshold": 0.2}, "length": {"min_tokens": 2, "max_tokens": 50}}
    )
    good = {"pass": True, "reason": "ok"}
    conv = (Message("user", "q"), Message("assistant", "A  b"))
    v = Verifier(s)
    r_ok = RewardResult(1.0, "correct", "agent")
    verdicts, status, _ = v.run("0-0", "t0", good, conv, r_ok, 10)
    assert status == PASSED and all(x["pass"] for x in verdicts.values())
    # outcome: wrong answer, unscored, a GRM score below its own threshold
    for result, why in [
        (RewardResult(0.0, "wrong", "agent"), "0 < 1"),
        (RewardResult(0.0, "judge timed out", "grm", ok=False), "unscored"),
        (RewardResult(0.1, "meh", "grm"), "0.1 < 0.2"),
    ]:
        verdicts, status, _ = v.run("1-0", "t1", good, (Message("user", "q"), Message("assistant", why)), result, 10)
        assert status == REJECTED and not verdicts["outcome"]["pass"] and why in verdicts["outcome"]["reason"]
    assert (
        v.run(
            "1-1",
            "t1",
            good,
            (Message("user", "q"), Message("assistant", "grm ok")),
            RewardResult(0.3, "fine", "grm"),
            10,
        )[1]
        == PASSED
    )
    # length limits
    for tokens, why in [(1, "< min 2"), (51, "> max 50")]:
        verdicts, status, _ = v.run(
            "2-0", "t2", good, (Message("user", "q"), Message("assistant", f"x{tokens}")), r_ok, tokens
        )
        assert status == REJECTED and why in verdicts["length"]["reason"]
    # dedup: the same assistant text (up to case and spaces) for the same task; another task is fine
    verdicts, status, _ = v.run("0-1", "t0", good, (Message("user", "q"), Message("assistant", "a B")), r_ok, 10)
    assert status == REJECTED and verdicts["dedup"]["reason"] == "duplicate of 0-0"
    assert v.run("3-0", "t3", good, conv, r_ok, 10)[1] == PASSED
    across = Verifier(stage(verify={"dedup": {"across_tasks": True}}))
    across.run("0-0", "t0", good, conv, r_ok, 10)
    assert across.run("3-0", "t3", good, conv, r_ok, 10)[1] == REJECTED
    # a rejected candidate does not block a later identical one; a disabled stage passes
    off = Verifier(stage(verify={"outcome": {"enabled": False}}))
    assert (
        off.run("0-0", "t0", good, conv, RewardResult(0.0, "wrong", "agent"), 10)[0]["outcome"]["reason"] == "disabled"
    )


def test_review_rule_near_threshold_and_random_share():
    good = {"pass": True, "reason": "ok"}
    v = Verifier(stage(verify={"outcome": {"grm_threshold": 0.5}}, review={"near_threshold": 0.2}))
    conv = lambda t: (Message("user", "q"), Message("assistant", t))  # noqa: E731
    assert (
        v.run("0-0", "t", good, conv("a"), RewardResult(0.4, "", "grm"), 5)[1] == REVIEW
    )  # just below: a person decides
    assert v.run("0-1", "t", good, conv("b"), RewardResult(0.65, "", "grm"), 5)[1] == REVIEW
    assert v.run("0-2", "t", good, conv("c"), RewardResult(0.9, "", "grm"), 5)[1] == PASSED
    assert v.run("0-3", "t", good, conv("d"), RewardResult(0.1, "", "grm"), 5)[1] == REJECTED
    bad_format = {"pass": False, "reason": "x"}
    assert v.run("0-4", "t", bad_format, conv("e"), RewardResult(0.45, "", "grm"), 5)[1] == REJECTED
    share = Verifier(stage(review={"fraction": 0.5, "seed": 3}))
    statuses = [
        share.run(f"{i}-0", f"t{i}", good, conv(str(i)), RewardResult(1.0, "", "agent"), 5)[1] for i in range(200)
    ]
    assert 70 < statuses.count(REVIEW) < 130 and statuses.count(REJECTED) == 0
    again = Verifier(stage(review={"fraction": 0.5, "seed": 3}))
    assert [
        again.run(f"{i}-0", f"t{i}", good, conv(str(i)), RewardResult(1.0, "", "agent"), 5)[1] for i in range(200)
    ] == statuses  # the same choice after a resume


def test_check_messages_on_hand_written_conversations():
    call = format_call("kv_get", {"key": "a"})
    assert check_messages(
        (Message("user", "q"), Message("assistant", call), Message("tool", "1"), Message("assistant", "1")), tools=True
    )["pass"]
    assert (
        "no tool result"
        in check_messages((Message("user", "q"), Message("assistant", call), Message("assistant", "1")), tools=True)[
            "reason"
        ]
    )
    assert (
        "follows no tool call"
        in check_messages((Message("user", "q"), Message("tool", "1"), Message("assistant", "1")), tools=True)["reason"]
    )
    assert "does not end with an assistant" in check_messages((Message("user", "q"),), tools=False)["reason"]


# ---------------------------------------------------------------- the review queue and the SFT set


def fake_rows(statuses):
    rows = []
    for i, status in enumerate(statuses):
        messages = [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}]
        rows.append(
            {
                "id": f"{i}-0",
                "task_id": f"t{i}",
                "task_index": i,
                "k": 0,
                "family": "f",
                "verifier": "reasoning_gym",
                "template": TEMPLATE_VERSION,
                "messages": messages,
                "status": status,
                "review_reason": "",
                "verdicts": {"format": {"pass": status != REJECTED, "reason": ""}},
            }
        )
    return rows


def test_review_decisions_change_the_sft_set(tmp_path, capsys):
    from posttrain.cli import main

    store = SynthesisStore(tmp_path, "syn")
    store.folder.mkdir(parents=True)
    store.append(fake_rows([PASSED, REVIEW, REVIEW, REVIEW, REJECTED]))
    assert [d["id"] for d in store.sft_set()] == ["0-0"]
    assert [r["id"] for r in store.queue()] == ["1-0", "2-0", "3-0"]
    edited = tmp_path / "edit.json"
    edited.write_text(
        json.dumps(
            {"messages": [{"role": "user", "content": "q3"}, {"role": "assistant", "content": "a better answer"}]}
        )
    )
    assert (
        main(["review", str(tmp_path), "--accept", "1-0", "--reject", "2-0", "--edit", "3-0", "--file", str(edited)])
        == 0
    )
    sft = store.sft_set()
    assert [d["id"] for d in sft] == ["0-0", "1-0", "3-0"]
    assert sft[2]["messages"][-1]["content"] == "a better answer"
    assert [json.loads(line)["id"] for line in store.sft.read_text().splitlines()] == ["0-0", "1-0", "3-0"]
    assert store.queue() == [] and store.summary()["reviewed"] == {"accept": 1, "reject": 1, "edit": 1}
    # a reviewer may also take back a passed one; the last decision counts
    assert main(["review", str(tmp_path), "--reject", "0-0"]) == 0
    assert [d["id"] for d in store.sft_set()] == ["1-0", "3-0"]
    # bad decisions are refused with the reason, and change nothing
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"role": "user", "content": "q"}]))
    assert main(["review", str(tmp_path), "--edit", "1-0", "--file", str(bad)]) == 2
    assert main(["review", str(tmp_path), "--accept", "9-9"]) == 2
    err = capsys.readouterr().err
    assert "does not end with an assistant message" in err and "no candidate '9-9'" in err
    assert [d["id"] for d in store.sft_set()] == ["1-0", "3-0"]


def test_interactive_review_reads_answers_from_stdin(tmp_path):
    import io

    from posttrain.synthesis.review import review

    store = SynthesisStore(tmp_path, "syn")
    store.folder.mkdir(parents=True)
    store.append(fake_rows([REVIEW, REVIEW, REVIEW, REVIEW]))
    edited = tmp_path / "e.json"
    edited.write_text(json.dumps([{"role": "user", "content": "q2"}, {"role": "assistant", "content": "edited"}]))
    out = io.StringIO()
    assert review(tmp_path, stdin=io.StringIO(f"r\nx\na\ne\n{edited}\n"), out=out) == 0
    assert [d["id"] for d in store.sft_set()] == ["1-0", "2-0"] and store.sft_set()[1]["messages"][1][
        "content"
    ] == "edited"
    assert [r["id"] for r in store.queue()] == ["3-0"]  # input ended: the rest waits
    assert "4 trajectories wait for review" in out.getvalue() and "--- assistant\na0" in out.getvalue()


def test_resume_sets_aside_a_task_cut_short(tmp_path):
    store = SynthesisStore(tmp_path, "syn")
    store.folder.mkdir(parents=True)
    rows = fake_rows([PASSED, PASSED, PASSED])
    rows[2]["task_id"] = rows[1]["task_id"] = "t1"
    rows[2]["k"], rows[2]["id"] = 1, "1-1"
    store.append(rows)  # t0 has 1 of 2 candidates... with K=2 only t1 is whole
    with store.candidates.open("a") as f:
        f.write('{"id": "torn')  # a write cut by the crash
    assert store.prepare(2) == {"t1"}
    assert [r["id"] for r in store.rows()] == ["1-0", "1-1"]
    assert "torn" not in store.candidates.read_text()
    assert [json.loads(x)["id"] for x in (store.folder / "candidates.replaced.jsonl").read_text().splitlines()] == [
        "0-0"
    ]


def test_sft_refuses_a_set_written_with_another_template(tmp_path):
    store = SynthesisStore(tmp_path, "syn")
    store.folder.mkdir(parents=True)
    rows = fake_rows([PASSED])
    rows[0]["template"] = "tools-v0"
    store.append(rows)
    with pytest.raises(ValueError, match="template 'tools-v0'"):
        store.conversations()


def test_config_checks_synthesis_references():
    from posttrain.config import PipelineConfig

    syn = {
        "name": "syn",
        "type": "synthesis",
        "teacher": {"model": "smollm2-135m-instruct"},
        "tasks": {"type": "reasoning_gym", "families": [{"name": "basic_arithmetic"}], "size": 4},
    }
    sft = {"name": "sft", "type": "sft", "lr": 1e-4, "steps": 1, "data": {"type": "synthesis", "stage": "syn"}}
    PipelineConfig(model={"name": "tiny"}, stages=[syn, sft])
    with pytest.raises(ValueError, match="names no earlier synthesis stage"):
        PipelineConfig(model={"name": "tiny"}, stages=[sft, syn])
    with pytest.raises(ValueError, match="synthesis stage, which makes no checkpoint"):
        PipelineConfig(model={"name": "tiny"}, stages=[syn, {**sft, "init_from": "syn"}])
    assert isinstance(SynthesisStage(**syn).tasks, ReasoningGymTasks) and from_messages([]) == []
    with pytest.raises(ReviewError):
        SynthesisStore(".", "x").decide("1", "maybe")


def test_review_wait_stops_the_pipeline_until_the_queue_is_empty(tmp_path):
    """With review.wait, a synthesis stage whose tasks are all done (a resume) raises while
    trajectories wait, and passes once they are decided."""
    from types import SimpleNamespace

    from posttrain.records.metrics import MetricsLog
    from posttrain.stages.synthesis import ReviewPending, run_synthesis

    s = stage(candidates=1, tasks={"type": "agent", "size": 3}, review={"wait": True})
    rows = fake_rows([PASSED, REVIEW, REVIEW])
    for row, task in zip(rows, load_tasks(s.tasks)):
        row["task_id"] = task.task_id
    store = SynthesisStore(tmp_path, "syn")
    store.folder.mkdir(parents=True)
    store.append(rows)
    infra = SimpleNamespace(run_dir=tmp_path, metrics=MetricsLog(tmp_path), live_progress=False, judge=None)
    with pytest.raises(ReviewPending, match="2 trajectories of stage syn wait for review"):
        run_synthesis(s, infra)
    store.decide("1-0", "accept")
    store.decide("2-0", "reject")
    summary = run_synthesis(s, infra)
    assert summary["queue"] == 0 and summary["sft_set"] == 2 and summary["candidates"] == 3
