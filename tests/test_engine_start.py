"""Engines that are slow to start, and pushes that time out, on real Ray actors: a push
waits for an engine still starting (its own deadline counts after), an engine that
outlasts `rollout.start_timeout_s` is an error naming the key, and a push an engine does
not answer in time is retried with that engine replaced. The engine here is a small actor
with the pool's interface (`info`, `update_weights`), slow where the test says."""

import time

import pytest
import ray

from posttrain.config import RolloutConfig
from posttrain.rollout.pool import EnginePool, EngineStartTimeout
from posttrain.train.group import engine_results


@ray.remote(num_cpus=0, max_concurrency=1)
class SlowEngine:
    """Starts in `start_s` (a vLLM engine compiling, capturing graphs); its first push
    takes `hang_s` (stuck in a receive)."""

    def __init__(self, start_s: float, hang_s: float = 0.0):
        time.sleep(start_s)
        self.hang_s, self.version = hang_s, 0

    def info(self) -> dict:
        return {"version": self.version}

    def update_weights(self, version: int) -> int:
        time.sleep(self.hang_s)
        self.hang_s, self.version = 0.0, version
        return version


def ping_push(engines: list) -> list:
    """A push whose first step pings every engine with a short deadline, as the collective
    push does (2 s here; 120 s in the push, far below a cold GPU engine's start)."""
    ray.get([e.info.remote() for e in engines], timeout=2.0)
    return ray.get([e.update_weights.remote(1) for e in engines])


def test_start_deadline_is_a_documented_rollout_key():
    assert RolloutConfig().start_timeout_s >= 600  # a cold GPU engine: load, torch.compile, CUDA graphs
    with pytest.raises(ValueError, match="start_timeout_s"):
        RolloutConfig(start_timeout_s=0)


def test_a_push_to_an_engine_still_starting_waits_for_it(ray_session):
    pool = EnginePool([SlowEngine.remote(6.0), SlowEngine.remote(0.0)], lambda i: SlowEngine.remote(0.0), 60.0)
    try:
        started = time.monotonic()
        assert pool.on_every_engine(ping_push) == [1, 1]
        assert time.monotonic() - started >= 5.0  # it waited for the start, not for a retry of it
        assert pool.restarts == 0  # nothing replaced: an engine starting is not a fault
    finally:
        pool.shutdown()


def test_an_engine_past_its_start_deadline_is_an_error_naming_the_key(ray_session):
    pool = EnginePool([SlowEngine.remote(600.0)], lambda i: SlowEngine.remote(600.0), 1.5)
    try:
        started = time.monotonic()
        with pytest.raises(EngineStartTimeout, match="rollout.start_timeout_s"):
            pool.on_every_engine(ping_push)
        assert time.monotonic() - started < 300.0  # the deadline, not the engine's 600 s start
    finally:
        pool.shutdown()


def test_a_timed_out_push_replaces_the_stuck_engine_and_pushes_again(ray_session):
    engines = [SlowEngine.remote(0.0), SlowEngine.remote(0.0, hang_s=300.0)]
    stuck = engines[1]
    pool = EnginePool(list(engines), lambda i: SlowEngine.remote(0.0), 60.0)

    def push(engines: list) -> list:
        return engine_results([e.update_weights.remote(1) for e in engines], engines, 3.0, "weight sync")

    try:
        started = time.monotonic()
        assert pool.on_every_engine(push) == [1, 1]
        assert time.monotonic() - started < 200.0  # not the stuck engine's 300 s
        assert pool.restarts == 1 and pool.engines[1] is not stuck and pool.engines[0] is engines[0]
    finally:
        pool.shutdown()
