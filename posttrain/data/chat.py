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


def sft_example(tokenizer, messages: tuple[Message, ...] | list[Message], max_len: int) -> tuple[list[int], int]:
    """(token ids, prompt length) for a conversation whose last message is the assistant's."""
    if not messages or messages[-1].role != "assistant":
        raise ValueError("an SFT conversation must end with an assistant message")
    prompt = render_prompt(tokenizer, messages[:-1])
    response = render_response(tokenizer, messages[-1].content)
    ids = (prompt + response)[:max_len]
    return ids, min(len(prompt), max_len)
