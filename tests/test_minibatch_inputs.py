"""A rank holds one micro-batch's inputs and mask on its device at a time. With a no-grad
pass before the steps (PPO: several minibatches or epochs), its batches are not kept for
the gradient passes: each micro-batch is collated again when its turn comes, so a
minibatch's inputs and L^2 masks never sit on the device all at once. Run in a fresh
process: a real DeepSpeed rank (world size 1, gloo) on the tiny model."""

import json
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import gc, json, random, sys, weakref
    from posttrain.config import GRPOConfig, TrainerConfig
    from posttrain.train.group import free_port
    from posttrain.train.spec import loss_spec
    from posttrain.train.trainer import TrainerWorker
    from posttrain.types import TrainSequence

    worker = TrainerWorker(0, 1, free_port(), TrainerConfig(workers=1, zero_stage=2, micro_batch_tokens=64), seed=0)
    worker.load(sys.argv[1], "float32", lr=1e-3, warmup_steps=0)
    alive_at_collate, made = [], []
    collate = worker._collate

    def counting(seqs):
        gc.collect()
        alive_at_collate.append(sum(ref() is not None for ref in made))
        batch = collate(seqs)
        made.append(weakref.ref(batch["input_ids"]))
        return batch

    worker._collate = counting
    rng = random.Random(0)
    seqs = [TrainSequence(tuple(rng.randrange(3, 300) for _ in range(40)), 20, (1.0,) * 20, (1.0,) * 20)
            for _ in range(6)]  # 40 positions each, 64 per micro-batch: six micro-batches
    spec = loss_spec("pg", GRPOConfig(minibatches=1, epochs=2))
    result = worker.train_minibatches([seqs], spec, [120])
    print("RESULT " + json.dumps({"alive": alive_at_collate, "applied": result.applied}))
""")


def test_a_minibatch_holds_one_micro_batch_of_inputs_at_a_time(tiny_dir):
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(tiny_dir)], capture_output=True, text=True, timeout=600)
    line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line, out.stdout[-2000:] + out.stderr[-3000:]
    result = json.loads(line[len("RESULT ") :])
    # the no-grad pass, then two epochs of gradient passes: 6 micro-batches each
    assert len(result["alive"]) == 18 and result["applied"] == 2, result
    assert max(result["alive"]) <= 1, result  # at most the previous micro-batch, on its way out
