"""Chat rendering: messages -> prompt token ids with the model's chat template.

The same rendering feeds SFT, rollouts and the trainer, so the token ids a response is
trained on are exactly the ids the engine was given and produced.
"""

from __future__ import annotations

from posttrain.types import Message


def render_prompt(tokenizer, messages: tuple[Message, ...] | list[Message]) -> list[int]:
    """Token ids of the conversation so far, ending with the assistant header."""
    text = tokenizer.apply_chat_template(
        [{"role": m.role, "content": m.content} for m in messages],
        add_generation_prompt=True,
        tokenize=False,
    )
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def render_response(tokenizer, content: str) -> list[int]:
    """Token ids of an assistant reply, closed by the end-of-turn token the engine stops on."""
    return tokenizer(content, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]


_PLACEHOLDER = "\u2063posttrain-turn\u2063"


def tool_turn_ids(tokenizer, content: str, role: str = "tool") -> list[int]:
    """Token ids that follow an assistant turn's end-of-turn token: the tool (or user)
    message, then the next assistant header. Taken from the model's own chat template, so
    a multi-turn episode built turn by turn has the tokens the template gives it."""
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "x"}, {"role": "assistant", "content": _PLACEHOLDER},
         {"role": role, "content": content}], add_generation_prompt=True, tokenize=False)
    marker = _PLACEHOLDER + tokenizer.eos_token
    if marker not in text:
        raise ValueError("the chat template does not close an assistant turn with the eos token; "
                         "multi-turn tool use needs a template that does (e.g. ChatML)")
    return tokenizer(text.split(marker, 1)[1], add_special_tokens=False)["input_ids"]


def sft_example(tokenizer, messages: tuple[Message, ...] | list[Message],
                max_len: int) -> tuple[list[int], int, list[float]]:
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
        ids = render_response(tokenizer, m.content) if m.role == "assistant" else tool_turn_ids(tokenizer, m.content, m.role)
        response += ids
        mask += [1.0 if m.role == "assistant" else 0.0] * len(ids)
    prompt_len = min(len(prompt), max_len)
    ids = (prompt + response)[:max_len]
    return ids, prompt_len, mask[: len(ids) - prompt_len]
