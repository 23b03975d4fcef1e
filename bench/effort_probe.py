"""Does a checkpoint follow the effort its prompt states? The first token of each reply.

For a finished run of the recipe (SFT, an experts stage, MOPD, eval), takes the held-out
prompts the eval scored in each domain, states each effort in turn (the system line the
experts, MOPD and eval use), and reads each checkpoint's next-token distribution at the
reply's first position: the probability that the reply opens a scratchpad (`Work:`,
`Short:`, or for code the comment `# ` that carries it) rather than the answer. A model
that follows the effort line gives different numbers per effort; one that ignores it
gives the same three. Checkpoints: SFT, each expert of the domain, the MOPD student.
Transformers in this process, no sampling (the probabilities themselves).

    .venv/bin/python bench/effort_probe.py RUN_DIR [--domain coding] [--prompts 40]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

EFFORTS = ("max", "high", "low")


def opening_tokens(tokenizer, code: bool) -> set[int]:
    """The first token of every scratchpad form's opening."""
    from posttrain.data.reasoning import CODE_COMMENT, SCRATCH_PREFIX

    return {tokenizer.encode((CODE_COMMENT if code else "") + prefix)[0] for prefix in SCRATCH_PREFIX.values()}


def scratchpad_probability(folder: Path, prompts: list, code: bool) -> dict[str, float]:
    """Per effort: the mean probability, over the prompts, that the reply opens a scratchpad."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from posttrain.data.chat import render_prompt, with_effort

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    opens = sorted(opening_tokens(tokenizer, code))
    out = {}
    for effort in EFFORTS:
        total = 0.0
        for messages in prompts:
            ids = render_prompt(tokenizer, with_effort(messages, effort))
            with torch.no_grad():
                probs = torch.softmax(model(torch.tensor([ids])).logits[0, -1].float(), -1)
            total += float(probs[opens].sum())
        out[effort] = total / len(prompts)
    return out


def main() -> None:
    from posttrain.types import Message

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--domain", default="coding")
    parser.add_argument("--prompts", type=int, default=40)
    parser.add_argument("--student", default="mopd", help="the MOPD stage's name")
    parser.add_argument("--experts", default="experts", help="the experts stage's name")
    parser.add_argument("--sft", default="sft", help="the SFT stage's name")
    args = parser.parse_args()
    run, checkpoints = args.run_dir, args.run_dir / "checkpoints"
    samples = run / "rollouts" / "eval" / args.student / f"{args.domain}-max.jsonl"
    if not samples.is_file():
        sys.exit(f"{samples}: no eval samples of the student in {args.domain} (run the recipe's eval stage first)")
    rows = [json.loads(line) for line in samples.read_text().splitlines()][: args.prompts]
    prompts = [tuple(Message(m["role"], m["content"]) for m in r["messages"]) for r in rows]
    code = rows[0]["verifier"] == "code"
    folders = [("SFT", checkpoints / args.sft / "final")]
    experts = checkpoints / args.experts
    folders += [(f"expert {args.domain}-{e}", experts / f"{args.domain}-{e}" / "final") for e in EFFORTS]
    folders += [("MOPD student", checkpoints / args.student / "final")]
    print(f"{run}: P(the reply opens a scratchpad), {args.domain}, {len(prompts)} held-out prompts, effort stated:")
    print(f"{'checkpoint':<22}" + "".join(f"{e:>8}" for e in EFFORTS))
    for label, folder in folders:
        if not (folder / "config.json").is_file():
            print(f"{label:<22}  (no checkpoint at {folder})")
            continue
        p = scratchpad_probability(folder, prompts, code)
        print(f"{label:<22}" + "".join(f"{p[e]:8.2f}" for e in EFFORTS), flush=True)


if __name__ == "__main__":
    main()
