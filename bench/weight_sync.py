"""Weight sync against its physical limit: one memory copy of the same bytes, by both
modes (`rollout.weight_sync`).

SmolLM2-135M-Instruct (fp32) on a DeepSpeed rank and a vLLM engine, each a Ray actor,
as in a pipeline. `TrainerGroup.sync_weights` is timed end to end in each mode on the
same rank and engine: `object_store` (also split into its two halves: the trainer packing
its state dict into Ray's object store, the engine loading the packet in place) and
`collective` (rank 0 broadcasts buckets of `--bucket-mib` over a gloo group straight into
the engine's worker, which loads them in place). The limit is one memcpy of the packet's
bytes (numpy copy into a preallocated buffer, measured in this process in the same run).

    .venv/bin/python bench/weight_sync.py [--reps 5] [--workers 1] [--mode both] [--bucket-mib 256]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time


def memcpy_seconds(nbytes: int, reps: int) -> tuple[float, float]:
    """Best and median seconds to copy `nbytes` once, buffers already touched (no page faults)."""
    import numpy as np

    src = np.ones(nbytes // 4, dtype=np.float32)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    times = []
    for _ in range(reps):
        started = time.perf_counter()
        np.copyto(dst, src)
        times.append(time.perf_counter() - started)
    return min(times), statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--workers", type=int, default=1, help="DeepSpeed ranks (rank 0 sends)")
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--mode", choices=["both", "object_store", "collective"], default="both")
    parser.add_argument("--bucket-mib", type=float, default=256, help="collective: MiB per broadcast bucket")
    args = parser.parse_args()

    import ray

    from posttrain.config.files import validate_pipeline
    from posttrain.models import resolve_model
    from posttrain.rollout.engine import RolloutEngine
    from posttrain.runtime.infra import start_ray
    from posttrain.train.group import TrainerGroup

    config = validate_pipeline(
        {
            "name": "bench-sync",
            "model": {"name": args.model},
            "rollout": {"engines": 1, "max_model_len": 256, "sync_bucket_mib": args.bucket_mib},
            "trainer": {"workers": args.workers, "zero_stage": 2},
            "stages": [
                {
                    "name": "rl",
                    "type": "rl",
                    "steps": 1,
                    "lr": 1e-6,
                    "tasks": {"type": "reasoning_gym", "families": [{"name": "basic_arithmetic"}]},
                }
            ],
        }
    )
    model_dir = resolve_model(config.model)
    start_ray(config, verbose=False)
    engine = RolloutEngine.remote_actor(str(model_dir), config.rollout, "float32", 0)
    trainers = TrainerGroup(config.trainer, config.seed, rollout=config.rollout)
    facts = trainers.load(str(model_dir), "float32", 1e-6, 0)
    ray.get(engine.info.remote())
    modes = ["object_store", "collective"] if args.mode == "both" else [args.mode]

    total: dict[str, list[float]] = {m: [] for m in modes}
    pack, load, nbytes, collective_bytes, first_s = [], [], 0, 0, {}
    for mode in modes:
        trainers.weight_sync = mode  # the same rank and engine, the other path
        trainers.version += 1
        first_s[mode] = trainers.sync_weights([engine])["sync/seconds"]  # untimed: warms both sides (forms the group)
        for rep in range(args.reps):
            trainers.version += 1
            total[mode].append(trainers.sync_weights([engine])["sync/seconds"])
            if mode != "object_store":
                continue
            started = time.perf_counter()
            ref = trainers.workers[0].get_weights.remote(trainers.version)
            ray.get([w.get_weights.remote(trainers.version) for w in trainers.workers[1:]])
            ray.wait([ref], fetch_local=False)
            pack.append(time.perf_counter() - started)
            started = time.perf_counter()
            ray.get(engine.update_weights.remote(ref))
            load.append(time.perf_counter() - started)
            if not nbytes:
                nbytes = ray.get(ref).nbytes
            del ref
        if mode == "collective":
            collective_bytes = ray.get(trainers.workers[0].sync_bytes.remote())
    nbytes = nbytes or collective_bytes
    copy_best, copy_median = memcpy_seconds(nbytes, args.reps)
    trainers.shutdown()
    ray.kill(engine)

    med = statistics.median
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {sys.version.split()[0]}; "
        f"load average at the end {os.getloadavg()[0]:.2f}"
    )
    print(
        f"model: {args.model}, {facts['parameters'] / 1e6:.1f} M parameters, object-store packet "
        f"{nbytes / 2**20:.0f} MiB (fp32, tied lm_head sent as its own name), collective "
        f"{collective_bytes / 2**20:.0f} MiB in buckets of {args.bucket_mib:g} MiB (tied head sent once), "
        f"{args.workers} trainer rank(s), 1 engine, median of {args.reps} syncs after one warm-up per mode"
    )
    print()
    print("| what | seconds (median) | GB/s | x one memcpy |")
    print("|---|---|---|---|")
    rows = []
    if "object_store" in total:
        rows += [
            ("object_store: sync_weights, end to end", med(total["object_store"]), nbytes),
            ("  trainer: state dict -> object store", med(pack), nbytes),
            ("  engine: object store -> model (reload_weights)", med(load), nbytes),
        ]
    if "collective" in total:
        rows.append(("collective (gloo): sync_weights, end to end", med(total["collective"]), collective_bytes))
    rows.append(("one memcpy of the object-store packet (limit)", copy_median, nbytes))
    for name, seconds, size in rows:
        print(f"| {name} | {seconds:.3f} | {size / seconds / 1e9:.1f} | {seconds / copy_median:.1f}x |")
    print(
        f"\nbest memcpy {copy_best:.3f} s; first sync per mode (warm-up, the collective forms its group): "
        + ", ".join(f"{m} {s:.2f} s" for m, s in first_s.items())
    )
    if len(total) == 2:
        print(f"collective / object_store = {med(total['collective']) / med(total['object_store']):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
