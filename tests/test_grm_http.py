"""The HTTP judge backend against a real OpenAI-compatible server started in the test
(stdlib http.server in a thread). Its answers are scripted, since what is under test is
the client: auth header from the environment, bounded concurrency, timeouts and
retries, structured-output and logprob requests, and messy replies when the endpoint
has no structured outputs."""

import asyncio
import json
import math
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from posttrain.config import GRMConfig
from posttrain.rewards.grm import GRM
from posttrain.types import Completion, Message, Sample, Task

RUBRIC = {
    "criteria": [
        {"text": "Mentions bicycles", "kind": "essential", "weight": 4},
        {"text": "Is a poem", "kind": "important", "weight": 2},
        {"text": "Talks about taxes", "kind": "pitfall", "weight": 2},
    ]
}
KEY = "secret-key-123"
# The keys live in the environment from import (collection, before any test starts Ray in this
# worker) and are never changed after: setenv and unsetenv while Ray's native threads read the
# environment race with them, and a worker crashed so (a segfault at address 0 in libc).
os.environ.setdefault("TEST_JUDGE_KEY", KEY)
os.environ.setdefault("TEST_JUDGE_WRONG_KEY", "wrong")


class Judge(BaseHTTPRequestHandler):
    """Rubric requests get RUBRIC; a verdict is "yes" when the check's keyword is in the
    answer, with P(yes) = 0.9 (or 0.1 for no) in the top logprobs when asked for them."""

    def log_message(self, *args):
        pass

    def do_POST(self):
        server = self.server
        if self.headers.get("Authorization") != f"Bearer {KEY}":
            return self._send(401, {"error": "bad key"})
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with server.lock:
            server.bodies.append(body)
            server.in_flight += 1
            server.max_in_flight = max(server.max_in_flight, server.in_flight)
            slow = server.slow_first > 0
            server.slow_first -= slow
        try:
            time.sleep(2.0 if slow else server.delay)
            self._send(200, self._reply(body))
        finally:
            with server.lock:
                server.in_flight -= 1

    def _reply(self, body):
        prompt = body["messages"][-1]["content"]
        if "rubric" in body["messages"][0]["content"]:
            content, logprobs = json.dumps(RUBRIC), None
        else:
            answer = prompt.split("Their answer:\n", 1)[1].split("\n\n", 1)[0].lower()
            keyword = {"bicycles": "bicycle", "poem": "\n", "taxes": "tax"}[_keyword(prompt)]
            verdict = "yes" if keyword in answer else "no"
            content = json.dumps(
                {"verdict": verdict, "reason": f"keyword {keyword!r} {'found' if verdict == 'yes' else 'absent'}"}
            )
            logprobs = _logprobs(verdict) if body.get("logprobs") else None
        if not self.server.structured:
            content = f"Sure! Here is my grading:\n```json\n{content}\n```\nLet me know if you need more."
        choice = {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
        if logprobs:
            choice["logprobs"] = {"content": logprobs}
        return {"id": "x", "object": "chat.completion", "choices": [choice]}

    def _send(self, status, payload):
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _keyword(prompt: str) -> str:
    check = prompt.split("Check: ", 1)[-1].split("Mistake to look for: ", 1)[-1].lower()
    return "bicycles" if "bicycles" in check else "taxes" if "taxes" in check else "poem"


def _logprobs(verdict: str) -> list[dict]:
    p_yes = 0.9 if verdict == "yes" else 0.1
    tokens = ['{"', "verdict", '":"', verdict, '","', "reason", '":"', "ok", '"}']
    out = [{"token": t, "logprob": 0.0, "top_logprobs": [{"token": t, "logprob": 0.0}]} for t in tokens]
    out[3]["top_logprobs"] = [
        {"token": "yes", "logprob": math.log(p_yes)},
        {"token": "no", "logprob": math.log(1 - p_yes)},
    ]
    out[3]["logprob"] = math.log(p_yes if verdict == "yes" else 1 - p_yes)
    return out


@pytest.fixture()
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Judge)
    httpd.lock, httpd.bodies, httpd.in_flight, httpd.max_in_flight = threading.Lock(), [], 0, 0
    httpd.delay, httpd.slow_first, httpd.structured = 0.05, 0, True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def grm_for(server, **judge):
    settings = {
        "type": "http",
        "base_url": f"http://127.0.0.1:{server.server_port}/v1",
        "model": "judge-7b",
        "api_key_env": "TEST_JUDGE_KEY",
        "timeout_s": 1.0,
        "max_concurrency": 2,
        **judge,
    }
    return GRM(GRMConfig(judge=settings, retries=1))


def samples(*texts):
    task = Task("w/1", "writing", (Message("user", "Write a short poem about bicycles."),), verifier="grm")
    return [Sample(task, 0, (1,), Completion((1,) * 5, (0.0,) * 5, t, "stop")) for t in texts]


def test_http_judge_end_to_end_with_bounded_concurrency(server):
    texts = [
        "Two wheels, one bicycle,\nthe road hums.",
        "A bicycle is a vehicle.",
        "Pay your taxes early.",
        "Rain\nfalls.",
        "Bicycle tax\nis due.",
        "Hello.",
    ]
    results = asyncio.run(grm_for(server).score(samples(*texts)))
    assert all(r.ok for r in results)
    # P(yes) = 0.9 when the keyword is there, 0.1 otherwise; weights 4, 2, 2 (pitfall):
    # text 0: bicycle yes, poem yes (newline), no taxes: got = 4*.9 + 2*.9 + 2*(1-.1) = 7.2 of 8 -> 0.8
    # text 1: bicycle yes, no newline, no taxes: got = 3.6 + 0.2 + 1.8 = 5.6 -> 0.4
    # text 2: got = 4*.1 + 2*.1 + 2*(1-.9) = 0.8 -> -0.8
    assert [r.score for r in results][:3] == [pytest.approx(0.8), pytest.approx(0.4), pytest.approx(-0.8)]
    assert results[0].details["judge_model"] == f"judge-7b@http://127.0.0.1:{server.server_port}/v1"
    assert results[0].details["verdicts"][0]["reason"] == "keyword 'bicycle' found"
    assert server.max_in_flight == 2  # 18 verdict calls, never more than max_concurrency at once
    verdict_body = server.bodies[-1]
    assert verdict_body["model"] == "judge-7b" and verdict_body["response_format"]["type"] == "json_schema"
    assert verdict_body["logprobs"] is True and verdict_body["top_logprobs"] == 10


def test_timeout_is_retried(server):
    server.slow_first = 1  # the rubric request sleeps 2 s, past the 1 s timeout
    result = asyncio.run(grm_for(server).score(samples("A bicycle poem.")))[0]
    # the client sent it again after a backoff; the GRM saw one try, with the judge's reply
    assert result.ok and result.details["judge_tries"]["rubric"] == 1
    assert result.details["judge_resent"]["rubric"] == 1 and result.details["rubric_raw"][0] == json.dumps(RUBRIC)
    assert [b["temperature"] for b in server.bodies[:2]] == [0.0, 0.0]  # resent as it was
    server.slow_first = 2  # without client retries, the GRM's own two tries both time out
    lost = asyncio.run(grm_for(server, transport_retries=0).score(samples("A bicycle poem.")))[0]
    assert not lost.ok and lost.details["rubric_raw"] == ["<error: request timed out after 1.0s (1 tries)>"] * 2


def test_wrong_key_leaves_the_sample_unscored_and_a_missing_key_is_an_error(server):
    result = asyncio.run(grm_for(server, api_key_env="TEST_JUDGE_WRONG_KEY").score(samples("A bicycle poem.")))[0]
    assert not result.ok and result.score == 0.0 and "401" in result.reason
    assert result.reason.startswith("unscored: rubric reply unusable after 2 tries")
    assert "TEST_JUDGE_ABSENT_KEY" not in os.environ
    with pytest.raises(ValueError, match="TEST_JUDGE_ABSENT_KEY is not set"):
        grm_for(server, api_key_env="TEST_JUDGE_ABSENT_KEY")


def test_endpoint_without_structured_outputs_gets_parsed_from_text(server):
    server.structured = False
    grm = grm_for(server, structured=False, logprobs=False)
    result = asyncio.run(grm.score(samples("Two wheels, one bicycle,\nthe road hums.")))[0]
    assert result.ok and result.score == pytest.approx(1.0)  # binary verdicts: all met, no pitfall
    assert all("response_format" not in b and "logprobs" not in b for b in server.bodies)


def test_the_judgement_cache_is_bounded_and_keeps_the_recent_ones(server):
    grm = GRM(GRMConfig(judge=grm_for(server).config.judge, retries=1, cache_entries=2))
    first, second, third = samples("A bicycle.", "Two bicycles.", "Three bicycles.")
    for sample in (first, second, first, third):  # reading `first` again makes `second` the oldest
        assert asyncio.run(grm.score([sample]))[0].ok
    kept = {entry["candidate"] for entry in grm.cache.values()}
    assert len(grm.cache) == 2 and kept == {first.completion.text, third.completion.text}
    asked = len(server.bodies)
    assert asyncio.run(grm.score([first]))[0].details["cache_hit"] and len(server.bodies) == asked
    assert not asyncio.run(grm.score([second]))[0].details["cache_hit"] and len(server.bodies) > asked
