"""A `verifiers` (v0.4) taskset defined for the tests (tests/test_verifiers.py): additions
with two weighted rewards, one of which raises or hangs on a given response."""

import time

import verifiers.v1 as vf


class SumData(vf.TaskData):
    answer: str


class SumTask(vf.Task[SumData, vf.State, vf.TaskConfig]):
    @vf.reward(weight=1.0)
    async def correct(self, task, trace) -> float:
        if trace.last_reply == "boom":
            raise RuntimeError("the rubric exploded")
        if trace.last_reply == "hang":
            time.sleep(600)
        return float(trace.last_reply == task.answer)

    @vf.reward(weight=0.5)
    async def brief(self, trace) -> float:
        return float(len(trace.last_reply) <= 3)


class SumConfig(vf.TasksetConfig):
    size: int = 10
    start: int = 0


class SumTaskset(vf.Taskset[SumTask, SumConfig]):
    def load(self):
        for i in range(self.config.start, self.config.start + self.config.size):
            data = SumData(id=f"sum-{i}", prompt=f"What is {i} + 1?", answer=str(i + 1), system_prompt="Be brief.")
            yield SumTask(data, self.config.task)


__all__ = ["SumTaskset"]
