"""Tasks whose scratchpads are exact, the train/eval split of their problem spaces, the
SFT answer forms, and the eval stage's refusal of prompts the run trained on."""

import random
import subprocess
import sys

import pytest
import yaml

from posttrain.config import AgentTasks, ArithmeticTasks, CodingTasks, PipelineConfig, SFTStage
from posttrain.data.heldout import HeldOutError, check_held_out, normalize_prompt
from posttrain.data.reasoning import arithmetic_problem, column_work, linear_work
from posttrain.data.tasks import load_tasks
from posttrain.types import Message


def _reassemble(full: str, op: str) -> int:
    """The answer written from the full scratchpad's columns, as a reader would."""
    columns = [int(step.split("=")[1]) for step in full.split()]
    if op == "+":
        return int(str(columns[-1]) + "".join(str(c % 10) for c in reversed(columns[:-1])))
    return int("".join(str(c) for c in reversed(columns)))


def test_column_work_is_exact_and_its_carries_are_those_of_the_columns():
    # 4721 + 385: 1+5=6, 2+8=10 (carry), 7+3+1=11 (carry), 4+0+1=5 -> 5106; carries into columns 0 0 1 1
    assert column_work(4721, 385, "+") == ("1+5=6 2+8=10 7+3+1=11 4+0+1=5", "0 0 1 1", 5106)
    # 4721 - 385: 11-0-5=6 (borrow), 12-1-8=3 (borrow), 7-1-3=3, 4-0-0=4 -> 4336
    assert column_work(4721, 385, "-") == ("11-0-5=6 12-1-8=3 7-1-3=3 4-0-0=4", "0 1 1 0", 4336)
    rng = random.Random(3)
    for _ in range(3000):
        a, op, b = arithmetic_problem(rng, 3, 5, ["+", "-"])
        full, short, result = column_work(a, b, op)
        assert result == (a + b if op == "+" else a - b) >= 0
        assert _reassemble(full, op) == result
        assert len(short.split()) == len(full.split())


def test_linear_scratchpad_derives_slope_and_intercept():
    full, short = linear_work(3, 2, 1, 4)  # values 5 and 14
    assert full == "14-5=9 4-1=3 9/3=3 3*1=3 5-3=2" and short == "9/3=3 5-3=2"


@pytest.mark.parametrize(
    "make",
    [
        lambda part: ArithmeticTasks(type="arithmetic", size=400, seed=1, part=part),
        lambda part: CodingTasks(type="coding", split="linear", size=300, seed=1, part=part),
        lambda part: CodingTasks(type="coding", size=300, seed=1, part=part),
        lambda part: AgentTasks(type="agent", size=300, seed=1, part=part),
    ],
)
def test_train_and_eval_parts_share_no_prompt(make):
    train = {normalize_prompt(t.messages) for t in load_tasks(make("train"))}
    held = {normalize_prompt(t.messages) for t in load_tasks(make("eval").model_copy(update={"seed": 99}))}
    assert train and held and not train & held


def test_linear_eval_uses_templates_never_trained_on():
    def shapes(part):
        return {
            "".join(c if not c.isdigit() else "#" for c in t.messages[-1].content)
            for t in load_tasks(CodingTasks(type="coding", split="linear", size=200, seed=1, part=part))
        }

    assert not shapes("train") & shapes("eval")


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
    from posttrain.data.agent import EnvState, check_episode

    state = EnvState(final="Work: 1+5=6 2+8=10 7+3+1=11 4+0+1=5\n5106")
    assert check_episode({"answer": "5106"}, state)[0] == 1.0
    assert check_episode({"answer": "5107"}, state)[0] == 0.0


LEAKY = {
    "name": "leak",
    "model": {"name": "tiny"},
    "stages": [
        {
            "name": "sft",
            "type": "sft",
            "steps": 1,
            "lr": 1e-3,
            "data": {"type": "reasoning_gym", "families": [{"name": "basic_arithmetic"}], "size": 300},
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
                    "size": 300,
                    "families": [{"name": "basic_arithmetic", "params": {"max_terms": 2, "max_digits": 1}}],
                }
            },
            "efforts": {"max": {"tokens": 8}},
        },
        {"name": "eval", "type": "eval", "checkpoints": ["sft"], "tasks_per_cell": 40},
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
