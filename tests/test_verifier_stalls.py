"""No response stalls the scoring process, whatever verifier reads it (issue 55, item 4).

Each verifier gets responses of 100,000 unclosed delimiters of each kind (`\\boxed{`, `\\[`,
`$`, `(`, `{`, `<answer>`, a code fence): every one gets its verdict (0, scored) within the
verifier's limit, and the main thread keeps ticking meanwhile (a check in the calling
thread, or a quadratic regex holding the interpreter lock, would stall it: a final turn of
40,000 `\\[` took the agent verifier's hedge check 22 s).
"""

import asyncio
import threading
import time

import pytest

from posttrain.data import builtin_env
from posttrain.rewards.agent_verifier import AgentVerifier
from posttrain.rewards.env_reward import EnvReward
from posttrain.rewards.judgement import JudgementVerifier
from posttrain.rewards.math_verifier import MathVerifier
from posttrain.rewards.reasoning_gym import ReasoningGymVerifier
from posttrain.rewards.user import UserReward
from posttrain.types import Completion, Message, Sample, Task

LIMIT = 3.0
DELIMITERS = ("\\boxed{", "\\[", "$", "(", "{", "<answer>", "```\n")
ATTACKS = [d * 100_000 + " 41" for d in DELIMITERS]  # and a wrong value last: every verdict is 0
QUESTION = (Message("user", "What is 6 * 7?"),)


def _sample(task: Task, text: str, env: dict | None = None) -> Sample:
    return Sample(task, 0, (1,), Completion((5,), (0.0,), text, "stop"), env=env)


def _agent_samples() -> list[Sample]:
    task = Task("a", "agent", QUESTION, entry={"check": {"answer": "42"}}, verifier="agent")
    out = []
    for text in ATTACKS:
        state = builtin_env.initial_state(task.entry)
        state.final, state.turns = text, 1
        out.append(_sample(task, "", state.to_dict()))
    return out


def _env_samples() -> list[Sample]:
    task = Task("e", "env", QUESTION, answer="42", entry={"score": "math", "env": "x", "args": {}}, verifier="env")
    return [_sample(task, "", {"final": text, "turns": 1, "calls": []}) for text in ATTACKS]


def _answer_samples(verifier: str) -> list[Sample]:
    entry = {"question": QUESTION[0].content, "answer": "42", "metadata": {}}
    task = Task("t", "basic_arithmetic", QUESTION, answer="42", entry=entry, verifier=verifier)
    return [_sample(task, text) for text in ATTACKS]


def _judgement_samples() -> list[Sample]:
    task = Task("j", "judgement", QUESTION, entry={"call": "verdict", "label": "yes"}, verifier="judgement")
    return [_sample(task, text) for text in ATTACKS]


CASES = {
    "math": (lambda: MathVerifier(timeout_s=LIMIT), lambda: _answer_samples("math")),
    "reasoning_gym": (lambda: ReasoningGymVerifier(timeout_s=LIMIT), lambda: _answer_samples("reasoning_gym")),
    "user": (lambda: UserReward(None, answer_timeout_s=LIMIT), lambda: _answer_samples("user")),
    "agent": (lambda: AgentVerifier(timeout_s=LIMIT), _agent_samples),
    "judgement": (lambda: JudgementVerifier(timeout_s=LIMIT), _judgement_samples),
    "env": (EnvReward, _env_samples),
}


def score_while_ticking(verifier, samples):
    """(results, the longest the main thread waited between ticks, seconds in all)."""
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


@pytest.mark.parametrize("name", list(CASES))
def test_unclosed_delimiters_get_their_verdict_within_the_limit(name):
    make, samples = CASES[name]
    verifier = make()
    limit = getattr(verifier, "timeout_s", None) or getattr(verifier, "answer_timeout_s", None) or LIMIT
    if name == "env":
        limit = MathVerifier().timeout_s  # the env's math check runs at the math verifier's default limit
    asyncio.run(verifier.score(samples()[:1]))  # the workers set up (imports) outside the limit
    results, longest_wait, seconds = score_while_ticking(verifier, samples())
    for delimiter, result in zip(DELIMITERS, results):
        assert result.ok and result.score == 0.0, (name, delimiter, result.reason[:200])
    # the batch: one limit per sample at most (two workers share them), plus the start of a worker
    assert seconds < limit * len(ATTACKS) + 30, (name, seconds)
    assert longest_wait < limit, (name, longest_wait)  # never stalled by a verdict (loaded cores: slower ticks)


def test_the_code_verifiers_one_check_in_the_calling_thread_is_linear():
    """The code verifier reads the program out of the response before the sandbox (which has
    its own limits) runs it: that read is linear, a fraction of a second on every attack (the
    limit is one against a superlinear read, with room for a loaded machine)."""
    from posttrain.rewards.code import extract_code

    for text in [*ATTACKS, "```python\n" * 100_000, "```" * 100_000]:
        started = time.perf_counter()
        extract_code(text)
        assert time.perf_counter() - started < 10.0, text[:20]  # quadratic on 100k characters: hours
