"""Environments defined for the tests of `type: env` (tests/test_env.py): one whose tools
misbehave on purpose (raise, hang, return garbage), beside a well-behaved echo tool."""

from __future__ import annotations

import time

from posttrain.data.env import ToolEnv


def tool(name: str, *params: str) -> dict:
    properties = {p: {"type": "string"} for p in params}
    return {"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": properties}}}


class Faulty(ToolEnv):
    """`echo` works; `boom` raises; `sleep` hangs; `junk` returns a number, not a reply."""

    tools = [tool("echo", "text"), tool("boom"), tool("sleep"), tool("junk"), tool("finish")]

    def __init__(self, hang_s: float = 3600.0):
        self.hang_s = hang_s

    def tasks(self, seed: int, size: int, part: str) -> list[dict]:
        return [
            {"prompt": f"Echo the word w{seed}-{i}.", "answer": f"w{seed}-{i}", "data": {"i": i}} for i in range(size)
        ]

    def reset(self, task: dict) -> dict:
        return {"echoed": [], "i": task["data"]["i"]}

    def step(self, state: dict, name: str, arguments: dict):
        if name == "boom":
            raise RuntimeError("the tool exploded")
        if name == "sleep":
            time.sleep(self.hang_s)
        if name == "junk":
            return 42
        if name == "finish":
            return "finished", True
        state["echoed"].append(arguments.get("text", ""))
        return arguments.get("text", "")

    def reward(self, state: dict, task: dict, final: str | None):
        if final == "hang":
            time.sleep(self.hang_s)
        if final == "nan":
            return float("nan")
        return {"score": float(task["answer"] in state["echoed"]), "reason": f"echoed {state['echoed']}"}
