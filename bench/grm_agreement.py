"""Does the rubric procedure judge better than one prompt? Pairwise accuracy on pairs of
responses to the same task where one is clearly better (bench/data/grm_pairs.jsonl:
correct vs wrong, on- vs off-topic, keeps vs breaks a stated constraint, concise vs
padded), for the GRM's rubric procedure and for a single-prompt 1-10 judge, with the
same judge model and backend. A pair counts 1 when the better response scores higher,
0.5 on a tie (or when either side is unscored), 0 otherwise.

Each method is read two ways from the same judge calls: from the judge's picks (rubric:
yes/no verdicts; Likert: the integer it wrote) and from its probabilities (rubric: P(yes)
per criterion; Likert: the expected score over its top logprobs at the score token).

    .venv/bin/python bench/grm_agreement.py [--judge smollm2-135m-instruct | tiny | /path]
    .venv/bin/python bench/grm_agreement.py --http-url URL --http-model NAME [--api-key-env VAR]
    .venv/bin/python bench/grm_agreement.py --generated 300 [--judge runs/judge/checkpoints/judge/final --bare]
    .venv/bin/python bench/grm_agreement.py --generated 300 --handwritten --methods pairwise --bare --judge ...

`--generated N`: N pairs (a clean response against one with a known defect, ten defect kinds)
from the `heldout` part of the judge's training generator (`data/judgements.py`): no pair
shares its subject with any case a judge stage trains on. `--bare`: the GRM without its worked
examples (`grm.examples: false`), as a judge trained on the GRM's formats is asked. Each
response is scored on its own, so the two orders of a pair cannot disagree.
`--handwritten`: adds the pairs written by hand (`posttrain/data/judge_handwritten.jsonl`), a
source no generator of the project wrote and no training source reads. With the pairwise
method, every measure of `rewards/judge_metrics.py` is printed per source and kind: margins
summed, right in both orders, orders agreeing, Cohen's kappa, length bias, each ± its SE.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import time
from pathlib import Path

PAIRS = Path(__file__).parent / "data" / "grm_pairs.jsonl"


def likert_class(continuation: str) -> str | None:
    """The score a top alternative at the score token stands for. Digit-split tokenizers
    give "1" for both 1 and 10; it counts as 1 unless the token itself reads "10"."""
    head = continuation.lstrip(' "')
    digits = head[:2] if head[:2] == "10" else head[:1]
    return digits if digits.isdigit() and digits != "0" else None


def likert_scores(reply) -> tuple[float | None, float | None]:
    from posttrain.rewards.grm_parse import ParseError, extract_json, value_mass

    try:
        picked = float(extract_json(reply.text)["score"])
    except (ParseError, KeyError, TypeError, ValueError):
        found = re.search(r'score"?\s*[:=]\s*"?(10|[1-9])\b', reply.text or "")  # a reply cut short
        if not found:
            return None, None
        picked = float(found.group(1))
    mass = value_mass(reply.tokens, reply.top, "score", likert_class)
    total = sum(mass.values())
    expected = sum(int(k) * v for k, v in mass.items()) / total if total > 0 else picked
    return picked, expected


def samples_for(pairs: list[dict], count_tokens):
    from posttrain.types import Completion, Message, Sample, Task

    out = []
    for pair in pairs:
        task = Task(pair["id"], pair["kind"], (Message("user", pair["task"]),), verifier="grm")
        for side in ("better", "worse"):
            n = count_tokens(pair[side])
            out.append(Sample(task, 0, (0,), Completion((0,) * n, (0.0,) * n, pair[side], "stop")))
    return out


def rubric_scores(grm, samples) -> tuple[list, list, float]:
    """GRM scores (probability verdicts) and the same rubrics scored with binary verdicts."""
    from posttrain.rewards.grm import final_score
    from posttrain.rewards.grm_parse import Criterion

    started = time.perf_counter()
    results = asyncio.run(grm.score(samples))
    seconds = time.perf_counter() - started
    soft, hard = [], []
    for r in results:
        if not r.ok:
            soft.append(None)
            hard.append(None)
            continue
        criteria = [Criterion(**c) for c in r.details["rubric"]]
        soft.append(r.score)
        hard.append(final_score(criteria, [1.0 if v["verdict"] == "yes" else 0.0 for v in r.details["verdicts"]]))
    return soft, hard, seconds


def likert(backend, pairs: list[dict]) -> tuple[list, list, float]:
    from posttrain.data.judge_prompts import likert_messages, likert_schema
    from posttrain.rewards.grm_judge import JudgeCall
    from posttrain.rewards.judge_code import CodeTool

    started = time.perf_counter()
    tool = CodeTool()  # the answers' code on the task's examples, as the GRM runs it
    try:
        runs = [tool.runs(p["task"], [p["better"], p["worse"]]) for p in pairs]
    finally:
        tool.close()
    calls = [
        JudgeCall(likert_messages(p["task"], p[side], r[i]), likert_schema(), 64, 0.0, 10)
        for p, r in zip(pairs, runs)
        for i, side in enumerate(("better", "worse"))
    ]
    replies = asyncio.run(backend.complete(calls))
    seconds = time.perf_counter() - started
    picked, expected = zip(*(likert_scores(r) for r in replies))
    return list(picked), list(expected), seconds


def generated_pairs(count: int, seed: int) -> list[dict]:
    """Held-out pairs of the generator, each named by its author (`generated-first`, `-second`)."""
    from posttrain.data.judgements import AUTHOR, cases

    return [
        {"id": f"heldout/{seed}/{i}", "kind": c.kind, "task": c.task, "better": c.good, "worse": c.bad,
         "source": f"generated-{AUTHOR[c.kind]}"}
        for i, c in enumerate(cases(count, seed, "heldout"))
    ]  # fmt: skip


def handwritten() -> list[dict]:
    from dataclasses import asdict

    from posttrain.data.judge_handwritten import handwritten_pairs

    return [asdict(p) for p in handwritten_pairs()]


def print_measures(compared: dict, pairs: list[dict]) -> dict:
    """The judge measures (`rewards/judge_metrics.py`) of the pairwise calls, per source and
    kind; returns them for the JSON report."""
    from posttrain.rewards.judge_metrics import from_comparison, grouped

    verdicts = [
        from_comparison(compared.get(i, {}), p["kind"], p.get("source", "file"), len(p["worse"]) > len(p["better"]))
        for i, p in enumerate(pairs)
    ]
    print(
        "\n| source | kind | pairs | summed margins | right in both orders | orders agree | kappa | "
        "longer-and-worse wins | unread |"
    )
    print("|---" * 9 + "|")
    out = {}
    for (source, kind), m in sorted(
        grouped(verdicts).items(), key=lambda x: (x[0][0] == "all", x[0], x[0][1] == "all")
    ):
        bias = str(m.length_bias) if m.length_bias else "-"
        print(
            f"| {source} | {kind} | {m.pairs} | {m.summed} | {m.both_right} | {m.orders_agree} | {m.kappa} | "
            f"{bias} | {m.unread} |"
        )
        out[f"{source}/{kind}"] = {
            "pairs": m.pairs,
            "unread": m.unread,
            **{
                name: None if r is None else {"value": r.value, "se": r.se, "n": r.n}
                for name, r in (
                    ("summed", m.summed),
                    ("both_right", m.both_right),
                    ("orders_agree", m.orders_agree),
                    ("kappa", m.kappa),
                    ("length_bias", m.length_bias),
                )
            },
        }
    return out


def accuracy(scores: list, pairs: list[dict]) -> dict[str, tuple[float, float]]:
    """Per kind (and `all`): pairwise accuracy and its standard error."""
    by_kind: dict[str, list[float]] = {}
    for i, pair in enumerate(pairs):
        better, worse = scores[2 * i], scores[2 * i + 1]
        if better is None or worse is None or abs(better - worse) < 1e-9:
            point = 0.5
        else:
            point = float(better > worse)
        by_kind.setdefault(pair["kind"], []).append(point)
        by_kind.setdefault("all", []).append(point)
    out = {}
    for kind, points in by_kind.items():
        mean = sum(points) / len(points)
        var = sum((x - mean) ** 2 for x in points) / max(len(points) - 1, 1)
        out[kind] = (mean, (var / len(points)) ** 0.5)
    return out


def pairwise_scores(backend, config, pairs: list[dict]) -> tuple[list, dict, float]:
    """Each pair judged by the GRM's pairwise method (both orders, one group of two per pair):
    its scores, and per pair the comparison row (P(better wins) in each order, agreement)."""
    from posttrain.rewards.grm import GRM

    grm = GRM(config.model_copy(update={"method": "pairwise"}), backend=backend)
    samples = samples_for(pairs, lambda text: len(text.split()))
    started = time.perf_counter()
    results = asyncio.run(grm.score(samples))
    seconds = time.perf_counter() - started
    scores = [r.score if r.ok else None for r in results]
    rows = {i: (results[2 * i].details.get("comparisons") or [{}])[0] for i in range(len(pairs))}
    return scores, rows, seconds


def orders_agree_by_kind(rows: dict, pairs: list[dict]) -> dict[str, float]:
    """Per kind, the share of judged pairs whose two orders pick the same response."""
    by_kind: dict[str, list[bool]] = {}
    for i, pair in enumerate(pairs):
        agree = rows.get(i, {}).get("orders_agree")
        if agree is not None:
            by_kind.setdefault(pair["kind"], []).append(bool(agree))
    return {kind: sum(v) / len(v) for kind, v in by_kind.items()}


def one_order(rows: dict, field: str) -> list:
    """Scores as if the judge had been asked once, the better response shown first (`as_first`)
    or second (`as_second`): 1 - 0 for the better when it picks it, 0.5 - 0.5 on a tie."""
    out = []
    for i in range(len(rows)):
        p = rows[i].get(field)
        out += [None, None] if p is None else [p, 1.0 - p]
    return out


def run_methods(grm, pairs: list[dict], methods: set[str]) -> tuple[list, dict]:
    """The table's rows (name, scores, judge seconds) of each method asked, and the pairwise
    comparison rows (empty when pairwise is not asked)."""
    samples = samples_for(pairs, lambda text: len(text.split()))  # no length cap here: lengths unused
    rows, compared = [], {}
    if "rubric" in methods:
        soft, hard, rubric_s = rubric_scores(grm, samples)
        rows += [
            ("rubric procedure, P(yes) verdicts (as in training)", soft, rubric_s),
            ("rubric procedure, yes/no verdicts", hard, rubric_s),
        ]
    if "likert" in methods:
        picked, expected, likert_s = likert(grm.backend, pairs)
        rows += [
            ("single prompt 1-10, expected score", expected, likert_s),
            ("single prompt 1-10, the integer written", picked, likert_s),
        ]
    if "pairwise" in methods:
        both, compared, pairwise_s = pairwise_scores(grm.backend, grm.config, pairs)
        rows += [
            ("pairwise, both orders (the GRM's `method: pairwise`)", both, pairwise_s),
            ("pairwise, one call: the better shown first", one_order(compared, "as_first"), pairwise_s / 2),
            ("pairwise, one call: the better shown second", one_order(compared, "as_second"), pairwise_s / 2),
        ]
    return rows, compared


def judge_config(args) -> dict:
    if args.http_url:
        return {"type": "http", "base_url": args.http_url, "model": args.http_model, "api_key_env": args.api_key_env}
    return {"type": "vllm", "model": args.judge, "max_model_len": args.max_model_len}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--judge", default="smollm2-135m-instruct", help="vLLM judge: model name or local folder")
    parser.add_argument("--http-url", help="OpenAI-compatible endpoint instead of a local vLLM judge")
    parser.add_argument("--http-model", help="model name at the endpoint")
    parser.add_argument("--api-key-env", default=None, help="environment variable with the endpoint's API key")
    parser.add_argument("--max-model-len", type=int, default=2048)
    parser.add_argument("--max-criteria", type=int, default=10)
    parser.add_argument("--pairs", default=str(PAIRS))
    parser.add_argument("--limit", type=int, help="first N pairs only")
    parser.add_argument("--generated", type=int, help="N held-out pairs from the judge-training generator instead")
    parser.add_argument("--seed", type=int, default=100, help="seed of the generated pairs")
    parser.add_argument(
        "--handwritten", action="store_true", help="add the hand-written held-out pairs (data/judge_handwritten.jsonl)"
    )
    parser.add_argument("--bare", action="store_true", help="the GRM without worked examples (a trained judge)")
    parser.add_argument(
        "--methods", default="rubric,likert,pairwise", help="which of rubric, likert, pairwise to run (comma list)"
    )
    parser.add_argument("--out", help="also write every method's accuracy per kind (and its SE) to this JSON file")
    args = parser.parse_args()
    methods = set(args.methods.split(","))
    if not methods or methods - {"rubric", "likert", "pairwise"}:
        parser.error(f"--methods: a comma list of rubric, likert, pairwise (got {args.methods!r})")

    from posttrain.config import GRMConfig
    from posttrain.rewards.grm import GRM

    if args.generated:
        pairs = generated_pairs(args.generated, args.seed)
    elif args.handwritten:
        pairs = []
    else:
        pairs = [json.loads(line) for line in Path(args.pairs).read_text().splitlines() if line.strip()][: args.limit]
    pairs += handwritten() if args.handwritten else []
    grm = GRM(
        GRMConfig(judge=judge_config(args), length_cap=100_000, max_criteria=args.max_criteria, examples=not args.bare)
    )
    grm.start()
    try:
        rows, compared = run_methods(grm, pairs, methods)
    finally:
        grm.close()
    kinds = sorted({p["kind"] for p in pairs})
    bare = ", no worked examples" if args.bare else ""
    judged = [r for r in compared.values() if r.get("orders_agree") is not None]
    agree = sum(r["orders_agree"] for r in judged) / max(len(judged), 1)
    print(f"judge {grm.backend.model_id}{bare}, {len(pairs)} pairs; ties and unscored count 0.5; all: ± SE")
    print(
        "rubric and 1-10: each response is scored alone, so a pair's two orders agree by construction; "
        f"pairwise: the judge picks the same response in both orders in {agree:.2f} of {len(judged)} pairs\n"
    )
    print("| method | " + " | ".join(kinds) + " | all | unscored | judge s |")
    print("|---" * (len(kinds) + 4) + "|")
    report = {
        "judge": grm.backend.model_id,
        "bare": args.bare,
        "pairs": len(pairs),
        "pairwise_order_agreement": agree,
        "methods": {},
    }
    for name, scores, seconds in rows:
        acc = accuracy(scores, pairs)
        print(
            f"| {name} | "
            + " | ".join(f"{acc[k][0]:.2f}" for k in kinds)
            + f" | **{acc['all'][0]:.2f}** ± {acc['all'][1]:.2f} | {scores.count(None)} | {seconds:.0f} |"
        )
        report["methods"][name] = {"accuracy": acc, "unscored": scores.count(None), "judge_s": seconds}
    if judged:
        agreement = orders_agree_by_kind(compared, pairs)
        report["pairwise_order_agreement_by_kind"] = agreement
        print(
            "| pairwise: both orders pick the same response | "
            + " | ".join(f"{agreement[k]:.2f}" if k in agreement else "-" for k in kinds)
            + f" | **{agree:.2f}** | {len(pairs) - len(judged)} | |"
        )
        report["pairwise_measures"] = print_measures(compared, pairs)
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
