"""The synthesis stage: a teacher model on vLLM engine actors of its own writes K candidate
trajectories per task (multi-turn tool use for agent tasks, through the same agent loop
as RL rollouts), the task's verifier (or the GRM) scores them, and the verification
stages decide what is kept (posttrain/synthesis/verify.py).

Tasks go in chunks: generate every candidate of the chunk's tasks, score, verify, then
append the chunk's rows to candidates.jsonl in one write (store.py). A killed run resumes
by skipping the tasks whose rows are all there. One metrics row per chunk (cumulative
counts) goes to metrics.jsonl under the stage's name.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from posttrain.config import ModelConfig, RolloutConfig, SynthesisStage
from posttrain.config.verifiers import verifier_facts
from posttrain.data.chat import TEMPLATE_VERSION
from posttrain.data.tools import render_task
from posttrain.records.metrics import Progress
from posttrain.rewards.base import score_safely
from posttrain.runtime.infra import Infra
from posttrain.synthesis.store import SynthesisStore, from_messages
from posttrain.synthesis.verify import Verifier, assistant_tokens, check_format
from posttrain.types import Completion, RewardResult, Sample, SamplingSettings


class ReviewPending(RuntimeError):
    """The stage's review queue is not empty and the config says to wait for it."""


def teacher_engines(stage: SynthesisStage, teacher_dir: Path):
    from posttrain.rollout.engine import RolloutEngine
    from posttrain.rollout.pool import EnginePool

    t = stage.teacher
    rollout = RolloutConfig(
        engines=t.engines,
        max_model_len=t.max_model_len,
        kv_cache_gib=t.kv_cache_gib,
        num_cpus=t.num_cpus,
        num_gpus=t.num_gpus,
        seed=t.seed,
    )

    def start(i: int):
        return RolloutEngine.remote_actor(str(teacher_dir), rollout, t.dtype, t.seed + i)

    return EnginePool([start(i) for i in range(t.engines)], start, rollout.start_timeout_s)


def teacher_dir_of(stage: SynthesisStage, infra: Infra) -> Path:
    from posttrain.models import resolve_model

    model = infra.config.model
    return resolve_model(model if stage.teacher.model == model.name else ModelConfig(name=stage.teacher.model))


class Synthesizer:
    def __init__(
        self, stage: SynthesisStage, infra: Infra, teacher_tokenizer, pool, router, verifier: Verifier, teacher_id: str
    ):
        from posttrain.rollout.agent_loop import AgentLoop

        self.stage, self.infra, self.tok, self.pool = stage, infra, teacher_tokenizer, pool
        self.router, self.verifier, self.teacher_id = router, verifier, teacher_id
        self.agents = AgentLoop(teacher_tokenizer, stage.teacher.max_model_len)
        self.sampling = SamplingSettings(temperature=stage.temperature, top_p=stage.top_p)

    def generate(self, tasks: list) -> list:
        """Every candidate of `tasks`, finished: the queue's complete groups, in task order."""
        from posttrain.rollout.queue import PartialRolloutQueue

        stage, max_len = self.stage, self.stage.teacher.max_model_len
        queue = PartialRolloutQueue(max_staleness=10**9)
        groups = {}
        for index, task in tasks:
            prompt = tuple(render_task(self.tok, task.messages, task.entry.get("tools")))  # env tasks: tools
            if len(prompt) >= max_len:
                groups[index] = None  # recorded as format failures
                continue
            queue.add_group(task, prompt, stage.candidates, min(stage.max_tokens, max_len - len(prompt)), None, 0)
            groups[index] = next(reversed(queue.groups))
        trajs = queue.unfinished(0, 10**9)
        while trajs:
            self.pool.run_iteration(trajs, self.sampling, 1.0, 0)
            self.agents.advance(queue, trajs, 0)  # tool results; those episodes go on
            trajs = queue.unfinished(0, 10**9)
        done = {g.group_id: g for g in queue.pop_complete(0)}
        return [(index, task, done[groups[index]] if groups[index] is not None else None) for index, task in tasks]

    def chunk(self, tasks: list) -> list[dict]:
        """Generate, score and verify the candidates of a chunk of (index, task); its rows."""
        produced = self.generate(tasks)
        samples: list[Sample] = []
        for _, task, group in produced:
            for t in group.trajectories if group else []:
                text = self.tok.decode(t.response_ids, skip_special_tokens=True)
                samples.append(
                    Sample(
                        task,
                        0,
                        t.prompt_ids,
                        Completion(tuple(t.response_ids), tuple(t.logp_behaviour), text, t.finish_reason),
                        0,
                        env=t.env,
                        action_mask=tuple(t.action_mask),
                    )
                )
        rewards = iter(asyncio.run(score_safely(self.router, samples)) if samples else [])
        rows = []
        for index, task, group in produced:
            for k in range(self.stage.candidates):
                t = group.trajectories[k] if group else None
                rows.append(self.row(index, k, task, t, next(rewards) if t is not None else None))
        return rows

    def row(self, index: int, k: int, task, traj, result: RewardResult | None) -> dict:
        cid = f"{index}-{k}"
        student = self.infra.tokenizer
        tools = verifier_facts(task.verifier).episode == "agent"
        if traj is None:
            fmt, messages = (
                {
                    "pass": False,
                    "reason": f"prompt does not fit teacher.max_model_len={self.stage.teacher.max_model_len}",
                },
                None,
            )
        else:
            fmt, messages = check_format(
                task.messages,
                traj.response_ids,
                traj.action_mask,
                traj.finish_reason,
                traj.env,
                self.tok,
                student,
                tools,
            )
        tokens = (
            assistant_tokens(messages, student) if messages is not None and messages[-1].role == "assistant" else None
        )
        verdicts, status, why = self.verifier.run(cid, task.task_id, fmt, messages, result, tokens)
        row = {
            "id": cid,
            "task_id": task.task_id,
            "task_index": index,
            "k": k,
            "family": task.family,
            "verifier": task.verifier,
            "template": TEMPLATE_VERSION,
            "teacher": self.teacher_id,
            "prompt_messages": len(task.messages),
            "messages": from_messages(messages) if messages else [],
            "response": self.tok.decode(traj.response_ids, skip_special_tokens=False) if traj is not None else "",
            "finish_reason": traj.finish_reason if traj is not None else "not_generated",
            "teacher_tokens": traj.model_tokens if traj is not None else 0,
            "assistant_tokens": tokens,
            "answer": task.answer,
            "verdicts": verdicts,
            "status": status,
            "review_reason": why,
        }
        if result is not None:
            row.update(score=result.score, ok=result.ok, reason=result.reason, source=result.source)
        if traj is not None and traj.env is not None:
            row["env"] = traj.env
        return row


def run_synthesis(stage: SynthesisStage, infra: Infra) -> dict:
    """Write, verify and store the candidates of every task not done yet; returns the summary."""
    from transformers import AutoTokenizer

    from posttrain.data.tasks import load_tasks
    from posttrain.rewards.grm_judge import folder_version
    from posttrain.rewards.router import reward_router

    store = SynthesisStore(infra.run_dir, stage.name)
    tasks = load_tasks(stage.tasks)
    done = store.prepare(stage.candidates)
    todo = [(i, t) for i, t in enumerate(tasks) if t.task_id not in done]
    if done:
        print(f"[{stage.name}] resuming: {len(done)} of {len(tasks)} tasks already synthesized", flush=True)
    if todo:
        teacher_dir = teacher_dir_of(stage, infra)
        pool = teacher_engines(stage, teacher_dir)
        router = reward_router(stage, infra.judge)
        router.start()
        synth = Synthesizer(
            stage,
            infra,
            AutoTokenizer.from_pretrained(teacher_dir),
            pool,
            router,
            Verifier(stage, store.kept_keys(stage.verify.dedup.across_tasks)),
            f"{stage.teacher.model}@{folder_version(teacher_dir)}",
        )
        chunks = [todo[i : i + stage.chunk] for i in range(0, len(todo), stage.chunk)]
        progress = Progress(stage.name, len(tasks), live=infra.live_progress)
        try:
            for chunk in chunks:
                started = time.perf_counter()
                store.append(synth.chunk(chunk))
                summary = store.summary()
                infra.metrics.log(
                    stage.name, summary["tasks"], {**metric_row(summary), "time/chunk_s": time.perf_counter() - started}
                )
                progress.update(summary["tasks"], kept=summary["passed"], review=summary["queue"])
        finally:
            router.close()
            pool.shutdown()
            if infra.judge is not None:  # frees its memory for the next stage; one that judges starts it again
                infra.judge.close()
    store.write_sft()
    summary = store.summary()
    infra.metrics.log(stage.name, summary["tasks"], metric_row(summary))
    print(
        f"[{stage.name}] {summary['candidates']} candidates for {summary['tasks']} tasks: {summary['passed']} passed, "
        f"{summary['rejected']} rejected, {summary['sent_to_review']} sent to review ({summary['queue']} waiting); "
        f"SFT set {summary['sft_set']} -> {store.sft}",
        flush=True,
    )
    if stage.review.wait and summary["queue"]:
        raise ReviewPending(
            f"{summary['queue']} trajectories of stage {stage.name} wait for review: run "
            f"`posttrain review {infra.run_dir}`, then `posttrain run --resume {infra.run_dir}`"
        )
    return summary


def metric_row(summary: dict) -> dict:
    row = {f"synthesis/{k}": float(v) for k, v in summary.items() if isinstance(v, (int, float))}
    row.update({f"synthesis/reviewed/{k}": float(v) for k, v in summary["reviewed"].items()})
    return row
