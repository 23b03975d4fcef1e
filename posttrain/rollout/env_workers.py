"""Your environments' episodes: their calls run in worker processes, one turn at a time.

Each environment (class and args) gets a pool of spawned worker processes that build it
once. A job is one model turn of one episode (the reset if the episode is new, then each
tool call of the turn) or one reward, given and returning plain JSON, so any worker can
take any episode and a restarted pool loses nothing. A job that raises, returns something
else than the interface says, or runs past its timeout is an error for its episode alone:
a hung worker is killed with its pool, which restarts, and the other jobs run again.
"""

from __future__ import annotations

import json
import multiprocessing

from posttrain.config.verifiers import verifier_facts
from posttrain.data.env import episode_task, load_env
from posttrain.data.tools import read_calls, tool_format, tool_names
from posttrain.rollout.queue import PartialRolloutQueue, Trajectory

STARTUP_TIMEOUT_S = 300
MAX_CALLS_PER_TURN = 4
MAX_REPLY_CHARS = 2000

_ENV = None


def _init(spec: str, args_json: str) -> None:
    global _ENV
    _ENV = load_env(spec, json.loads(args_json))


def _ready() -> bool:
    return True


def episode_turn(task: dict, state: dict | None, calls: list) -> dict:
    """Reset (a new episode), then run the turn's calls in order; JSON in, JSON out."""
    if state is None:
        state = _ENV.reset(task)
        if not isinstance(state, dict):
            raise TypeError(f"reset returned {type(state).__name__}, not a dict")
    replies, done = [], False
    for name, arguments in calls:
        out = _ENV.step(state, name, arguments)
        reply, done = out if isinstance(out, tuple) and len(out) == 2 else (out, False)
        if not isinstance(reply, str) or not isinstance(done, bool):
            raise TypeError(f"step returned {type(out).__name__}, not a reply string or (reply, done)")
        replies.append(reply)
        if done:
            break
    return {"state": json.loads(json.dumps(state)), "replies": replies, "done": done}


def episode_reward(task: dict, state: dict | None, final: str | None):
    if state is None:  # answered without a call: the episode's state is the initial one
        state = _ENV.reset(task)
    return _ENV.reward(state, task, final)


class EnvWorkers:
    """A pool of worker processes holding one environment (built by `init(spec, args_json)`)."""

    def __init__(self, spec: str, args: dict, workers: int, init=_init):
        self.spec, self.args_json, self.workers, self.init = spec, json.dumps(args, sort_keys=True), workers, init
        self._pool = None

    def _ensure(self):
        if self._pool is None:
            ctx = multiprocessing.get_context("spawn")
            self._pool = ctx.Pool(self.workers, initializer=self.init, initargs=(self.spec, self.args_json))
            # a fresh worker imports and builds the environment first; `timeout_s` is for the calls
            self._pool.apply_async(_ready).get(timeout=STARTUP_TIMEOUT_S)
        return self._pool

    def run(self, fn, jobs: list[tuple], timeout_s: float) -> list[tuple[bool, object]]:
        """(ok, result or `Failure`) per job. A job that outlives `timeout_s` (counted from
        when the one before it came back) is an error; its pool is killed and the jobs not
        yet done run again on a fresh one."""
        results: dict[int, tuple[bool, object]] = {}
        while len(results) < len(jobs):
            todo = [i for i in range(len(jobs)) if i not in results]
            try:
                pool = self._ensure()
            except Exception as exc:  # noqa: BLE001 - the environment cannot even be built
                self.close()
                return [(False, Failure("start", f"environment {self.spec} failed to start: {_text(exc)}"))] * len(jobs)
            pending = {i: pool.apply_async(fn, jobs[i]) for i in todo}
            for i in todo:
                try:
                    results[i] = (True, pending[i].get(timeout=timeout_s))
                except multiprocessing.TimeoutError:
                    results[i] = (False, Failure("timeout", f"timed out after {timeout_s:g}s"))
                    self.close()  # the hung call dies with its worker; the rest run again
                    break
                except Exception as exc:  # noqa: BLE001 - the environment's own error
                    results[i] = (False, Failure("raised", _text(exc)))
        return [results[i] for i in range(len(jobs))]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.terminate()
            self._pool = None


class Failure(str):
    """Why a job came back without a result: its text, and its `kind`: "start" (the environment
    could not be built, so nothing was judged), "timeout" or "raised" (the call itself did)."""

    kind: str

    def __new__(cls, kind: str, text: str) -> Failure:
        failure = super().__new__(cls, text)
        failure.kind = kind
        return failure


def _hung_call(calls: list, episode: dict) -> str:
    """What a turn that timed out was running: its tool call (the worker dies with it, so
    of several calls the one that hung is not known; nor, on a first turn, whether the
    reset before it returned)."""
    names = ", ".join(repr(name) for name, _ in calls)
    what = f"tool {names}" if len(calls) == 1 else f"one of the tools {names}" if calls else ""
    if episode.get("state") is None:
        return f"{what} (or the reset before it, on the episode's first turn)" if what else "the reset"
    return what or "the turn"


def _text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


_RUNNERS: dict[tuple[str, str], EnvWorkers] = {}


def workers_for(entry: dict) -> EnvWorkers:
    """The driver's one pool per environment (class, args), shared by episodes and rewards."""
    key = (entry["env"], json.dumps(entry["args"], sort_keys=True))
    if key not in _RUNNERS:
        _RUNNERS[key] = EnvWorkers(entry["env"], entry["args"], entry.get("workers", 2))
    return _RUNNERS[key]


def close_all() -> None:
    for runner in _RUNNERS.values():
        runner.close()
    _RUNNERS.clear()


class EnvEpisodes:
    """The environment's side of multi-turn episodes of `env` tasks (the agent loop calls it)."""

    def __init__(self, tokenizer, max_model_len: int, min_room: int):
        self.tokenizer, self.max_model_len, self.min_room = tokenizer, max_model_len, min_room
        self._format: str | None = None

    def advance(self, queue: PartialRolloutQueue, trajs: list[Trajectory], version: int, tool_ids) -> int:
        """Answer every turn that just ended; returns how many episodes continue."""
        by_env: dict[tuple, list[tuple[Trajectory, object, list]]] = {}
        for traj in trajs:
            task = queue.task_of(traj)
            if verifier_facts(task.verifier).episode != "env" or not traj.finished or (traj.env or {}).get("done"):
                continue
            episode = traj.env or {"state": None, "calls": [], "turns": 0, "final": None}
            episode["turns"] += 1
            traj.env = episode
            calls = self._calls(traj, task, episode)
            if calls is not None:
                by_env.setdefault((task.entry["env"], json.dumps(task.entry["args"])), []).append((traj, task, calls))
        continued = 0
        for items in by_env.values():
            entry = items[0][1].entry
            jobs = [(episode_task(task), traj.env["state"], calls) for traj, task, calls in items]
            results = workers_for(entry).run(episode_turn, jobs, entry["timeout_s"])
            for (traj, task, calls), (ok, out) in zip(items, results):
                continued += self._apply(traj, task, calls, ok, out, version, tool_ids)
        return continued

    def _calls(self, traj: Trajectory, task, episode: dict) -> list | None:
        """The turn's well-formed calls for the environment; None when the episode ends here."""
        if traj.finish_reason != "stop":  # cut by max_tokens: no final answer
            episode["done"] = True
            return None
        text = self.tokenizer.decode(traj.last_turn(), skip_special_tokens=True)
        if self._format is None:
            self._format = tool_format(self.tokenizer)
        calls, errors = read_calls(text)
        if not calls and not errors:  # no tool call: the final answer
            episode.update(final=text.strip(), done=True)
            return None
        known = set(tool_names(task.entry["tools"]))
        episode["pending"] = list(errors)  # the model's malformed calls get an error as their reply
        episode["calls"] += [{"name": "", "arguments": {}, "reply": error, "ok": False} for error in errors]
        good = []
        for name, arguments in calls[:MAX_CALLS_PER_TURN]:
            if name in known:
                good.append([name, arguments])
            else:
                error = f"error: unknown tool {name!r} (tools: {', '.join(sorted(known))})"
                episode["pending"].append(error)  # what the model reads back, and what the record keeps
                episode["calls"].append({"name": name, "arguments": arguments, "reply": error, "ok": False})
        if len(calls) > MAX_CALLS_PER_TURN:
            episode["pending"].append(f"error: at most {MAX_CALLS_PER_TURN} tool calls per turn; the rest were ignored")
        return good

    def _apply(self, traj: Trajectory, task, calls: list, ok: bool, out, version: int, tool_ids) -> bool:
        episode = traj.env
        if not ok:  # the environment raised, hung or returned garbage: this episode ends (`Failure.kind` says how)
            traj.finish_reason = "env_error"
            episode.pop("pending", None)
            kind = getattr(out, "kind", "start")
            error = f"{_hung_call(calls, episode)} {out}" if kind == "timeout" else str(out)
            # the turn's calls failed with it: counted in `agent/tool_error_frac`, the error as their reply
            episode["calls"] += [{"name": n, "arguments": a, "reply": error[:200], "ok": False} for n, a in calls]
            episode.update(done=True, error=error, error_kind=kind)
            return False
        episode["state"] = out["state"]
        for (name, arguments), reply in zip(calls, out["replies"]):
            episode["calls"].append({"name": name, "arguments": arguments, "reply": reply[:200], "ok": True})
        lines = [r if len(r) <= MAX_REPLY_CHARS else r[:MAX_REPLY_CHARS] + " ...(cut)" for r in out["replies"]]
        reply = "\n".join(episode.pop("pending", []) + lines)
        if out["done"]:
            traj.finish_reason = "env_done"
            episode["done"] = True
            return False
        ids = tool_ids(self.tokenizer, reply)
        room = self.max_model_len - len(traj.prompt_ids) - len(traj.response_ids) - len(ids)
        if episode["turns"] >= task.entry.get("max_turns", 4):
            traj.finish_reason = "max_turns"
        elif room < self.min_room or traj.model_tokens >= traj.max_tokens:
            traj.finish_reason = "length"
        else:
            traj.add_observation(ids, version)
            episode["done"] = False
            return True
        episode["done"] = True
        return False
