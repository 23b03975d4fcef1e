"""Weights leave a ZeRO-3 rank bucket by bucket (posttrain/train/export.py): a push, a
checksum and a save never gather more than one bucket at once, and what they give is the
model: the checkpoint (sharded, with its index) loads in transformers with the trained
weights, and the packet and the checksum agree with it. Run in a fresh process: a real
DeepSpeed ZeRO-3 rank (world size 1, gloo) on the tiny model."""

import json
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import json, random, sys
    import deepspeed, torch
    from posttrain.config import TrainerConfig
    from posttrain.train import export
    from posttrain.train.group import free_port
    from posttrain.train.spec import loss_spec
    from posttrain.train.trainer import TrainerWorker
    from posttrain.types import TrainSequence

    model_dir, out_dir, bucket = sys.argv[1], sys.argv[2], int(sys.argv[3])
    gathers = []
    Original = deepspeed.zero.GatheredParameters

    class Recording(Original):  # the bytes each gather makes whole at once
        def __init__(self, params, *args, **kwargs):
            params = list(params) if not hasattr(params, "ds_id") else [params]
            gathers.append(sum(p.ds_numel * p.element_size() for p in params))
            super().__init__(params, *args, **kwargs)

    deepspeed.zero.GatheredParameters = Recording
    export.SHARD_BYTES = 3 * bucket  # several checkpoint shards, and an index
    worker = TrainerWorker(0, 1, free_port(), TrainerConfig(workers=1, zero_stage=3, micro_batch_tokens=512), seed=0)
    worker.load(model_dir, "float32", lr=1e-2, warmup_steps=0)
    worker.bucket_bytes = bucket
    rng = random.Random(0)
    ids = [tuple(rng.randrange(3, 300) for _ in range(40)) for _ in range(4)]
    seqs = [TrainSequence(t, 20, (1.0,) * 20, (1.0,) * 20) for t in ids]
    worker.train_step(seqs, loss_spec("pg"), 80)  # the weights move away from the folder's
    gathers.clear()
    checksum = worker.parameter_checksum()
    packet = worker.get_weights(3)
    folder = worker.save(out_dir)
    largest = max(p.ds_numel * p.element_size() for p in worker.engine.module.parameters())
    arrays = {k: float(v.astype("float64").sum()) for k, v in packet.arrays.items()}
    print("RESULT " + json.dumps({"gathers": gathers, "largest": largest, "checksum": checksum,
                                  "packet": arrays, "folder": folder}))
""")


def test_zero3_weights_leave_bucket_by_bucket_and_the_checkpoint_is_the_model(tiny_dir, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    bucket = 64 * 2**10
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tiny_dir), str(tmp_path / "ckpt"), str(bucket)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")]
    assert out.returncode == 0 and lines, out.stderr[-3000:]
    got = json.loads(lines[0].removeprefix("RESULT "))
    # three exports (checksum, packet, save), each many gathers, none above one bucket
    # (or the one tensor larger than a bucket); the old export gathered the whole model at once
    assert len(got["gathers"]) > 6
    assert max(got["gathers"]) <= max(bucket, got["largest"])
    folder = tmp_path / "ckpt"
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1  # sharded
    saved = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    base = AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32)
    state = saved.state_dict()
    assert any(not torch.equal(v, base.state_dict()[k]) for k, v in state.items())  # the trained weights
    for name, value in got["packet"].items():  # the packet (a tied head named too) is the checkpoint
        assert abs(float(state[name].double().sum()) - value) < 1e-6 * max(1.0, abs(value)), name
    unique = {id(p): p for p in saved.parameters()}.values()
    assert abs(sum(float(p.double().sum()) for p in unique) - got["checksum"]) < 1e-6 * abs(got["checksum"])
    config = json.loads((folder / "config.json").read_text())
    assert config["dtype"] == "float32" and (folder / "generation_config.json").is_file()


def test_the_kl_reference_is_partitioned_under_zero3_and_stays_the_stages_start_after_a_resume(
    ray_session, tiny_dir, tmp_path
):
    """kl_beta > 0 with ZeRO-3 over 2 ranks: each rank holds half of the reference model
    (it was a whole copy per rank); resuming from a checkpoint keeps the reference at the
    stage's starting weights (it became the checkpoint's)."""
    import math
    import random

    import ray

    from posttrain.config import GRPOConfig, TrainerConfig
    from posttrain.train.group import TrainerGroup
    from posttrain.train.spec import loss_spec
    from posttrain.types import TrainSequence

    def facts(worker):
        import deepspeed

        ref = worker.ref_model.module
        params = list(ref.parameters())
        local = sum(p.ds_tensor.numel() if hasattr(p, "ds_tensor") else p.numel() for p in params)
        whole = sum(getattr(p, "ds_numel", p.numel()) for p in params)
        with deepspeed.zero.GatheredParameters(params, modifier_rank=None):
            ref_sum = float(sum(p.double().sum() for p in params))
        return local, whole, ref_sum

    group = TrainerGroup(TrainerConfig(workers=2, zero_stage=3, micro_batch_tokens=512), seed=0)
    try:
        group.load(str(tiny_dir), "float32", lr=1e-2, warmup_steps=0, kl_beta=0.1)
        start = ray.get([w.__ray_call__.remote(facts) for w in group.workers])  # a gather: every rank at once
        for local, whole, _ in start:
            assert local <= whole / 2 + 1024  # a half (ZeRO pads partitions a little), not a copy
        rng = random.Random(0)
        ids = [tuple(rng.randrange(3, 300) for _ in range(40)) for _ in range(4)]
        seqs = [TrainSequence(t, 20, (1.0,) * 20, (1.0,) * 20) for t in ids]
        group.train_step(seqs, loss_spec("pg"))
        folder = group.save(str(tmp_path / "ckpt"))
        trained = ray.get([w.parameter_checksum.remote() for w in group.workers])[0]
        group.load(folder, "float32", lr=1e-2, warmup_steps=0, kl_beta=0.1, resume=True, ref_dir=str(tiny_dir))
        resumed = ray.get([w.__ray_call__.remote(facts) for w in group.workers])
        assert ray.get([w.parameter_checksum.remote() for w in group.workers])[0] == trained  # the checkpoint
        assert resumed[0][2] == start[0][2] != trained  # the reference is still the stage's start
        # the partitioned reference runs: the resumed policy is a step away from it, so KL > 0
        kl_step = group.train_step(seqs, loss_spec("pg", GRPOConfig(kl_beta=0.1)))
        assert 0 < kl_step.sums.kl / kl_step.sums.tokens < 1 and math.isfinite(kl_step.sums.loss)  # per-token k3
    finally:
        group.shutdown()
