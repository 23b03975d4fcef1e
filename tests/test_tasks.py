"""Task sources as Hugging Face datasets, and the open-ended writing prompts."""

import datasets
import pytest

from posttrain.config import AgentTasks, CodingTasks, MixtureTasks, ReasoningGymTasks, RLStage, WritingTasks
from posttrain.data.tasks import load_tasks, task_dataset, tasks_from_dataset
from posttrain.rewards.base import score_sync
from posttrain.rewards.router import RewardRouter, reward_router
from posttrain.types import Completion, Sample

THREE_DOMAINS = MixtureTasks(
    type="mixture",
    seed=1,
    sources=[
        ReasoningGymTasks(families=[{"name": "basic_arithmetic"}, {"name": "simple_equations"}], size=6),
        CodingTasks(type="coding", size=4),
        AgentTasks(type="agent", size=5),
        WritingTasks(type="writing", size=3),
    ],
)


def test_every_source_is_a_dataset_that_round_trips(tmp_path):
    dataset = task_dataset(THREE_DOMAINS)
    assert isinstance(dataset, datasets.Dataset) and len(dataset) == 18
    assert set(dataset["verifier"]) == {"reasoning_gym", "code", "agent", "grm"}
    dataset.save_to_disk(str(tmp_path / "tasks"))
    again = tasks_from_dataset(datasets.load_from_disk(str(tmp_path / "tasks")))
    assert again == load_tasks(THREE_DOMAINS)
    assert [t.entry for t in again] == [t.entry for t in load_tasks(THREE_DOMAINS)]  # entries (not compared) too


def test_a_dataset_missing_columns_is_named():
    with pytest.raises(ValueError, match="lacks columns verifier"):
        tasks_from_dataset(task_dataset(THREE_DOMAINS).remove_columns(["verifier"]))


def test_writing_prompts_are_loaded_and_routed_to_the_grm_but_not_scored():
    tasks = load_tasks(WritingTasks(type="writing", size=50, seed=2))
    assert len({t.messages[-1].content for t in tasks}) > 30 and all(t.answer is None for t in tasks)
    stage = RLStage(name="r", type="rl", lr=1e-4, steps=1, tasks=THREE_DOMAINS)
    router = reward_router(stage)
    assert isinstance(router, RewardRouter) and "grm" not in router.sources
    samples = [Sample(t, 0, (1,), Completion((2,), (0.0,), "A poem.", "stop")) for t in tasks[:3]]
    results = score_sync(router, samples)
    assert all(not r.ok and "generative reward model" in r.reason for r in results)
