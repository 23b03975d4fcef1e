"""Tools of your own environments in the model's chat template, and their calls read back.

Tools are JSON schemas (OpenAI's function format). A chat template that renders `tools`
(Hermes / Qwen style, calls as `<tool_call>{"name", "arguments"}</tool_call>`) gets them
through `apply_chat_template(..., tools=...)`; a template that ignores them (the tiny
model's ChatML) gets the `tools-v1` system message instead: each tool's signature and
description, and the same call syntax (posttrain/data/chat.py). Either way the model's
calls are parsed with that syntax; other call formats are refused with the reason.
"""

from __future__ import annotations

import json
from functools import lru_cache

from posttrain.data.chat import parse_calls, text_messages
from posttrain.types import Message

_PROBE = "posttrain_probe_tool"


def function_of(tool: dict) -> dict:
    """The function part of a tool schema (`{"type": "function", "function": {...}}` or bare)."""
    return tool.get("function", tool)


def tool_names(tools: list[dict]) -> list[str]:
    return [function_of(t)["name"] for t in tools]


def check_tools(tools) -> list[dict]:
    """Tool schemas as the environment gave them, checked: ValueError naming the problem."""
    if not isinstance(tools, list) or not tools:
        raise ValueError("`tools` must be a non-empty list of JSON schemas")
    for i, tool in enumerate(tools):
        fn = function_of(tool) if isinstance(tool, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise ValueError(f"tools[{i}] needs a `name` (OpenAI function format: {{type, function: {{name, ...}}}})")
        params = fn.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(params, dict) or not isinstance(params.get("properties", {}), dict):
            raise ValueError(f"tools[{i}] ({fn['name']}): `parameters` must be a JSON schema object")
    json.dumps(tools)  # plain JSON: tasks carry them
    return [t if "function" in t else {"type": "function", "function": t} for t in tools]


def signature(tool: dict) -> str:
    fn = function_of(tool)
    props = fn.get("parameters", {}).get("properties", {})
    line = f"{fn['name']}({', '.join(props)})"
    return f"{line}: {fn['description']}" if fn.get("description") else line


def tools_v1_text(tools: list[dict]) -> str:
    return (
        'You can use tools. Call one with <tool_call>{"name": NAME, "arguments": {...}}</tool_call> '
        "and wait for its result. Tools: "
        + "; ".join(signature(t) for t in tools)
        + ". When you are done, reply with the answer and no tool call."
    )


def with_tools_v1(messages: tuple[Message, ...], tools: list[dict]) -> tuple[Message, ...]:
    """The tools stated in the system message (first, before any system prompt of the task)."""
    text = tools_v1_text(tools)
    if messages and messages[0].role == "system":
        return (Message("system", f"{text}\n{messages[0].content}"),) + messages[1:]
    return (Message("system", text),) + messages


def _template_text(tokenizer) -> str:
    template = tokenizer.chat_template or ""
    return template if isinstance(template, str) else "\n".join(map(str, dict(template).values()))


@lru_cache(maxsize=8)
def _format_of(template: str, probe_rendered: bool) -> str:
    if not probe_rendered:
        return "tools-v1"
    if "<tool_call>" in template:
        return "hermes"
    raise ValueError(
        "the model's chat template renders tools, but not with <tool_call> JSON calls (Hermes / Qwen), the "
        "only native format posttrain parses; use a model whose template does, or one that ignores tools"
    )


def tool_format(tokenizer) -> str:
    """`tools-v1` (the template ignores tools) or `hermes` (it renders them, calls in <tool_call>)."""
    probe = {"type": "function", "function": {"name": _PROBE, "description": "d", "parameters": {"type": "object"}}}
    try:
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": "x"}], tools=[probe], tokenize=False, add_generation_prompt=True
        )
    except Exception:  # noqa: BLE001 - a template that cannot take tools ignores them: tools-v1
        text = ""
    return _format_of(_template_text(tokenizer), _PROBE in text)


def render_with_tools(tokenizer, messages: tuple[Message, ...] | list[Message], tools: list[dict]) -> list[int]:
    """Prompt token ids with the tools stated as the template states them (or tools-v1's way)."""
    if tool_format(tokenizer) == "tools-v1":
        messages, native = with_tools_v1(tuple(messages), tools), None
    else:
        native = tools
    text = tokenizer.apply_chat_template(
        text_messages(tokenizer, messages),
        tools=native,
        add_generation_prompt=True,
        tokenize=False,
    )
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def render_task(tokenizer, messages, tools: list[dict] | None) -> list[int]:
    """A task's prompt ids: with its environment's tools when it has some."""
    from posttrain.data.chat import render_prompt

    return render_with_tools(tokenizer, messages, tools) if tools else render_prompt(tokenizer, messages)


def read_calls(text: str) -> tuple[list[tuple[str, dict]], list[str]]:
    """(calls, errors for malformed ones) in a model turn; both formats write <tool_call> JSON."""
    return parse_calls(text)
