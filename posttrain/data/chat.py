"""The serialization template of conversations with tool calls (TEMPLATE_VERSION), and
chat rendering: messages -> token ids with the model's chat template on top.

Template `tools-v1`:
- a conversation is a list of messages with roles system, user, assistant, tool;
- an assistant turn calls a tool by writing
  `<tool_call>{"name": NAME, "arguments": {...}}</tool_call>` (Hermes / Qwen) in its
  content; a turn without a call is a final answer;
- a tool result is a `tool` message whose content is the results of the previous turn's
  calls, one per line (`error: ...` for a call that failed);
- the model's chat template renders the messages; an assistant turn ends with the eos
  token (the engine stops on it), and what follows it up to the next assistant header
  is the tool (or user) message.

The same rendering feeds SFT (`sft_example`), rollouts (`render_prompt`, the agent loop's
`tool_turn_ids`) and the loss masks (1 on assistant tokens, 0 on the rest), so the token
ids a response is trained on are exactly the ids the engine was given and produced;
`parse_response` reads token ids and a mask back into messages (a lossless round trip,
tested), which is how synthesized trajectories become SFT data.
"""

from __future__ import annotations

import json
import re

from posttrain.types import Message

TEMPLATE_VERSION = "tools-v1"
TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


def format_call(name: str, arguments: dict) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def wants_tools(text: str) -> bool:
    return "<tool_call>" in text


def parse_calls(text: str) -> tuple[list[tuple[str, dict]], list[str]]:
    """(well-formed calls, error messages for the malformed ones) found in one turn."""
    calls, errors = [], []
    for body in TOOL_CALL.findall(text):
        try:
            call = json.loads(body)
        except json.JSONDecodeError as exc:
            errors.append(f"error: tool call is not valid JSON ({exc.msg} at character {exc.pos})")
            continue
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            errors.append('error: a tool call must be a JSON object with a "name" string and "arguments"')
            continue
        arguments = call.get("arguments", {})
        if isinstance(arguments, str):  # OpenAI style: arguments as a JSON string
            try:
                arguments = json.loads(arguments)
            except json.JSONDecodeError:
                arguments = None
        if not isinstance(arguments, dict):
            errors.append(f"error: the arguments of {call['name']} must be a JSON object")
            continue
        calls.append((call["name"], arguments))
    if text.count("<tool_call>") > text.count("</tool_call>"):
        errors.append("error: <tool_call> without a closing </tool_call>")
    return calls, errors


# Text is text: a message's content never tokenizes as a control token (an end of turn, a
# turn header, a tool call) of the template around it, whatever string it holds. Each
# control string in a content is broken by a word joiner after its first character: the
# text reads the same, and the tokenizer, which matches added tokens by their exact string,
# reads it as text. The assistant's own turns keep their non-special added tokens (its
# `<tool_call>` is a call); every other content, and every content a judge reads, keeps none.
JOINER = "\u2060"  # WORD JOINER: invisible, and in no tokenizer's control strings
# the chat markers of common templates, for a judge whose tokenizer is not known here (HTTP)
CHAT_MARKERS = (
    r"<\|[^|<>\s]{1,40}\|>|<\uff5c[^\uff5c<>\s]{1,40}\uff5c>|</?s>|\[/?INST\]|<(?:start|end)_of_turn>|"
    r"</?tool_call>|</?tool_response>|</?think>"
)


def control_strings(tokenizer, special_only: bool = False) -> tuple[str, ...]:
    """The strings `tokenizer` reads as one token whatever surrounds them: its special
    tokens and (unless `special_only`) its other added tokens, longest first."""
    added = getattr(tokenizer, "added_tokens_decoder", {}).values()
    found = {t.content for t in added if t.special or not special_only} | set(tokenizer.all_special_tokens)
    return tuple(sorted((s for s in found if len(s) > 1), key=len, reverse=True))


def as_text(text: str, pattern: str) -> str:
    """`text` with every match of `pattern` (control strings) broken by `JOINER` after its
    first character: the same visible text, and no control token."""
    if not pattern:
        return text
    return re.sub(pattern, lambda m: m.group(0)[0] + JOINER + m.group(0)[1:], text, flags=re.IGNORECASE)


def controls_pattern(tokenizer, special_only: bool = False) -> str:
    return "|".join(re.escape(s) for s in control_strings(tokenizer, special_only))


def text_messages(tokenizer, messages, judge: bool = False) -> list[dict]:
    """Chat messages (`Message` or role/content dicts) as the template's input, each content
    text (`as_text`): an assistant turn of the policy keeps its non-special added tokens,
    every other content (and, for a `judge`, every content) none."""
    every, special = controls_pattern(tokenizer), controls_pattern(tokenizer, special_only=True)
    out = []
    for m in messages:
        role, content = (m["role"], m["content"]) if isinstance(m, dict) else (m.role, m.content)
        own_turn = role == "assistant" and not judge
        out.append({"role": role, "content": as_text(content, special if own_turn else every)})
    return out


def render_prompt(tokenizer, messages: tuple[Message, ...] | list[Message]) -> list[int]:
    """Token ids of the conversation so far, ending with the assistant header."""
    text = tokenizer.apply_chat_template(text_messages(tokenizer, messages), add_generation_prompt=True, tokenize=False)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def render_judge_prompt(tokenizer, messages: list[dict]) -> list[int]:
    """Token ids of a judge's prompt: every content is text, none a control token of the
    judge's template (a judged response that writes `<|im_end|>` does not end its turn)."""
    text = tokenizer.apply_chat_template(
        text_messages(tokenizer, messages, judge=True), add_generation_prompt=True, tokenize=False
    )
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def render_response(tokenizer, content: str) -> list[int]:
    """Token ids of an assistant reply, closed by the end-of-turn token the engine stops on."""
    content = as_text(content, controls_pattern(tokenizer, special_only=True))
    return tokenizer(content, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]


_PLACEHOLDER = "\u2063posttrain-turn\u2063"


def tool_turn_ids(tokenizer, content: str, role: str = "tool") -> list[int]:
    """Token ids that follow an assistant turn's end-of-turn token: the tool (or user)
    message, then the next assistant header. Taken from the model's own chat template, so
    a multi-turn episode built turn by turn has the tokens the template gives it."""
    text = tokenizer.apply_chat_template(
        [
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": _PLACEHOLDER},
            {"role": role, "content": as_text(content, controls_pattern(tokenizer))},
        ],
        add_generation_prompt=True,
        tokenize=False,
    )
    marker = _PLACEHOLDER + tokenizer.eos_token
    if marker not in text:
        raise ValueError(
            "the chat template does not close an assistant turn with the eos token; "
            "multi-turn tool use needs a template that does (e.g. ChatML)"
        )
    return tokenizer(text.split(marker, 1)[1], add_special_tokens=False)["input_ids"]


def sft_example(
    tokenizer, messages: tuple[Message, ...] | list[Message], max_len: int
) -> tuple[list[int], int, list[float]]:
    """(token ids, prompt length, loss mask over the response) for a conversation that ends
    with the assistant. The prompt runs to the first assistant turn; after it, assistant
    turns are trained on (mask 1); tool results and user follow-ups are not (mask 0)."""
    if not messages or messages[-1].role != "assistant":
        raise ValueError("an SFT conversation must end with an assistant message")
    first = next(i for i, m in enumerate(messages) if m.role == "assistant")
    if any(m.role == "system" for m in messages[first:]):
        raise ValueError("a system message may only come before the first assistant message")
    prompt = render_prompt(tokenizer, messages[:first])
    response: list[int] = []
    mask: list[float] = []
    for m in messages[first:]:
        ids = (
            render_response(tokenizer, m.content)
            if m.role == "assistant"
            else tool_turn_ids(tokenizer, m.content, m.role)
        )
        response += ids
        mask += [1.0 if m.role == "assistant" else 0.0] * len(ids)
    prompt_len = min(len(prompt), max_len)
    ids = (prompt + response)[:max_len]
    return ids, prompt_len, mask[: len(ids) - prompt_len]


def _decode(tokenizer, ids) -> str:
    return tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)


def _between_turns(tokenizer, role: str) -> tuple[str, str]:
    """The text the template puts before and after a `role` message's content, between
    an assistant turn's eos and the next assistant header."""
    text = _decode(tokenizer, tool_turn_ids(tokenizer, _PLACEHOLDER, role))
    before, _, after = text.partition(_PLACEHOLDER)
    return before, after


class TemplateError(ValueError):
    """Token ids that the serialization template cannot read back into messages."""


def parse_response(tokenizer, response_ids, mask) -> tuple[Message, ...]:
    """The messages after the prompt, read back from token ids and their loss mask (what
    `sft_example` and the agent loop write): runs of mask 1 are assistant turns, each
    closed by the eos token; runs of mask 0 are tool (or user) messages with the next
    assistant header. Raises TemplateError for tokens the template cannot have made (an
    assistant turn left open, a message between turns in another shape)."""
    if len(response_ids) != len(mask):
        raise TemplateError(f"{len(response_ids)} tokens but {len(mask)} mask values")
    runs: list[tuple[int, list[int]]] = []
    for tok, m in zip(response_ids, mask):
        m = int(m > 0)
        if runs and runs[-1][0] == m:
            runs[-1][1].append(tok)
        else:
            runs.append((m, [tok]))
    out: list[Message] = []
    for i, (m, ids) in enumerate(runs):
        if m:
            if ids[-1] != tokenizer.eos_token_id:
                raise TemplateError(f"assistant turn {len(out)} is not closed by the end-of-turn token")
            out.append(Message("assistant", _decode(tokenizer, ids[:-1])))
            continue
        if i == 0:
            raise TemplateError("the response starts with a non-assistant message")
        text = _decode(tokenizer, ids)
        for role in ("tool", "user"):
            before, after = _between_turns(tokenizer, role)
            if text.startswith(before) and text.endswith(after) and len(text) >= len(before) + len(after):
                out.append(Message(role, text[len(before) : len(text) - len(after)]))
                break
        else:
            raise TemplateError(
                f"message {len(out)} between assistant turns does not match the template: {text[:80]!r}"
            )
    return tuple(out)


def with_effort(messages: tuple[Message, ...], effort: str | None) -> tuple[Message, ...]:
    """State the effort tier in the system prompt (docs/recipe.md: one student serves all three)."""
    if effort is None:
        return messages
    line = f"Reasoning effort: {effort}"
    if messages and messages[0].role == "system":
        return (Message("system", f"{messages[0].content}\n{line}"),) + messages[1:]
    return (Message("system", line),) + messages
