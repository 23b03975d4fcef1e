"""The GRM with a real judge: a tiny model served by a vLLM judge engine actor on a real
local Ray, with JSON-schema structured outputs. The tiny judge's weights are random, so
these tests check the plumbing (every reply well-formed, every field recorded, the
score recomputable from the entry, the length cap, the cache), not judging quality."""

import asyncio
import json

import pytest

from posttrain.config import GRMConfig, TinyModelConfig
from posttrain.records.rl_metrics import grm_metrics
from posttrain.rewards.grm import GRM, final_score
from posttrain.rewards.grm_parse import Criterion
from posttrain.types import Completion, Message, Sample, Task

RECIPE_FIELDS = [
    "task_id",
    "candidate",
    "rubric",
    "verdicts",
    "score",
    "rubric_raw",
    "judge_model",
    "procedure_version",
    "latency_s",
    "status",
    "reason",
]


@pytest.fixture(scope="module")
def judge_dir(tmp_path_factory):
    from posttrain.models import build_tiny

    # a longer context than the default tiny model: its byte-level tokenizer makes judge prompts long
    return build_tiny(TinyModelConfig(max_position=2048), seed=0, target=tmp_path_factory.mktemp("judge") / "tiny")


@pytest.fixture(scope="module")
def grm(ray_session, judge_dir):
    config = GRMConfig(
        judge={"type": "vllm", "model": str(judge_dir), "max_model_len": 1536, "kv_cache_gib": 0.25},
        max_criteria=3,
        length_cap=16,
        reason_chars=30,
        verdict_tokens=96,
        rubric_tokens=640,
    )
    model = GRM(config)
    model.start()
    yield model
    model.close()


def sample(text: str, tokens: int = 8, task_id: str = "writing/0/1", prompt: str = "Write a short poem about rain."):
    task = Task(task_id, "writing", (Message("user", prompt),), verifier="grm")
    return Sample(task, 0, (1,), Completion(tuple(range(tokens)), (0.0,) * tokens, text, "stop"))


def engine_requests(grm) -> int:
    import ray

    return ray.get(grm.backend.actor.info.remote())["requests"]


def test_real_judge_fills_every_recipe_field(grm):
    texts = ["Rain taps the glass.", "Taxes are due in April.", "Grey clouds, wet streets."]
    results = asyncio.run(grm.score([sample(t) for t in texts]))
    assert all(r.ok and r.source == "grm" for r in results), [r.reason for r in results]
    for r, text in zip(results, texts):
        entry = r.details
        assert all(entry.get(k) is not None for k in RECIPE_FIELDS), entry
        assert entry["candidate"] == text and entry["status"] == "scored" and entry["latency_s"] > 0
        assert 3 == len(entry["rubric"]) == len(entry["verdicts"])
        # structured outputs: the accepted replies are whole JSON documents, not repaired text
        assert json.loads(entry["rubric_raw"][-1], strict=False)["criteria"]
        assert all(json.loads(v["raw"][-1], strict=False)["verdict"] in ("yes", "no") for v in entry["verdicts"])
        assert all(0 <= v["probability"] <= 1 and v["reason"] for v in entry["verdicts"])  # P(yes) from logprobs
        criteria = [Criterion(**c) for c in entry["rubric"]]
        assert r.score == pytest.approx(final_score(criteria, [v["score"] for v in entry["verdicts"]]), abs=1e-3)
        assert -1 <= r.score <= 1
    assert len({json.dumps(r.details["rubric"]) for r in results}) == 1  # one rubric per task, shared


def test_length_cap_loses_without_asking_the_judge(grm):
    before = engine_requests(grm)
    long, short = sample("word " * 20, tokens=20), sample("Rain taps the glass.", tokens=5)
    results = asyncio.run(grm.score([long, short]))
    assert results[0].ok and results[0].score == -1.0
    assert results[0].reason == "over length cap: 20 > 16 tokens" and results[0].details["status"] == "length_capped"
    assert engine_requests(grm) == before  # the short one was judged before: a cache hit
    metrics = grm_metrics(results)
    assert metrics["grm/length_capped"] == 1 and metrics["grm/cache_hit"] == 0.5


def test_cache_hits_skip_the_judge_and_new_candidates_reuse_the_rubric(grm):
    texts = ["Rain taps the glass.", "Taxes are due in April."]
    first = asyncio.run(grm.score([sample(t) for t in texts]))  # judged in the first test
    before = engine_requests(grm)
    again = asyncio.run(grm.score([sample(t) for t in texts]))
    assert engine_requests(grm) == before
    assert [r.score for r in again] == [r.score for r in first] and all(r.details["cache_hit"] for r in again)
    fresh = asyncio.run(grm.score([sample("Drops on the roof, twice."), sample("Drops on the roof, twice.")]))
    assert [r.details["cache_hit"] for r in fresh] == [False, True]  # duplicates in a batch are judged once
    tries = fresh[0].details["judge_tries"]["verdicts"]
    assert engine_requests(grm) - before == tries >= 3  # verdict calls only: the task's rubric was cached


@pytest.mark.system
def test_a_dead_judge_engine_is_replaced_by_the_retry(grm):
    import ray

    candidate = sample("Thunder rolls, then quiet.")
    # an earlier test of this file may have left the task's rubric in the GRM's cache
    rubric_cached = grm.rubric_key(candidate.task) in grm.rubrics
    ray.kill(grm.backend.actor)
    result = asyncio.run(grm.score([candidate]))[0]
    assert result.ok, result.reason  # first round: the dead actor's calls fail; the retry ran on a new engine
    # the first call to reach the dead engine: a verdict's if the rubric was cached, else the rubric's
    first = result.details["verdicts"][0]["raw"][0] if rubric_cached else result.details["rubric_raw"][0]
    assert first.startswith("<error: judge engine failed"), first
    # the new engine served the retries and every call after them
    assert engine_requests(grm) == len(result.details["verdicts"]) + (not rubric_cached)
