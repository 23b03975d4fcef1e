"""Model folders: the tiny model is deterministic and loadable; SmolLM2 converts from its package."""

import json

import pytest
from safetensors.numpy import load_file

from posttrain.config import TinyModelConfig
from posttrain.models import build_tiny, convert_smollm2


def test_tiny_is_deterministic_for_a_seed(tmp_path):
    shape = TinyModelConfig()
    a = build_tiny(shape, seed=3, target=tmp_path / "a")
    b = build_tiny(shape, seed=3, target=tmp_path / "b")
    c = build_tiny(shape, seed=4, target=tmp_path / "c")
    wa, wb, wc = (load_file(p / "model.safetensors") for p in (a, b, c))
    assert all((wa[k] == wb[k]).all() for k in wa)
    assert any((wa[k] != wc[k]).any() for k in wa)
    assert (a / "tokenizer.json").read_text() == (b / "tokenizer.json").read_text()


def test_tiny_loads_in_transformers_with_chat_template(tiny_dir):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from posttrain.data.chat import render_prompt, render_response
    from posttrain.types import Message

    tok = AutoTokenizer.from_pretrained(tiny_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    ids = render_prompt(tok, [Message("user", "Calculate 17 + 25.")])
    text = tok.decode(ids)
    assert text.startswith("<|im_start|>user\nCalculate 17 + 25.<|im_end|>") and text.endswith(
        "<|im_start|>assistant\n"
    )
    assert (
        render_response(tok, "42")[-1]
        == tok.eos_token_id
        == json.loads((tiny_dir / "config.json").read_text())["eos_token_id"]
    )
    assert tok.tokenize("1234") == ["1", "2", "3", "4"]  # digits one by one
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits
    assert logits.shape == (1, len(ids), len(tok)) and torch.isfinite(logits).all()


@pytest.mark.slow
def test_smollm2_converts_from_its_package():
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = convert_smollm2()
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(folder)
    assert 134_000_000 < sum(p.numel() for p in model.parameters()) < 135_000_000
    ids = tok.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )["input_ids"]
    out = model.generate(ids, max_new_tokens=8, do_sample=False)
    assert "Paris" in tok.decode(out[0, ids.shape[1] :])
