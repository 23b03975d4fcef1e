"""Partial rollouts on real vLLM engine actors: continuation from a cut prefix, stopping
at lambda, an engine killed mid-iteration losing nothing, and one dead at a weight push
replaced and loaded."""

import threading

import pytest
import ray

from posttrain.config import RolloutConfig
from posttrain.rollout.engine import RolloutEngine
from posttrain.rollout.pool import EnginePool
from posttrain.rollout.queue import PartialRolloutQueue
from posttrain.types import GenerationRequest, Message, SamplingSettings, Task

TASK = Task("t/0", "chain_sum", (Message("user", "x"),), "2", {"answer": "2"})
GREEDY = SamplingSettings(temperature=0.0)


@pytest.fixture(scope="module")
def pool(ray_session, tiny_dir):
    def start(index):
        return RolloutEngine.remote_actor(str(tiny_dir), RolloutConfig(max_model_len=256), "float32", seed=index)

    p = EnginePool([start(0), start(1)], start)
    ray.get([e.info.remote() for e in p.engines])
    yield p
    p.shutdown()


def test_resume_from_cut_prefix_gives_the_uninterrupted_greedy_tokens(pool):
    engine = pool.engines[0]
    prompt = (1, 40, 41, 42)
    (full,) = ray.get(engine.generate_partial.remote([GenerationRequest(prompt, 1, 40)], GREEDY, 1))
    assert len(full.token_ids) > 12
    for cut in (1, 7, 12):
        (rest,) = ray.get(
            engine.generate_partial.remote([GenerationRequest(prompt + full.token_ids[:cut], 1, 40 - cut)], GREEDY, 1)
        )
        assert full.token_ids[:cut] + rest.token_ids == full.token_ids


def test_iteration_stops_once_lambda_has_finished(pool):
    q = PartialRolloutQueue(max_staleness=4)
    trajs = []
    for max_tokens in (2, 4, 6, 8, 40, 40, 40, 40):
        trajs += q.add_group(TASK, (1, 50, 51), 1, max_tokens, None, version=0)
    pool.run_iteration(trajs, SamplingSettings(), lam=0.5, version=0)
    finished = [t for t in trajs if t.finished]
    cut = [t for t in trajs if not t.finished]
    assert len(finished) >= 4 and cut, [len(t.response_ids) for t in trajs]
    for t in cut:  # cut ones keep their prefix, behaviour logprobs and versions
        assert 0 < len(t.response_ids) < t.max_tokens
        assert len(t.logp_behaviour) == len(t.token_versions) == len(t.response_ids)
    pool.run_iteration(cut, SamplingSettings(), lam=1.0, version=1)
    assert all(t.finished for t in trajs)
    assert any(1 in t.token_versions and 0 in t.token_versions for t in cut)
    assert len(q.pop_complete(version=1)) == 8


@pytest.mark.system
def test_killing_an_engine_mid_iteration_loses_no_sample(pool):
    q = PartialRolloutQueue(max_staleness=10)
    trajs = []
    for _ in range(16):
        trajs += q.add_group(TASK, (1, 60, 61), 4, 200, None, version=0)
    victim = pool.engines[1]
    timer = threading.Timer(0.5, lambda: ray.kill(victim))
    timer.start()
    timing = pool.run_iteration(trajs, SamplingSettings(), lam=1.0, version=0)
    timer.join()
    assert pool.restarts == 1 and pool.engines[1] is not victim
    assert timing["requeued_by_engine_death"] == 32
    untouched = [t for t in trajs if not t.finished]
    assert len(untouched) == 32 and all(t.response_ids == [] for t in untouched)
    assert q.check()["samples/queued"] == 64  # nothing lost: all still accounted for
    pool.run_iteration(q.unfinished(version=0, limit=64), SamplingSettings(), lam=1.0, version=0)
    assert all(t.finished for t in trajs)
    assert len(q.pop_complete(version=0)) == 16
    q.mark_trained(64)
    assert q.check()["samples/trained"] == 64


def test_an_engine_dead_at_a_weight_push_is_replaced_and_loaded(pool, tiny_dir):
    restarts = pool.restarts
    victim = pool.engines[0]
    ray.kill(victim)

    def load(engines):
        return ray.get([e.load_folder.remote(str(tiny_dir), 7) for e in engines])

    assert pool.on_every_engine(load) == [7, 7]
    assert pool.restarts == restarts + 1 and pool.engines[0] is not victim
    assert [ray.get(e.info.remote())["version"] for e in pool.engines] == [7, 7]

    def trainer_died(engines):  # every engine answers: not theirs to fix, raised as it is
        raise ray.exceptions.RayActorError()

    with pytest.raises(ray.exceptions.RayActorError):
        pool.on_every_engine(trainer_died)
    assert pool.restarts == restarts + 1
