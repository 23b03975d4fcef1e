"""The GPU path on one CUDA GPU, offline, in at most 10 minutes: each check prints PASS or
FAIL with what it measured, then a summary (exit 0 only if every check passed). Run it
through `bash bench/gpu_check.sh`; models are built in code (no download).

Checks, in order (each with its own deadline; actors are killed between checks):
  versions       torch/CUDA/NCCL/GPU, vllm (the gpu extra's range), deepspeed, ray, transformers
  engine_rank    a vLLM engine with CUDA graphs (enforce_eager: false) and one NCCL DeepSpeed
                 rank (ZeRO-2) sharing the GPU: train step, then weights pushed by both modes
                 (collective: vLLM's ipc transfer backend, since NCCL refuses two ranks on one
                 GPU; object_store), each followed by trainer-engine logprob agreement: a reload
                 under CUDA graphs must reach the captured graphs
  partial        partial generation (cut requests) and prompt logprobs on that engine
  zero3          one ZeRO-3 rank on the GPU, collective push, agreement
  two_ranks      two ranks (gloo, CPU tensors: two NCCL ranks cannot share one GPU) give the
                 same gradient norm and loss as one rank: the sharding and exact accumulation
                 the NCCL ranks run
  judge          the GRM judge engine starts on the GPU (gpu_memory_utilization, CUDA
                 graphs, 8192-token context) and answers a JSON-schema request
  sync_time      weight sync of a --sync-gib GB bf16 packet by both modes, and the peak GPU
                 memory of one train step of that model

    python bench/gpu_check.py [--only CHECK ...] [--sync-gib 1.6] [--device cuda|cpu]

`--device cpu` rehearses the same script on a CPU machine (no GPU figures, eager engines).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path

VLLM_RANGE = ((0, 32), (0, 33))  # pyproject's gpu extra: vllm>=0.32,<0.33
DEADLINES = {
    "versions": 60,
    "engine_rank": 240,
    "partial": 60,
    "zero3": 120,
    "two_ranks": 120,
    "judge": 180,
    "sync_time": 300,
}
PROMPT = (1, 40, 41, 42, 43)
BUDGET_S = 570  # the whole run, within gpu_check.sh's 600 s (which also covers start-up and summary)


class Deadline(Exception):
    pass


def _alarm(signum, frame):
    raise Deadline("deadline passed")


class Checks:
    def __init__(self, args, workdir: Path):
        self.args, self.workdir = args, workdir
        self.gpu = args.device == "cuda"
        # one GPU: the engine and the rank share it, which NCCL refuses; vLLM's CUDA IPC backend is for that
        self.transfer_backend = "ipc" if self.gpu else "gloo"
        self.actors: list = []
        self.groups: list = []
        self.results: list[tuple[str, bool, str, float]] = []
        self.shared: dict = {}
        self.builder = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        self.big = None

    # ------------------------------------------------------------ helpers

    def share(self, fraction: float) -> float:
        return fraction if self.gpu else 0

    def engine(self, model_dir, dtype="float32", eager=None, memory=0.15, weight_sync="auto", **extra):
        import ray

        from posttrain.config import RolloutConfig
        from posttrain.rollout.engine import RolloutEngine

        config = RolloutConfig(
            max_model_len=256,
            num_gpus=self.share(0.2),
            num_cpus=0,
            gpu_memory_utilization=memory,
            kv_cache_gib=0.1,
            enforce_eager=(not self.gpu) if eager is None else eager,
            weight_sync=weight_sync,
            transfer_backend=self.transfer_backend,
            **extra,
        )
        actor = RolloutEngine.remote_actor(str(model_dir), config, dtype, seed=0)
        self.actors.append(actor)
        info = ray.get(actor.info.remote(), timeout=240)
        return actor, config, info

    def trainers(self, model_dir, dtype="float32", zero_stage=2, workers=1, rollout=None, env=None, gpus=0.2):
        from posttrain.config import TrainerConfig
        from posttrain.train.group import TrainerGroup

        config = TrainerConfig(
            workers=workers, zero_stage=zero_stage, num_gpus=self.share(gpus), num_cpus=0, micro_batch_tokens=4096
        )
        if rollout is not None:  # the engines' backend (their config has the GPUs ipc needs)
            rollout = rollout.model_copy(update={"transfer_backend": self.transfer_backend})
        group = TrainerGroup(config, seed=0, env=env, rollout=rollout)
        self.groups.append(group)
        group.load(str(model_dir), dtype, lr=1e-3, warmup_steps=0)
        return group

    def sample(self, engine, n=4, max_tokens=16):
        import ray

        from posttrain.types import GenerationRequest, SamplingSettings, TrainSequence

        (outs,) = ray.get(
            engine.generate.remote([GenerationRequest(PROMPT, n, max_tokens)], SamplingSettings()), timeout=120
        )
        return [
            TrainSequence(
                PROMPT + c.token_ids, len(PROMPT), (1.0,) * len(c.token_ids), (1.0,) * len(c.token_ids), c.logprobs
            )
            for c in outs
        ]

    def disagreement(self, engine, group) -> float:
        seqs = self.sample(engine)
        trainer = group.logprobs(seqs)
        diffs = [abs(a - b) for s, lp in zip(seqs, trainer) for a, b in zip(lp, s.logp_engine)]
        return sum(diffs) / max(len(diffs), 1)

    def cleanup(self) -> None:
        import ray

        for group in self.groups:
            try:
                group.shutdown()
            except Exception:  # noqa: BLE001 - already gone
                pass
        for actor in self.actors:
            try:
                ray.kill(actor)
            except Exception:  # noqa: BLE001 - already gone
                pass
        self.groups, self.actors = [], []
        time.sleep(2)  # let the GPU memory of killed actors go back

    def run(self, name: str, left_s: float) -> None:
        """One check under its deadline, cut to the time left of the whole run's 10 minutes."""
        started = time.monotonic()
        deadline = int(min(DEADLINES[name], left_s))
        if deadline < 20:
            self.results.append((name, False, "no time left in the 10 minutes", 0.0))
            print(f"FAIL {name} (0 s): no time left in the 10 minutes", flush=True)
            return
        signal.signal(signal.SIGALRM, _alarm)
        signal.alarm(deadline)
        try:
            ok, detail = getattr(self, name)()
        except Deadline:
            ok, detail = False, f"did not finish within {deadline} s"
        except Exception as exc:  # noqa: BLE001 - a failed check is reported, the next one runs
            last = traceback.format_exception_only(type(exc), exc)[-1].strip()
            ok, detail = False, last[:400]
            traceback.print_exc(file=sys.stderr)
        finally:
            signal.alarm(0)
        if name != "engine_rank" or not ok:  # the partial check reuses engine_rank's engine and rank
            self.cleanup()
        seconds = time.monotonic() - started
        self.results.append((name, ok, detail, seconds))
        print(f"{'PASS' if ok else 'FAIL'} {name} ({seconds:.0f} s): {detail}", flush=True)

    # ------------------------------------------------------------ checks

    def versions(self):
        import deepspeed
        import ray
        import torch
        import transformers

        facts = [
            f"torch {torch.__version__}",
            f"ray {ray.__version__}",
            f"deepspeed {deepspeed.__version__}",
            f"transformers {transformers.__version__}",
        ]
        ok = True
        try:
            import vllm

            version = tuple(int(x) for x in vllm.__version__.split(".")[:2])
            facts.append(f"vllm {vllm.__version__}")
            if self.gpu and not VLLM_RANGE[0] <= version < VLLM_RANGE[1]:
                ok, facts = False, facts + ["vllm outside the tested range >=0.32,<0.33"]
        except Exception as exc:  # noqa: BLE001 - reported
            ok, facts = False, facts + [f"vllm not importable: {exc}"]
        if torch.cuda.is_available():
            nccl = torch.cuda.nccl.version()
            facts += [
                f"CUDA {torch.version.cuda}",
                f"NCCL {'.'.join(map(str, nccl)) if isinstance(nccl, tuple) else nccl}",
                f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)} "
                f"({torch.cuda.get_device_properties(0).total_memory / 2**30:.0f} GiB)",
            ]
        elif self.gpu:
            ok, facts = False, facts + ["torch sees no CUDA device"]
        return ok, ", ".join(facts)

    def engine_rank(self):
        from posttrain.config import RolloutConfig
        from posttrain.train.spec import loss_spec

        tiny = self.shared["tiny"]
        engine, _, info = self.engine(tiny, eager=False if self.gpu else True)
        rollout = RolloutConfig(weight_sync="collective", sync_bucket_mib=0.25)  # several buckets
        group = self.trainers(tiny, rollout=rollout)
        before = self.disagreement(engine, group)
        group.train_step(self.sample(engine), loss_spec("pg"))
        details = [
            f"engine start {info['start_seconds']:.0f} s (CUDA graphs {'on' if self.gpu else 'off'})",
            f"agreement before training {before:.1e}",
        ]
        ok = before < 1e-4
        for mode in ("collective", "object_store"):
            group.weight_sync = mode
            sync = group.sync_weights([engine])
            after = self.disagreement(engine, group)
            details.append(f"{mode} push {sync['sync/seconds']:.2f} s, then agreement {after:.1e}")
            ok = ok and after < 1e-4
            group.train_step(self.sample(engine), loss_spec("pg"))
        group.sync_weights([engine])
        self.shared["engine"], self.shared["group"] = engine, group
        return ok, "; ".join(details)

    def partial(self):
        import ray

        from posttrain.types import GenerationRequest, SamplingSettings

        engine, group = self.shared["engine"], self.shared["group"]
        # two short requests finish first; the six long ones are then cut where they stand
        requests = [GenerationRequest(PROMPT, 1, n) for n in (2, 3, 64, 64, 64, 64, 64, 64)]
        outs = ray.get(engine.generate_partial.remote(requests, SamplingSettings(), 2), timeout=60)
        cut = sum(c.finish_reason == "cut" for c in outs)
        seqs = self.sample(engine)
        served = ray.get(engine.prompt_logprobs.remote([list(s.token_ids) for s in seqs]), timeout=60)
        trainer = group.logprobs(seqs)
        diffs = [abs(a - b) for s, lt, le in zip(seqs, trainer, served) for a, b in zip(lt, le[s.prompt_len - 1 :])]
        mean = sum(diffs) / max(len(diffs), 1)
        ok = len(outs) == 8 and cut >= 1 and all(len(c.token_ids) == len(c.logprobs) for c in outs) and mean < 1e-4
        return ok, f"{cut} of 8 requests cut after 2 finished; prompt logprobs vs trainer {mean:.1e}"

    def zero3(self):
        from posttrain.config import RolloutConfig
        from posttrain.train.spec import loss_spec

        tiny = self.shared["tiny"]
        engine, _, _ = self.engine(tiny)
        group = self.trainers(tiny, zero_stage=3, rollout=RolloutConfig(weight_sync="collective"))
        group.train_step(self.sample(engine), loss_spec("pg"))
        sync = group.sync_weights([engine])
        after = self.disagreement(engine, group)
        return after < 1e-4, f"collective push {sync['sync/seconds']:.2f} s, agreement {after:.1e}"

    def two_ranks(self):
        from posttrain.train.spec import loss_spec
        from posttrain.types import TrainSequence

        tiny = self.shared["tiny"]
        seqs = [
            TrainSequence(PROMPT + tuple(range(50, 50 + k)), len(PROMPT), (0.5,) * k, (1.0,) * k, (-1.0,) * k)
            for k in (3, 5, 7, 9, 11)
        ]
        cpu = {"DS_ACCELERATOR": "cpu", "CUDA_VISIBLE_DEVICES": ""}
        norms = []
        for workers in (1, 2):
            group = self.trainers(tiny, workers=workers, env=cpu, gpus=0)
            out = group.train_step(seqs, loss_spec("pg"))
            norms.append((out.grad_norm, out.sums.loss))
        (g1, l1), (g2, l2) = norms
        ok = abs(g1 - g2) <= 1e-4 * abs(g1) and abs(l1 - l2) <= 1e-4 * abs(l1) + 1e-7
        return ok, f"grad norm 1 rank {g1:.6f} vs 2 ranks {g2:.6f}; loss {l1:.6f} vs {l2:.6f}"

    def judge(self):
        import ray

        from posttrain.config import VLLMJudge
        from posttrain.rollout.judge import JudgeEngine

        config = VLLMJudge(
            type="vllm",
            model="tiny",
            max_model_len=8192 if self.gpu else 512,
            num_gpus=self.share(0.15),
            num_cpus=0,
            gpu_memory_utilization=0.1,
            enforce_eager=not self.gpu,
            kv_cache_gib=0.1,
        )
        actor = JudgeEngine.remote_actor(str(self.shared["judge"]), config)
        self.actors.append(actor)
        schema = {"type": "object", "properties": {"verdict": {"enum": ["yes", "no"]}}, "required": ["verdict"]}
        request = {
            "messages": [{"role": "user", "content": "Is 2 + 2 = 4?"}],
            "schema": schema,
            "max_tokens": 16,
            "temperature": 0.0,
            "logprobs": 5,
        }
        (reply,) = ray.get(actor.chat.remote([request]), timeout=170)
        info = ray.get(actor.info.remote())
        import json

        verdict = json.loads(reply["text"]).get("verdict")
        return verdict in ("yes", "no"), (
            f"started in {info['start_seconds']:.0f} s with max_model_len {config.max_model_len}, "
            f"gpu_memory_utilization 0.1; reply {reply['text']!r}"
        )

    def sync_time(self):
        import statistics

        import ray

        from posttrain.config import RolloutConfig
        from posttrain.train.spec import loss_spec
        from posttrain.types import TrainSequence

        big = self.big.result(timeout=120)
        rollout = RolloutConfig(weight_sync="collective", sync_bucket_mib=256)
        engine, _, info = self.engine(big, dtype="bfloat16", eager=True, memory=0.25)
        group = self.trainers(big, dtype="bfloat16", rollout=rollout, gpus=0.5)
        tokens = tuple(1 + i % 500 for i in range(1000))
        seqs = [TrainSequence(tokens, 500, (0.1,) * 500, (1.0,) * 500, (-1.0,) * 500)] * 4
        parameters = ray.get(group.workers[0].__ray_call__.remote(lambda s: s.engine.module.num_parameters()))

        def peak() -> float:
            import torch

            return torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else float("nan")

        def reset(_self):
            import torch

            if torch.cuda.is_available():
                torch.cuda.reset_peak_memory_stats()

        ray.get(group.workers[0].__ray_call__.remote(reset))
        step = group.train_step(seqs, loss_spec("pg"))
        peak_gib = ray.get(group.workers[0].__ray_call__.remote(lambda _self: peak()))
        times, lines = {}, []
        for mode in ("collective", "object_store"):
            group.weight_sync = mode
            group.sync_weights([engine])  # warm-up (forms the group)
            times[mode] = [group.sync_weights([engine])["sync/seconds"] for _ in range(3)]
        nbytes = ray.get(group.workers[0].sync_bytes.remote())
        for mode, values in times.items():
            median = statistics.median(values)
            lines.append(f"{mode} {median:.2f} s ({nbytes / median / 1e9:.1f} GB/s)")
        backend = group.backend
        return True, (
            f"packet {nbytes / 1e9:.2f} GB bf16; median of 3: {', '.join(lines)}; collective backend {backend}; "
            f"engine start {info['start_seconds']:.0f} s; one train step of 4 x 1000 tokens {step['seconds']:.1f} s, "
            f"peak GPU memory {peak_gib:.1f} GiB (rank 0, ZeRO-2, {parameters / 1e6:.0f} M parameters)"
        )


def build_models(workdir: Path, sync_gib: float) -> tuple[Path, Path, callable]:
    from posttrain.config import TinyModelConfig
    from posttrain.models import build_tiny

    tiny = build_tiny(TinyModelConfig(), seed=0, target=workdir / "tiny")
    judge = build_tiny(TinyModelConfig(max_position=8192), seed=0, target=workdir / "judge")
    # bf16 parameters ~ sync_gib GB: 16 layers of 2048 wide (51 M each) and tied embeddings
    layers = max(1, round(sync_gib * 1e9 / 2 / 51.4e6))
    shape = TinyModelConfig(
        layers=min(layers, 48), hidden=2048, heads=16, kv_heads=16, intermediate=5632, max_position=2048
    )
    return tiny, judge, lambda: build_tiny(shape, seed=0, target=workdir / "big")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", nargs="*", choices=list(DEADLINES), help="run these checks only")
    parser.add_argument("--sync-gib", type=float, default=1.6, help="bf16 packet size of the sync_time check, in GB")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    args = parser.parse_args()
    wanted = args.only or list(DEADLINES)

    import ray

    from posttrain.runtime.infra import QUIET_ENV

    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="posttrain-gpu-check-") as folder:
        workdir = Path(folder)
        checks = Checks(args, workdir)
        tiny, judge, build_big = build_models(workdir, args.sync_gib)
        checks.shared.update(tiny=tiny, judge=judge)
        if "sync_time" in wanted:
            checks.big = checks.builder.submit(build_big)  # CPU work while the GPU checks run
        ray.init(num_cpus=8, log_to_driver=False, runtime_env={"env_vars": {k: v for k, v in QUIET_ENV.items() if v}})
        try:
            for name in DEADLINES:
                if name not in wanted:
                    continue
                if name == "partial" and "engine" not in checks.shared:
                    checks.results.append((name, False, "needs engine_rank", 0.0))
                    print(f"FAIL {name} (0 s): needs engine_rank, which did not pass", flush=True)
                    continue
                checks.run(name, BUDGET_S - (time.monotonic() - started))
        finally:
            checks.cleanup()
            ray.shutdown()
            checks.builder.shutdown(wait=False)
    passed = sum(ok for _, ok, _, _ in checks.results)
    print(
        f"\nsummary: {passed} of {len(checks.results)} checks passed in {time.monotonic() - started:.0f} s "
        f"({args.device})"
    )
    for name, ok, detail, seconds in checks.results:
        print(f"  {'PASS' if ok else 'FAIL'}  {name:<12} {seconds:5.0f} s  {detail}")
    return 0 if passed == len(checks.results) else 1


if __name__ == "__main__":
    sys.exit(main())
