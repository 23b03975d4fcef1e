"""A trainer rank reloaded for the next stage frees the previous stage's model: its engine,
module, optimizer and (with KL) reference engine are collected, so memory does not grow
stage by stage (on a GPU, a 3B model's second reload ran out of memory before this). Run in
a fresh process: real DeepSpeed ranks (world size 1, gloo) on the tiny model, ZeRO-3 (whose
module, and after a checkpointed backward one of its blocks, DeepSpeed keeps on a
module-level stack) and ZeRO-2, with gradient checkpointing on and off."""

import json
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import gc, json, random, sys, weakref
    from deepspeed.runtime.zero import parameter_offload
    from posttrain.config import TrainerConfig
    from posttrain.train.group import free_port
    from posttrain.train.spec import loss_spec
    import torch
    from posttrain.train.trainer import TrainerWorker
    from posttrain.types import TrainSequence

    def held_bytes(engine):  # by the known paths, not the walk that frees them
        tensors = [t for p in engine.module.parameters() for t in (p, getattr(p, "ds_tensor", None), p.grad)]
        tensors += [t for state in engine.optimizer.optimizer.state.values() for t in state.values()]
        for name in ("fp32_partitioned_groups_flat", "single_partition_of_fp32_groups", "bit16_groups_flat"):
            tensors += list(getattr(engine.optimizer, name, []))
        tensors.append(getattr(engine.optimizer, "grad_partitions_flat_buffer", None))
        storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
                    for t in tensors if isinstance(t, torch.Tensor)}
        return sum(storages.values())

    model_dir, stage = sys.argv[1], int(sys.argv[2])
    config = TrainerConfig(workers=1, zero_stage=stage, micro_batch_tokens=512)
    worker = TrainerWorker(0, 1, free_port(), config, seed=0)
    checkpointing = [True, False, True]  # a recompute in backward leaves a block on DeepSpeed's stack
    rng = random.Random(0)
    seqs = [TrainSequence(tuple(rng.randrange(3, 300) for _ in range(40)), 20, (1.0,) * 20, (1.0,) * 20)
            for _ in range(4)]
    alive, losses = [], []
    for round in range(3):
        worker.config = config.model_copy(update={"gradient_checkpointing": checkpointing[round]})
        worker.load(model_dir, "bfloat16", lr=1e-3, warmup_steps=0, kl_beta=0.1)
        gc.collect()
        alive.append(sum(r() is not None for r in refs) if round else 0)
        refs = [weakref.ref(x) for x in (worker.engine, worker.engine.module, worker.engine.optimizer)]
        if hasattr(worker.ref_model, "module"):
            refs += [weakref.ref(worker.ref_model), weakref.ref(worker.ref_model.module)]
        out = worker.train_step(seqs, loss_spec("pg"), 80)
        losses.append(out.sums.loss)
        if round == 1:  # a reference left behind (on a GPU something holds a ZeRO-3 engine)
            stray = worker.engine
            held = [held_bytes(stray)]
    held.append(held_bytes(stray))
    live = {id(m) for e in (worker.engine, worker.ref_model) for m in getattr(e, "module", e).modules()}
    stack = [type(m).__name__ for m in parameter_offload.FWD_MODULE_STACK if id(m) not in live]
    print("RESULT " + json.dumps({"alive": alive, "refs": len(refs), "stack": stack, "losses": losses, "held": held}))
""")


@pytest.mark.parametrize("stage", [3, 2])
def test_a_reload_frees_the_previous_engine(tiny_dir, stage):
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tiny_dir), str(stage)], capture_output=True, text=True, timeout=600
    )
    lines = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")]
    assert out.returncode == 0 and lines, out.stderr[-3000:]
    got = json.loads(lines[0].removeprefix("RESULT "))
    # nothing of the previous load survives the next (the third load's predecessor is held on
    # purpose: the stray reference below)
    assert got["alive"][:2] == [0, 0], got
    assert got["refs"] == (5 if stage == 3 else 3)  # under ZeRO-3 the reference model is an engine too
    assert got["stack"] == []  # DeepSpeed's stack of modules in forward holds the live models' only
    assert all(loss == loss for loss in got["losses"])  # each reload trains
    # what a stray reference to the second engine still holds: its weights, master weights,
    # optimizer state and gradients before the reload (the tiny model: about 14 bytes a
    # parameter, over 1 MB), nothing after it
    before, after = got["held"]
    assert before > 1e6 and after == 0, got["held"]
