"""`posttrain rewards try`: score one (task, response) pair with the GRM and show every
step of the procedure, or print it as one JSON object."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from posttrain.config import GRMConfig
from posttrain.rewards.debug import print_entry
from posttrain.rewards.grm_config import load_grm_config
from posttrain.types import Completion, Message, Sample, Task

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
    "code_runs",  # what the judge was shown of the answer's code (a task that states examples)
)


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
    responses: str | list[str],
    reward: str | None = None,
    as_json: bool = False,
    tokens: int | None = None,
    judge: str | None = None,
    bare: bool = False,
    method: str | None = None,
) -> dict:
    """Score one response (or several to the same task, in one batch: the pairwise method
    compares them). `judge`: a vLLM judge (model name or folder) in place of the config's;
    `bare`: no worked examples (`grm.examples: false`); `method`: `rubric` or `pairwise` in
    place of the config's. One response: its JSON object; several: `{"responses": [...]}`."""
    from posttrain.config.rewards import VLLMJudge
    from posttrain.rewards.grm import GRM

    responses = [responses] if isinstance(responses, str) else list(responses)
    config = load_grm_config(reward)
    if judge is not None:
        keep = config.judge.model_dump(exclude={"type", "model"}) if isinstance(config.judge, VLLMJudge) else {}
        config = config.model_copy(update={"judge": VLLMJudge(type="vllm", model=judge, **keep)})
    if bare:
        config = config.model_copy(update={"examples": False})
    if method is not None:
        config = config.model_copy(update={"method": method})
    grm = GRM(config)
    counted = [(tokens, "tokens (given)") if tokens is not None else count_tokens(grm, r) for r in responses]
    the_task = Task("try/0", "try", (Message("user", task),), verifier="grm")
    samples = [
        Sample(the_task, k, (0,), Completion((0,) * n, (0.0,) * n, response, "stop"))
        for k, (response, (n, _)) in enumerate(zip(responses, counted))
    ]
    try:
        results = asyncio.run(grm.score(samples))
    finally:
        grm.close()
    outs = []
    for result in results:
        out = {"score": result.score, **{k: result.details.get(k) for k in JSON_KEYS}}  # ok=False: unscored
        out["ok"] = result.ok
        if config.method == "pairwise":
            out["comparisons"] = result.details.get("comparisons")
        outs.append(out)
    combined = outs[0] if len(outs) == 1 else {"responses": outs}
    if as_json:
        print(json.dumps(combined))
        return combined
    for k, (response, result, (n, unit)) in enumerate(zip(responses, results, counted)):
        if len(responses) > 1:
            print(f"=== response {k + 1} of {len(responses)}")
        _show(task, response, result, n, unit, config)
    return combined


def _show(task: str, response: str, result, n: int, unit: str, config: GRMConfig) -> None:
    print(f"1. read    task: {task!r}\n          response: {n} {unit}, length cap {config.length_cap}")
    if result.details["status"] == "length_capped":
        print(f"          {result.reason}: no judge call\nscore -1.000")
        return
    tries = result.details.get("judge_tries", {})
    if config.method == "pairwise":
        print(
            f"2. compare against each other response to the task, both orders in one prompt "
            f"({tries.get('pairwise', 0)} judge calls); win = the mean of P(better) over the two orders"
        )
    else:
        print(f"2. rubric  {len(result.details.get('rubric') or [])} criteria ({tries.get('rubric', 0)} judge tries)")
        for raw in result.details.get("rubric_raw") or []:
            print(f"          judge reply: {raw[:300]}")
        print(
            f"3. score   one judge call per criterion ({tries.get('verdicts', 0)} tries); c_j = "
            f"{'P(yes) from the judge logprobs' if config.verdict == 'probability' else 'yes 1 / no 0'}"
        )
    print("4. record" if config.method != "pairwise" else "3. record")
    print_entry(result.details)
    print(f"score {result.score:.3f}" if result.ok else f"unscored: {result.reason}")
