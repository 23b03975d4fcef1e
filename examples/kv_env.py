"""An example environment for `type: env` (README, Your own tool environments): a key-value
store with three tools. Train on it with `posttrain run examples/kv_env.yaml`.

Tasks: save a value under a key, read a key of a filled store, delete a key; each comes
with its gold calls (for SFT) and is scored by `reward` on the store or the final answer.
"""

from __future__ import annotations

import hashlib
import random

from posttrain.data.env import ToolEnv

KEYS = ["color", "size", "city", "code", "note", "owner", "level", "score"]
VALUES = ["red", "blue", "green", "amber", "violet", "white", "black", "silver"]


def _tool(name: str, description: str, **params: str) -> dict:
    properties = {p: {"type": "string", "description": d} for p, d in params.items()}
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": list(params)},
        },
    }


class KVStore(ToolEnv):
    tools = [
        _tool("kv_set", "Store a value under a key.", key="the key", value="the value"),
        _tool("kv_get", "Read the value stored under a key.", key="the key"),
        _tool("kv_delete", "Remove a key.", key="the key"),
    ]

    def __init__(self, kinds: tuple[str, ...] = ("store", "recall", "delete")):
        self.kinds = list(kinds)

    def tasks(self, seed: int, size: int, part: str) -> list[dict]:
        rng, out, seen = random.Random(seed), [], set()
        for _ in range(50 * size):  # the problem space is small: stop when it is used up
            if len(out) >= size:
                break
            task = self._task(rng, rng.choice(self.kinds))
            if task["prompt"] in seen:
                continue
            seen.add(task["prompt"])
            held_out = int(hashlib.sha256(task["prompt"].encode()).hexdigest()[:8], 16) % 5 == 0
            if part == "all" or held_out == (part == "eval"):
                out.append(task)
        return out

    def _task(self, rng: random.Random, kind: str) -> dict:
        key = rng.choice(KEYS) + str(rng.randint(1, 9))
        value = rng.choice(VALUES)
        store = {rng.choice(KEYS) + str(rng.randint(1, 9)): rng.choice(VALUES) for _ in range(3)}
        if kind == "store":
            return {
                "prompt": f"Save {value!r} under the key {key!r}. Reply done when finished.",
                "data": {"kind": kind, "store": {}, "key": key, "value": value},
                "gold": [{"name": "kv_set", "arguments": {"key": key, "value": value}}],
                "answer": "done",
            }
        store[key] = value
        if kind == "recall":
            return {
                "prompt": f"What value is stored under the key {key!r}? Reply with the value only.",
                "data": {"kind": kind, "store": store, "key": key, "value": value},
                "gold": [{"name": "kv_get", "arguments": {"key": key}}],
                "answer": value,
            }
        return {
            "prompt": f"Delete the key {key!r}. Reply done when finished.",
            "data": {"kind": kind, "store": store, "key": key, "value": value},
            "gold": [{"name": "kv_delete", "arguments": {"key": key}}],
            "answer": "done",
        }

    def reset(self, task: dict) -> dict:
        return {"store": dict(task["data"]["store"])}

    def step(self, state: dict, name: str, arguments: dict) -> str:
        key = str(arguments.get("key", ""))
        if not key:
            return "error: a key is needed"
        if name == "kv_set":
            state["store"][key] = str(arguments.get("value", ""))
            return "ok"
        if key not in state["store"]:
            return f"error: no key {key!r}"
        if name == "kv_get":
            return state["store"][key]
        del state["store"][key]
        return "ok"

    def reward(self, state: dict, task: dict, final: str | None) -> tuple[float, str]:
        data, store = task["data"], state["store"]
        if data["kind"] == "store":
            ok = store.get(data["key"]) == data["value"]
            return float(ok), f"store[{data['key']!r}] = {store.get(data['key'])!r}"
        if data["kind"] == "delete":
            others = {k: v for k, v in data["store"].items() if k != data["key"]}
            ok = data["key"] not in store and all(store.get(k) == v for k, v in others.items())
            return float(ok), "deleted" if ok else f"store is {store}"
        answer = (final or "").strip().strip(".'\"").lower()
        return float(answer == data["value"]), f"answered {final!r}, stored {data['value']!r}"
