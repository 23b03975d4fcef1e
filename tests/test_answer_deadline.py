"""Every answer verifier has a hard time limit per sample, in any thread: each sample's check
runs in a worker process. An answer that sends the symbolic checker into a C loop
(`9^{999999999}` against `2^{10}`) scores 0 at its limit, the worker is replaced, the other
samples of the batch are scored as they would be alone, and the thread that waits holds no
lock: the main thread keeps running meanwhile. What a response makes of its check (a
timeout, a crash, an exception) scores 0 with the reason; a check that raises on the task's
own answer too is a broken task (unscored); only a worker that cannot start is the
machinery's failure (unscored)."""

import asyncio
import os
import threading
import time

import pytest

from posttrain.rewards.deadline import as_verdict
from posttrain.rewards.math_verifier import MathVerifier
from posttrain.rewards.reasoning_gym import ReasoningGymVerifier
from posttrain.rewards.user import UserReward
from posttrain.rollout.workers import CallTimeout, WorkerPool, WorkerUnavailable, import_modules
from posttrain.types import Completion, Message, RewardResult, Sample, Task

RUNAWAY = "So the answer is \\boxed{9^{999999999}}."
LIMIT = 3.0


def sample(text: str, answer: str = "2^{10}", verifier: str = "math", family: str = "math") -> Sample:
    task = Task("t", family, (Message("user", "What is 2^{10}?"),), answer=answer, verifier=verifier)
    if verifier == "reasoning_gym":
        task = Task("t", "basic_arithmetic", task.messages, answer=answer, entry={"answer": answer}, verifier=verifier)
    return Sample(task, 0, (1, 2), Completion((5, 6), (0.0, 0.0), text, "stop"))


def score_in_a_thread(verifier, samples):
    """Score in a worker thread (as expert jobs do) while the main thread takes turns; the
    longest the main thread waited for one (a check holding the interpreter lock would stall
    it for the whole computation: hours)."""
    results, done = {}, threading.Event()

    def job():
        results["r"] = asyncio.run(verifier.score(samples))
        done.set()

    started = last = time.perf_counter()
    longest = 0.0
    threading.Thread(target=job, daemon=True).start()
    while not done.wait(0.05):
        now = time.perf_counter()
        longest, last = max(longest, now - last), now
    return results["r"], longest, time.perf_counter() - started


VERIFIERS = {
    "math": lambda: MathVerifier(timeout_s=LIMIT),
    "reasoning_gym": lambda: ReasoningGymVerifier(timeout_s=LIMIT),
    "user": lambda: UserReward(None, answer_timeout_s=LIMIT),
}


@pytest.mark.parametrize("name", list(VERIFIERS))
def test_a_runaway_answer_stops_at_its_limit_and_the_batch_goes_on(name):
    verifier = VERIFIERS[name]()
    texts = ["\\boxed{1024}", RUNAWAY, "The answer is \\boxed{1024}", "\\boxed{1023}"]
    samples = [sample(t, verifier="reasoning_gym" if name == "reasoning_gym" else name) for t in texts]
    asyncio.run(verifier.score(samples[:1]))  # the workers set up (imports) outside the limit
    results, longest_wait, seconds = score_in_a_thread(verifier, samples)
    right, runaway, right_again, wrong = results
    assert runaway.ok and runaway.score == 0.0 and f"past its {LIMIT:g}s limit" in runaway.reason, runaway
    assert right.ok and right.score == 1.0 and right_again.ok and right_again.score == 1.0, (right, right_again)
    assert wrong.ok and wrong.score == 0.0
    assert seconds < LIMIT + 60  # one limit, not the computation (which would take hours)
    assert longest_wait < LIMIT, (longest_wait, seconds)  # the main thread was never stalled


class Fussy(MathVerifier):
    """A verifier whose check misbehaves on command (importable by the workers: this module)."""

    def score_one(self, sample: Sample) -> RewardResult:
        text, answer = sample.completion.text, sample.task.answer
        if answer == "broken":
            raise KeyError("the task's row is broken")
        if "CRASH" in text:
            os._exit(3)
        if "RAISE" in text:
            raise ValueError("a parser bug the response found")
        if "HANG" in text:
            time.sleep(3600)
        return super().score_one(sample)


def test_what_a_response_makes_of_its_check_scores_0_and_a_broken_task_is_unscored():
    verifier = Fussy(timeout_s=LIMIT)
    texts = ["\\boxed{1024}", "CRASH", "\\boxed{1024}", "RAISE", "HANG", "\\boxed{1024}"]
    samples = [sample(t) for t in texts] + [sample("\\boxed{1}", answer="broken")]
    results = asyncio.run(verifier.score(samples))
    by_text = dict(zip(texts, results))
    assert [r.score for r in results] == [1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0]
    assert all(r.ok for r in results[:-1]), [r.reason for r in results]
    assert "crashed" in by_text["CRASH"].reason and "exit code 3" in by_text["CRASH"].reason
    assert "raised ValueError: a parser bug the response found" in by_text["RAISE"].reason
    assert "limit" in by_text["HANG"].reason
    broken = results[-1]
    assert not broken.ok and "task error" in broken.reason and "the task's row is broken" in broken.reason


class SlowToLoad(MathVerifier):
    """A verifier whose loading in a worker takes longer than a sample's limit, as importing
    its module does on a loaded machine (math-verify, SymPy, a user's imports)."""

    def __setstate__(self, state):
        time.sleep(LIMIT + 2)
        self.__dict__.update(state)


def test_loading_the_verifier_in_a_worker_is_not_counted_against_a_samples_limit():
    results = asyncio.run(SlowToLoad(timeout_s=LIMIT).score([sample("\\boxed{1024}"), sample("\\boxed{1023}")]))
    assert [r.score for r in results] == [1.0, 0.0], [r.reason for r in results]
    assert all(r.ok for r in results)


def test_a_worker_is_replaced_after_a_timeout_and_the_others_go_on():
    pool = WorkerPool(workers=2)
    try:
        with pytest.raises(CallTimeout):
            pool.call(time.sleep, (60,), 1.0)
        assert pool.replaced == 1
        assert pool.map(divmod, [(7, 2), (9, 4), (1, 1)], 30.0) == [((3, 1), None), ((2, 1), None), ((1, 0), None)]
    finally:
        pool.close()


def test_a_worker_that_cannot_start_leaves_its_samples_unscored():
    pool = WorkerPool(workers=1, initializer=import_modules, initargs=("no_such_module_for_posttrain",))
    try:
        with pytest.raises(WorkerUnavailable, match="No module named"):
            pool.call(divmod, (1, 1), 5.0)
        ((value, error),) = pool.map(divmod, [(1, 1)], 5.0)
    finally:
        pool.close()
    verdict = as_verdict(value, error, "math")
    assert not verdict.ok and verdict.reason.startswith("unscored: no answer-check worker")
