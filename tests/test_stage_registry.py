"""A stage type registered here, in the test alone, goes through everything a shipped one
does: `posttrain validate` (its schema joins the `stages` union), `posttrain run --dry-run`
(its own lines), a run (the pipeline's stage loop runs it, records its checkpoint, the next
stage starts from it), a resume after a crash inside it (its state file finds its newest
checkpoint; the stage before it is restored, not rerun) and the held-out check (its task
sources count as training data). Nothing in posttrain/ names the type."""

import json
import shutil
from pathlib import Path
from typing import Any, ClassVar, Literal

import pytest
import yaml
from pydantic import Field

from posttrain.cli import main
from posttrain.config import PipelineConfig, StageBase, TaskSource
from posttrain.config.files import ConfigError, validate_pipeline
from posttrain.config.stage_union import STAGE_SCHEMAS
from posttrain.data.heldout import HeldOutError, check_held_out
from posttrain.stages import registry
from posttrain.stages.registry import StageRun, StageType, made_checkpoint, restore_checkpoint

TOY_STATE = "toy_state.json"


class ToyStage(StageBase):
    """Copies the checkpoint it starts from, one step at a time, into checkpoints/NAME/."""

    type: Literal["toy"]
    tasks: TaskSource = Field(description="What it would train on (counted by the held-out check).")
    crash_at: int | None = Field(None, description="Raise at this step once per run folder (a crash).")

    samples_policy: ClassVar[bool] = False

    def task_sources(self) -> dict[str, Any]:
        return {"tasks": self.tasks}


def run_toy(run: StageRun) -> Path:
    stage, run_dir = run.stage, run.infra.run_dir
    folder = run_dir / "checkpoints" / stage.name
    start = json.loads((run.resume_dir / TOY_STATE).read_text())["step"] if run.resume_dir else 0
    source = run.resume_dir or run.init_dir
    with (run_dir / "toy_calls.jsonl").open("a") as f:
        f.write(json.dumps({"stage": stage.name, "from": str(source), "step": start}) + "\n")
    for step in range(start + 1, stage.steps + 1):
        crashed = run_dir / f"crashed-{stage.name}"
        if step == stage.crash_at and not crashed.exists():
            crashed.touch()
            raise RuntimeError(f"toy crash at step {step}")
        target = folder / f"step_{step:06d}"
        shutil.copytree(source, target, ignore=shutil.ignore_patterns(TOY_STATE))
        (target / TOY_STATE).write_text(json.dumps({"step": step}))
        source = target
    final = folder / "final"
    shutil.copytree(source, final, ignore=shutil.ignore_patterns(TOY_STATE))
    return made_checkpoint(run, final)


def toy_lines(stage, view) -> list[str]:
    return [f"stage {stage.name} (toy): copies its init checkpoint on slot 0 of {view.slots}"]


@pytest.fixture
def toy():
    kind = registry.register(StageType(ToyStage, run_toy, restore_checkpoint, state_file=TOY_STATE, dry_run=toy_lines))
    yield kind
    registry.unregister("toy")
    assert "toy" not in STAGE_SCHEMAS


def arithmetic(seed: int, family: str = "basic_arithmetic") -> dict:
    params = {"max_terms": 2, "max_digits": 2} if family == "basic_arithmetic" else {}
    return {"type": "reasoning_gym", "seed": seed, "size": 40, "families": [{"name": family, "params": params}]}


def pipeline(model: str, *stages: dict) -> dict:
    return {
        "name": "toy",
        "model": {"name": model},
        "trainer": {"workers": 1, "zero_stage": 0},
        "wandb": {"enabled": False},
        "stages": list(stages),
    }


def toy_stage(name: str, **kw) -> dict:
    return {"name": name, "type": "toy", "lr": 1e-3, "steps": 3, "tasks": arithmetic(1), **kw}


def test_the_toy_type_is_unknown_until_registered_and_after(tmp_path):
    raw = pipeline("tiny", toy_stage("a"))
    with pytest.raises(ConfigError, match=r"stages\[0\]: unknown type 'toy'"):
        validate_pipeline(raw, "p.yaml")
    kind = registry.register(StageType(ToyStage, run_toy, restore_checkpoint, state_file=TOY_STATE))
    try:
        assert isinstance(validate_pipeline(raw, "p.yaml").stages[0], ToyStage)
        with pytest.raises(ValueError, match="already registered"):
            registry.register(kind)
    finally:
        registry.unregister("toy")
    with pytest.raises(ConfigError, match="unknown type 'toy'"):
        validate_pipeline(raw, "p.yaml")


def test_validate_and_dry_run_through_the_cli(toy, tiny_dir, tmp_path, capsys):
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(pipeline(str(tiny_dir), toy_stage("a"), toy_stage("b", init_from="a"))))
    assert main(["validate", str(path)]) == 0
    resolved = yaml.safe_load(capsys.readouterr().out)
    assert [s["type"] for s in resolved["stages"]] == ["toy", "toy"]
    assert resolved["stages"][1]["init_from"] == "a" and resolved["stages"][0]["crash_at"] is None

    assert main(["run", str(path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "stage a (toy): copies its init checkpoint on slot 0 of 1" in out
    assert "stage b (toy): copies its init checkpoint on slot 0 of 1" in out
    assert "engine" not in out.split("a slot = ")[1].splitlines()[0]  # it samples nothing: no engines

    bad = tmp_path / "bad.yaml"  # its key paths in errors, as a shipped type's
    bad.write_text(yaml.safe_dump(pipeline(str(tiny_dir), toy_stage("a", steps=0))))
    assert main(["validate", str(bad)]) == 2
    assert capsys.readouterr().err.strip() == f"{bad}: stages[0].steps: must be >= 1"
    later = tmp_path / "later.yaml"  # references are checked as for any stage that makes a checkpoint
    later.write_text(yaml.safe_dump(pipeline(str(tiny_dir), toy_stage("a", init_from="b"), toy_stage("b"))))
    assert main(["validate", str(later)]) == 2
    assert "stages[0] (a).init_from: 'b' names no earlier stage" in capsys.readouterr().err


def leaky(toy_family: str, model: str = "tiny") -> dict:
    experts = {
        "name": "experts",
        "type": "experts",
        "steps": 1,
        "lr": 1e-4,
        "max_tokens": 16,
        "domains": {"general": arithmetic(2, "chain_sum")},
        "efforts": {"max": {"tokens": 8}},
    }
    evaluate = {
        "name": "eval",
        "type": "eval",
        "checkpoints": ["t"],
        "tasks_per_cell": 40,
        "domains": {"general": arithmetic(7)},
    }
    return pipeline(model, toy_stage("t", tasks=arithmetic(7, toy_family)), experts, evaluate)


def test_the_held_out_check_counts_the_toy_stages_sources(toy, tiny_dir, tmp_path, capsys):
    config = PipelineConfig.model_validate(leaky("basic_arithmetic"))  # the eval's own tasks
    with pytest.raises(HeldOutError, match=r"general: 40 of 40 .*trained in t\)"):
        check_held_out(config.stages[2], config)
    other = PipelineConfig.model_validate(leaky("chain_sum"))
    assert len(check_held_out(other.stages[2], other)["general"]) == 40

    path = tmp_path / "leak.yaml"  # refused before anything starts
    path.write_text(yaml.safe_dump(leaky("basic_arithmetic", str(tiny_dir))))
    assert main(["validate", str(path)]) == 2
    assert "eval prompts occur in the run's training data" in capsys.readouterr().err


@pytest.mark.slow
def test_run_then_resume_after_a_crash_inside_the_toy_stage(toy, ray_session, tiny_dir, tmp_path):
    from posttrain.pipeline import run_pipeline

    config = PipelineConfig.model_validate(pipeline(str(tiny_dir), toy_stage("a"), toy_stage("b", crash_at=3)))
    run = tmp_path / "run"
    with pytest.raises(RuntimeError, match="toy crash at step 3"):
        run_pipeline(config, run)
    state = json.loads((run / "run_state.json").read_text())
    assert state["stages"]["a"]["status"] == "done" and state["stages"]["b"]["status"] == "running"
    assert state["stages"]["a"]["checkpoint"] == str(run / "checkpoints" / "a" / "final")
    assert state["stages"]["b"]["init_from"] == str(run / "checkpoints" / "a" / "final")

    model = str(Path(tiny_dir).resolve())  # as the run resolves it
    state = run_pipeline(config, run, resume=True)
    assert {s["status"] for s in state["stages"].values()} == {"done"}
    assert state["stages"]["b"]["resumed_from"] == [str(run / "checkpoints" / "b" / "step_000002")]
    calls = [json.loads(line) for line in (run / "toy_calls.jsonl").read_text().splitlines()]
    assert calls == [  # a ran once (restored on resume); b went on from its newest checkpoint
        {"stage": "a", "from": model, "step": 0},
        {"stage": "b", "from": str(run / "checkpoints" / "a" / "final"), "step": 0},
        {"stage": "b", "from": str(run / "checkpoints" / "b" / "step_000002"), "step": 2},
    ]
    final = run / "checkpoints" / "b" / "final"
    assert state["stages"]["b"]["checkpoint"] == str(final)
    assert sorted(p.name for p in final.iterdir()) == sorted(p.name for p in Path(tiny_dir).iterdir())
    assert (final / "model.safetensors").read_bytes() == (Path(tiny_dir) / "model.safetensors").read_bytes()
