"""Tasks whose scratchpads are exact, the train/eval split of their problem spaces, the
SFT answer forms, and the eval stage's refusal of prompts the run trained on."""

import random
import subprocess
import sys

import pytest
import yaml

from posttrain.config import AgentTasks, ArithmeticTasks, CodingTasks, PipelineConfig, SFTStage
from posttrain.data.heldout import HeldOutError, check_held_out, normalize_prompt
from posttrain.data.reasoning import chain_work, offset_work
from posttrain.data.tasks import load_tasks
from posttrain.types import Message


def test_chain_scratchpads_are_the_running_sums():
    # 3 + 5 + 7 + 2: 3+5=8, 8+7=15, 15+2=17
    assert chain_work([3, 5, 7, 2]) == ("3+5=8 8+7=15 15+2=17", "3+5=8 +7=15 +2=17", 17)
    rng = random.Random(3)
    for _ in range(2000):
        terms = [rng.randint(1, 9) for _ in range(rng.randint(2, 8))]
        full, short, total = chain_work(terms)
        assert total == sum(terms) and short.split()[-1].split("=")[1] == str(total)
        assert [int(step.split("+")[-1].split("=")[0]) for step in short.split()] == terms[1:]
        assert [int(step.split("+")[1].split("=")[0]) for step in full.split()] == terms[1:]


def test_offset_scratchpad_finds_k_from_the_example():
    full, short = offset_work([3, 5, 2], 4)  # solve([3, 5, 2]) == 14
    assert full == "3+5=8 8+2=10 14-10=4" and short == "3+5=8 +2=10 14-10=4"


@pytest.mark.parametrize(
    "make",
    [
        lambda part: ArithmeticTasks(type="arithmetic", size=400, seed=1, part=part),
        lambda part: CodingTasks(type="coding", split="offset", size=300, seed=1, part=part),
        lambda part: CodingTasks(type="coding", split="constant", size=300, seed=1, part=part),
        lambda part: CodingTasks(type="coding", size=300, seed=1, part=part),
        lambda part: AgentTasks(type="agent", size=300, seed=1, part=part),
    ],
)
def test_train_and_eval_parts_share_no_prompt(make):
    train = {normalize_prompt(t.messages) for t in load_tasks(make("train"))}
    held = {normalize_prompt(t.messages) for t in load_tasks(make("eval").model_copy(update={"seed": 99}))}
    assert train and held and not train & held


def test_offset_code_eval_uses_templates_never_trained_on():
    def shapes(part):
        return {
            "".join(c for c in t.messages[-1].content if not (c.isdigit() or c in "[], "))
            for t in load_tasks(CodingTasks(type="coding", split="offset", size=200, seed=1, part=part))
        }

    assert not shapes("train") & shapes("eval")


def test_constant_code_needs_the_chain_sum_and_holds_out_chains():
    from posttrain.data.reasoning import chain_problems, chain_work, in_eval_part

    tasks = load_tasks(CodingTasks(type="coding", split="constant", size=200, seed=4))
    for t in tasks:
        chain = t.messages[-1].content.split("k = ")[-1].split("(")[-1].rstrip(".)")
        terms = [int(x) for x in chain.split(" + ")]
        assert 4 <= len(terms) <= 6 and not in_eval_part("+".join(map(str, terms)))  # a training chain
        assert t.answer == f"def solve(xs): return sum(xs) + {sum(terms)}"
        assert t.entry["scratchpads"]["full"] == chain_work(terms)[0]
        assert f"assert solve([7]) == {7 + sum(terms)}" in t.entry["tests"]
    held = chain_problems(50, 4, "eval", 4, 6)
    assert all(in_eval_part("+".join(map(str, c))) for c in held)


def test_sft_forms_do_not_depend_on_the_stated_effort():
    stage = SFTStage(
        name="s",
        type="sft",
        lr=1e-3,
        steps=1,
        effort_lines=True,
        think={"forms": {"full": 1, "short": 1, "none": 1, "tool": 1}},
        data={
            "type": "mixture",
            "sources": [
                {"type": "arithmetic", "size": 600},
                {"type": "agent", "families": ["arithmetic"], "size": 600},
            ],
        },
    )
    from posttrain.stages.sft import sft_conversations

    by_effort: dict[str, dict[str, int]] = {}
    for conv in sft_conversations(stage):
        effort = conv[0].content.rsplit(": ", 1)[1]
        answer = next(m.content for m in conv if m.role == "assistant")
        form = "tool" if "<tool_call>" in answer else answer.split(":")[0] if ":" in answer else "none"
        counts = by_effort.setdefault(effort, {})
        counts[form] = counts.get(form, 0) + 1
    assert set(by_effort) == {"low", "high", "max"}
    for form in ("Work", "Short", "none", "tool"):  # every form at every effort, in similar shares
        shares = [counts.get(form, 0) / sum(counts.values()) for counts in by_effort.values()]
        assert min(shares) > 0.6 * max(shares), (form, by_effort)


def test_agent_answer_is_read_from_the_last_line_of_the_final_turn():
    from posttrain.data.builtin_env import EnvState, check_episode

    state = EnvState(final="Work: 3+5=8 8+7=15 15+2=17\n17")
    assert check_episode({"answer": "17"}, state)[0] == 1.0
    assert check_episode({"answer": "15"}, state)[0] == 0.0


LEAKY = {
    "name": "leak",
    "model": {"name": "tiny"},
    "stages": [
        {
            "name": "sft",
            "type": "sft",
            "steps": 1,
            "lr": 1e-3,
            "data": {"type": "reasoning_gym", "families": [{"name": "basic_arithmetic"}], "size": 60},
        },
        {
            "name": "experts",
            "type": "experts",
            "steps": 1,
            "lr": 1e-4,
            "max_tokens": 16,
            "domains": {
                "general": {
                    "type": "reasoning_gym",
                    "seed": 2,
                    "size": 60,
                    "families": [{"name": "basic_arithmetic", "params": {"max_terms": 2, "max_digits": 2}}],
                }
            },
            "efforts": {"max": {"tokens": 8}},
        },
        {  # its own tasks, from the part the experts train on: they leak
            "name": "eval",
            "type": "eval",
            "checkpoints": ["sft"],
            "tasks_per_cell": 40,
            "domains": {
                "general": {
                    "type": "reasoning_gym",
                    "seed": 7,
                    "size": 300,
                    "families": [{"name": "basic_arithmetic", "params": {"max_terms": 2, "max_digits": 2}}],
                }
            },
        },
    ],
}


def test_eval_refuses_prompts_the_run_trained_on():
    config = PipelineConfig.model_validate(LEAKY)
    with pytest.raises(HeldOutError, match=r"general: \d+ of 40"):
        check_held_out(config.stages[2], config)
    dropped = config.model_copy(
        update={"stages": [*config.stages[:2], config.stages[2].model_copy(update={"on_overlap": "drop"})]}
    )
    kept = check_held_out(dropped.stages[2], dropped)["general"]
    trained = {normalize_prompt(t.messages) for t in load_tasks(config.stages[1].domains["general"])}
    assert 0 < len(kept) < 40 and not {normalize_prompt(t.messages) for t in kept} & trained


def test_a_pipeline_built_to_leak_is_refused_before_it_starts(tmp_path):
    path = tmp_path / "leak.yaml"
    path.write_text(yaml.safe_dump(LEAKY))
    proc = subprocess.run(
        [sys.executable, "-m", "posttrain.cli", "run", str(path), "--run-dir", str(tmp_path / "run")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "eval prompts occur in the run's training data" in lines[0], proc.stderr
    assert not (tmp_path / "run").exists()


def test_normalized_prompts_ignore_system_lines_case_and_spacing():
    a = (Message("system", "Reasoning effort: low"), Message("user", "Compute  12 + 3"))
    b = (Message("system", "Tools: calculator(expression)."), Message("user", "compute 12 +\n3"))
    assert normalize_prompt(a) == normalize_prompt(b)


def test_generated_sources_prompt_fingerprints_are_cached_by_config(tmp_path):
    """The held-out check lists a generated source's prompts once per config: a second
    listing reads the cache, another config (or a torn cache file) generates again, and the
    cached fingerprints are the generated ones."""
    from posttrain.data.heldout import _source_digests, prompt_digest
    from posttrain.data.tasks import generate_tasks

    calls = []

    def counting(source):
        calls.append(source.size)
        return generate_tasks(source)

    source = ArithmeticTasks(type="arithmetic", size=30, seed=4)
    first = _source_digests(source, counting, tmp_path)
    assert first == [prompt_digest(normalize_prompt(t.messages)) for t in generate_tasks(source)]
    assert _source_digests(source, counting, tmp_path) == first and calls == [30]  # read back, not generated
    assert len(_source_digests(ArithmeticTasks(type="arithmetic", size=31, seed=4), counting, tmp_path)) == 31
    assert calls == [30, 31]
    (cached,) = [p for p in (tmp_path / "prompts").iterdir() if p.stat().st_size == 30 * 16]
    cached.write_bytes(cached.read_bytes()[:-3])  # torn
    assert _source_digests(source, counting, tmp_path) == first and calls == [30, 31, 30]
