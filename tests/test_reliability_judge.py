"""Reliability battery, judge side: the GRM's judge (a real HTTP server in the test,
scripted) answers garbage, the wrong JSON, nothing, an HTTP error, a rate limit, or too
late. A transport fault is sent again by the client after a backoff (honouring
Retry-After), at the same temperature; an unreadable reply is asked again by the GRM,
hotter. A lasting fault leaves the sample unscored (ok=False) after 1 + retries tries, and
later samples are scored as usual."""

import asyncio
import json
import time

import pytest
from test_grm_http import Judge, grm_for, samples, server  # noqa: F401 (the server fixture)

KEY = "secret-key-123"
TIMEOUT_S = 8.0  # generous: on a loaded machine 1 s timed out the healthy replies too
GARBAGE = {
    "text": lambda h: h._send_raw(200, b'{"choices": [{"message": {"content": "I think it is fine!!"}}]}'),
    "wrong_shape": lambda h: h._send(200, {"choices": [{"message": {"content": json.dumps({"score": 11})}}]}),
    "empty": lambda h: h._send(200, {"choices": [{"message": {"content": ""}}]}),
    "no_choices": lambda h: h._send(200, {"id": "x"}),
    "http_500": lambda h: h._send(500, {"error": "overloaded"}),
    "http_429": lambda h: h._send_raw(429, b'{"error": {"message": "slow down"}}', {"Retry-After": "2"}),
    "not_json": lambda h: h._send_raw(200, b"<html>502 Bad Gateway</html>"),
    "timeout": lambda h: (time.sleep(TIMEOUT_S + 1), h._send(200, {"choices": []})),
}


class FaultyJudge(Judge):
    """The scripted judge of test_grm_http, except that while `server.faults` > 0 each
    request gets `server.fault` instead (and uses one up)."""

    def do_POST(self):
        with self.server.lock:
            faulty = self.server.faults > 0
            self.server.faults -= faulty
            self.server.requests += 1
            self.server.times.append(time.monotonic())
        if not faulty:
            return super().do_POST()
        self.rfile.read(int(self.headers["Content-Length"]))
        GARBAGE[self.server.fault](self)

    def _send_raw(self, status, data, headers=None):
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture()
def faulty(server):  # noqa: F811
    server.RequestHandlerClass = FaultyJudge
    server.faults, server.fault, server.requests, server.times = 0, "text", 0, []
    return server


TRANSPORT = {"http_500", "http_429", "timeout"}  # faults the client sends again itself


@pytest.mark.parametrize("fault", ["text", "http_500", "http_429", "timeout"])
def test_a_transient_fault_is_retried_and_the_sample_scored(faulty, fault):
    faulty.fault, faulty.faults = fault, 1
    result = asyncio.run(
        grm_for(faulty, timeout_s=TIMEOUT_S).score(samples("Two wheels, one bicycle,\nthe road hums."))
    )[0]
    assert result.ok and result.score == pytest.approx(0.8), result.reason
    transport = fault in TRANSPORT
    assert result.details["judge_tries"]["rubric"] == (1 if transport else 2)
    assert result.details["judge_resent"]["rubric"] == (1 if transport else 0)
    # the GRM asks an unreadable reply again hotter; the client resends a failed request as it was
    rubric_temperatures = [b["temperature"] for b in faulty.bodies if "rubric" in b["messages"][0]["content"]]
    assert rubric_temperatures == ([0.0] if transport else [0.7])  # (bodies: the requests answered, not the faulty one)
    if fault == "http_429":  # not resent at once: after the server's Retry-After (2 s)
        assert faulty.times[1] - faulty.times[0] >= 1.9


@pytest.mark.parametrize("fault", list(GARBAGE))
def test_a_lasting_fault_leaves_the_sample_unscored(faulty, fault):
    faulty.fault, faulty.faults = fault, 10**6
    started = time.perf_counter()
    resends = 1 if fault in TRANSPORT - {"timeout"} else 0  # (a timeout resent would cost 9 s a time)
    grm = grm_for(faulty, timeout_s=TIMEOUT_S, transport_retries=resends)
    bad = asyncio.run(grm.score(samples("A bicycle poem.")))  # retries=1
    assert not bad[0].ok and bad[0].score == 0.0
    assert bad[0].reason.startswith("unscored: rubric reply unusable after 2 tries"), bad[0].reason
    # tried twice by the GRM, each sent 1 + resends times by the client, then given up
    assert faulty.requests == 2 * (1 + resends) and time.perf_counter() - started < 60


def test_after_a_judge_outage_the_next_samples_are_scored(faulty):
    grm = grm_for(faulty, timeout_s=TIMEOUT_S)
    faulty.fault, faulty.faults = "not_json", 10**6
    bad = asyncio.run(grm.score(samples("A bicycle poem.", "Hello.")))
    assert [r.ok for r in bad] == [False, False]
    faulty.faults = 0
    good = asyncio.run(grm.score(samples("Two wheels, one bicycle,\nthe road hums.")))
    assert good[0].ok and good[0].score == pytest.approx(0.8)
