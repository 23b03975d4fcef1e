"""`posttrain rewards try`: score one (task, response) pair with the GRM and show every
step of the procedure, or print it as one JSON object."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from pydantic import ValidationError

from posttrain.config import GRMConfig, RewardConfig, RLStage
from posttrain.config.files import ConfigError, format_validation_error, read_yaml, validate_pipeline
from posttrain.rewards.debug import print_entry
from posttrain.types import Completion, Message, Sample, Task

DEFAULT_JUDGE = {"type": "vllm", "model": "smollm2-135m-instruct"}
JSON_KEYS = (
    "ok",
    "status",
    "reason",
    "rubric",
    "verdicts",
    "judge_model",
    "procedure_version",
    "latency_s",
    "response_tokens",
    "length_cap",
    "rubric_raw",
)


def load_grm_config(path: str | None) -> GRMConfig:
    """A GRM config from a YAML file holding a `grm` mapping, a whole `reward:` mapping
    (`{grm: ...}`), or a pipeline (its first RL stage with a GRM); none: the default judge."""
    if path is None:
        return GRMConfig(judge=DEFAULT_JUDGE)
    raw = read_yaml(path)
    if "stages" in raw:
        config = validate_pipeline(raw, str(path))
        found = [s.reward.grm for s in config.stages if isinstance(s, RLStage) and s.reward.grm is not None]
        if not found:
            raise ConfigError(f"{path}: no RL stage has reward.grm")
        return found[0]
    try:
        grm = RewardConfig.model_validate(raw).grm if "grm" in raw else GRMConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(str(path), exc)) from None
    if grm is None:
        raise ConfigError(f"{path}: grm is empty")
    return grm


def count_tokens(grm, response: str) -> tuple[int, str]:
    """Response length for the length cap, with what counted it."""
    model_dir = getattr(grm.backend, "model_dir", None)
    if model_dir is None:
        return len(response.split()), "words (no local tokenizer for an HTTP judge; give --tokens)"
    from transformers import AutoTokenizer

    return len(
        AutoTokenizer.from_pretrained(model_dir)(response, add_special_tokens=False)["input_ids"]
    ), f"tokens of {Path(model_dir).name}"


def try_pair(
    task: str,
    response: str,
    reward: str | None = None,
    as_json: bool = False,
    tokens: int | None = None,
    judge: str | None = None,
    bare: bool = False,
) -> dict:
    """`judge`: a vLLM judge (model name or folder) in place of the config's; `bare`: no
    worked examples (`grm.examples: false`)."""
    from posttrain.config.rewards import VLLMJudge
    from posttrain.rewards.grm import GRM

    config = load_grm_config(reward)
    if judge is not None:
        keep = config.judge.model_dump(exclude={"type", "model"}) if isinstance(config.judge, VLLMJudge) else {}
        config = config.model_copy(update={"judge": VLLMJudge(type="vllm", model=judge, **keep)})
    if bare:
        config = config.model_copy(update={"examples": False})
    grm = GRM(config)
    counted = (tokens, "tokens (given)") if tokens is not None else count_tokens(grm, response)
    n = counted[0]
    sample = Sample(
        Task("try/0", "try", (Message("user", task),), verifier="grm"),
        0,
        (0,),
        Completion((0,) * n, (0.0,) * n, response, "stop"),
    )
    try:
        result = asyncio.run(grm.score([sample]))[0]
    finally:
        grm.close()
    out = {"score": result.score, **{k: result.details.get(k) for k in JSON_KEYS}}  # ok=False: unscored
    out["ok"] = result.ok
    if as_json:
        print(json.dumps(out))
        return out
    print(f"1. read    task: {task!r}\n          response: {n} {counted[1]}, length cap {config.length_cap}")
    if result.details["status"] == "length_capped":
        print(f"          {result.reason}: no judge call\nscore -1.000")
        return out
    tries = result.details.get("judge_tries", {})
    print(f"2. rubric  {len(out['rubric'] or [])} criteria ({tries.get('rubric', 0)} judge tries)")
    for raw in out["rubric_raw"] or []:
        print(f"          judge reply: {raw[:300]}")
    print(
        f"3. score   one judge call per criterion ({tries.get('verdicts', 0)} tries); c_j = "
        f"{'P(yes) from the judge logprobs' if config.verdict == 'probability' else 'yes 1 / no 0'}"
    )
    print("4. record")
    print_entry(result.details)
    print(f"score {result.score:.3f}" if result.ok else f"unscored: {result.reason}")
    return out
