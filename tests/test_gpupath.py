"""The GPU path, checked on CPU: what the engines and the judge are asked to be on a GPU
config, placements that could never be granted (refused by `validate`, the dry-run and
the start of a run, not left to wait), MOPD teachers on their own resources, and the
collective weight sync surviving a dead engine and reporting a stuck one."""

import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import ray
import yaml

from posttrain.config import RolloutConfig, TeacherPoolConfig, VLLMJudge

ROOT = Path(__file__).parent.parent
RL = {
    "name": "rl",
    "type": "rl",
    "steps": 1,
    "lr": 1e-6,
    "tasks": {"type": "reasoning_gym", "families": [{"name": "basic_arithmetic"}], "size": 4},
}


class Captured(Exception):
    """Stands in for `vllm.LLM`: raised with the arguments the engine was built with."""


def llm_arguments(monkeypatch, build) -> dict:
    """The keyword arguments an engine class passes to vllm.LLM, without a GPU: the real
    constructor runs up to the LLM call, which raises them back."""
    import vllm

    def capture(**kwargs):
        raise Captured(kwargs)

    monkeypatch.setattr(vllm, "LLM", capture)
    with pytest.raises(Captured) as caught:
        build()
    return caught.value.args[0]


def test_judge_on_a_gpu_config_takes_gpu_memory_utilization_and_enforce_eager(monkeypatch):
    from posttrain.rollout.judge import JudgeEngine

    gpu = VLLMJudge(
        type="vllm", model="tiny", max_model_len=8192, num_gpus=1, gpu_memory_utilization=0.85, enforce_eager=False
    )
    args = llm_arguments(monkeypatch, lambda: JudgeEngine("/models/judge", gpu))
    assert args["gpu_memory_utilization"] == 0.85 and args["enforce_eager"] is False
    assert "kv_cache_memory_bytes" not in args  # a 0.5 GiB cache would not hold one 8k-token request
    assert args["max_model_len"] == 8192 and args["tensor_parallel_size"] == 1
    cpu = VLLMJudge(type="vllm", model="tiny", kv_cache_gib=0.25)
    args = llm_arguments(monkeypatch, lambda: JudgeEngine("/models/judge", cpu))
    assert args["kv_cache_memory_bytes"] == 2**28 and "gpu_memory_utilization" not in args
    assert args["enforce_eager"] is True


def test_tensor_parallel_engine_asks_vllm_for_mp_workers_and_its_gpu_share(monkeypatch):
    """What the engine passes to `vllm.LLM` (replaced here: no GPU), not what vLLM then does
    with it: tensor_parallel_size and the "mp" executor, so vLLM starts the TP workers as
    subprocesses of the engine's own actor. That they start is not checked here: they need GPUs."""
    from posttrain.rollout.engine import RolloutEngine

    config = RolloutConfig(num_gpus=2, tensor_parallel=2, gpu_memory_utilization=0.8, enforce_eager=False)
    args = llm_arguments(monkeypatch, lambda: RolloutEngine("/models/m", config, "bfloat16", 0))
    assert args["tensor_parallel_size"] == 2 and args["distributed_executor_backend"] == "mp"
    assert args["gpu_memory_utilization"] == 0.8 and "kv_cache_memory_bytes" not in args
    args = llm_arguments(monkeypatch, lambda: RolloutEngine("/models/m", RolloutConfig(kv_cache_gib=0.5), "float32", 0))
    assert args["kv_cache_memory_bytes"] == 2**29 and args["tensor_parallel_size"] == 1
    assert "distributed_executor_backend" not in args


# ---------------------------------------------------------------- impossible placements, through the CLI


# The caller's cluster and model variables, left out of every CLI call's environment: the
# shipped cluster template reads them, and the tests give what they mean (env=...).
CALLER_VARS = ("POSTTRAIN_MODEL_DIR", "POSTTRAIN_JUDGE_DIR", "RAY_ADDRESS", "POSTTRAIN_NODES")


def posttrain(tmp_path, data: dict | None, *args, file: Path | None = None, env: dict | None = None):
    import os

    if data is not None:
        file = tmp_path / "p.yaml"
        file.write_text(yaml.safe_dump(data))
    base = {k: v for k, v in os.environ.items() if k not in CALLER_VARS}
    return subprocess.run(
        [sys.executable, "-m", "posttrain.cli", *args, str(file)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**base, **(env or {})},
        cwd=ROOT,
    )


def refused(result, *fragments, ray_logs: bool = False) -> str:
    """Exit 2 and one line; `ray_logs`: Ray's own start-up lines may come before it."""
    assert result.returncode == 2, (result.stdout[-2000:], result.stderr)
    lines = result.stderr.strip().splitlines()
    if ray_logs:
        lines = [line for line in lines if not re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+\s+(INFO|WARNING)", line)]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize(
    "rollout, message",
    [
        ({"num_gpus": 1, "tensor_parallel": 2}, "rollout: num_gpus 1 and tensor_parallel 2 differ"),
        ({"num_gpus": 0, "tensor_parallel": 2}, "rollout: tensor_parallel 2 needs num_gpus: 2"),
        ({"num_gpus": 0.5, "tensor_parallel": 2}, "rollout: tensor_parallel 2 needs num_gpus: 2, not a share"),
    ],
)
def test_tensor_parallel_must_match_the_gpus_the_engine_holds(tmp_path, rollout, message):
    data = {"name": "t", "model": {"name": "tiny"}, "rollout": rollout, "stages": [RL]}
    refused(posttrain(tmp_path, data, "validate"), message)
    ok = {**data, "rollout": {"num_gpus": 2, "tensor_parallel": 2}}
    assert posttrain(tmp_path, ok, "validate").returncode == 0


def test_validate_refuses_a_slot_larger_than_a_declared_node(tmp_path):
    """The README's old GPU example: 4 engines + 8 ranks = 12 GPUs in one STRICT_PACK
    placement group, on 8-GPU nodes: Ray would wait for it forever."""
    data = {
        "name": "t",
        "model": {"name": "tiny", "dtype": "bfloat16"},
        "ray": {"address": "auto", "node_gpus": 8, "node_cpus": 64},
        "rollout": {"engines": 4, "num_gpus": 1, "num_cpus": 4},
        "trainer": {"workers": 8, "num_gpus": 1, "zero_stage": 3},
        "stages": [RL],
    }
    refused(
        posttrain(tmp_path, data, "validate"),
        "p.yaml: rollout, trainer: one slot",
        "needs {CPU: 24, GPU: 12} (4 engines x",
        "largest: {CPU: 64, GPU: 8}",
        "wait for Ray forever",
    )
    fixed = {**data, "trainer": {"workers": 4, "num_gpus": 1, "zero_stage": 3}}
    assert posttrain(tmp_path, fixed, "validate").returncode == 0
    too_few_cpus = {**fixed, "ray": {"node_gpus": 8, "node_cpus": 16}}
    refused(posttrain(tmp_path, too_few_cpus, "validate"), "needs {CPU: 20, GPU: 8}", "largest: {CPU: 16, GPU: 8}")


def test_dry_run_refuses_a_slot_that_no_node_of_this_machine_can_hold(tmp_path):
    data = {"name": "t", "model": {"name": "tiny"}, "rollout": {"num_gpus": 1}, "stages": [RL]}
    result = posttrain(tmp_path, data, "run", "--dry-run", env={"CUDA_VISIBLE_DEVICES": ""})
    refused(result, "one slot (a placement group on one node) needs", "GPU: 1", "largest: {CPU:")
    assert "placement plan for pipeline 't' on local Ray" in result.stdout  # the plan is still shown


def test_run_refuses_a_slot_that_the_live_cluster_cannot_hold(tmp_path):
    """Not just the dry-run: `posttrain run` reads the Ray it started and stops at once."""
    data = {"name": "t", "model": {"name": "tiny"}, "trainer": {"workers": 1, "num_gpus": 1}, "stages": [RL]}
    started = time.monotonic()
    result = posttrain(tmp_path, data, "run", "--run-dir", str(tmp_path / "run"), env={"CUDA_VISIBLE_DEVICES": ""})
    refused(result, "one slot (a placement group on one node) needs", "this Ray cluster: 1 node(s)", ray_logs=True)
    assert time.monotonic() - started < 120


@pytest.fixture
def cluster_template(tmp_path):
    """The shipped cluster template with each task source cut to 200 tasks: these tests read
    its placement, and listing its 170,000 generated tasks for the held-out check takes
    minutes on 2 cores (tests/test_pipelines_shipped.py checks the template whole)."""
    text = (ROOT / "pipelines" / "cluster-8gpu.yaml").read_text()
    small = re.sub(r"\bsize: (\d+)", lambda m: f"size: {min(int(m.group(1)), 200)}", text)
    assert small != text
    (tmp_path / "cluster-8gpu.yaml").write_text(small)
    return tmp_path / "cluster-8gpu.yaml"


def test_teachers_that_cannot_all_be_placed_beside_slot_0_are_refused(tmp_path, cluster_template):
    # one node: slot 0 takes its 8 GPUs, no room for any teacher
    refused(
        posttrain(tmp_path, None, "validate", "-o", "ray.nodes=1", file=cluster_template),
        "stages[2].teacher_pool: 9 vllm teacher actor(s) of {CPU: 2, GPU: 0.5}",
        "0 fit beside slot 0 on 1 node(s)",
        "(declared cluster: ray.nodes: 1, node_gpus: 8, node_cpus: 64)",
    )
    # two nodes and a whole GPU each: 8 of 9 fit, and the message says what to set
    whole = ("-o", "ray.nodes=2", "-o", "stages[2].teacher_pool.num_gpus=1")
    refused(
        posttrain(tmp_path, None, "validate", *whole, file=cluster_template),
        "8 fit beside slot 0 on 2 node(s)",
        "set teacher_pool.max_resident: 8",
    )
    fixed = posttrain(
        tmp_path, None, "validate", *whole, "-o", "stages[2].teacher_pool.max_resident=8", file=cluster_template
    )
    assert fixed.returncode == 0, fixed.stderr
    # a vllm teacher is one GPU or a share of one
    refused(
        posttrain(tmp_path, None, "validate", "-o", "stages[2].teacher_pool.num_gpus=2", file=cluster_template),
        "stages[2].teacher_pool: num_gpus 2: a vllm teacher engine runs on one GPU or a share of one",
    )


def test_cluster_template_dry_runs_onto_8_gpu_nodes(tmp_path, cluster_template):
    result = posttrain(tmp_path, None, "run", "--dry-run", file=cluster_template)
    assert result.returncode == 0, result.stderr
    plan = result.stdout
    assert "on the declared cluster (3 nodes of 64 CPUs, 8 GPUs" in plan
    assert "= {'CPU': 30.0, 'GPU': 8.0}" in plan
    assert [line.split(" - ")[0] for line in plan.splitlines() if line.startswith("slot ")] == [
        "slot 0: node node1",
        "slot 1: node node2",
        "slot 2: node node3",
    ]
    assert "teachers as 9 vllm engine actor(s) at once, {'CPU': 2.0, 'GPU': 0.5} each" in plan
    assert "beside slot 0 they go on: node2 x9" in plan
    assert "stage experts (experts): 9 jobs" in plan and "stage mopd (mopd)" in plan
    two = posttrain(tmp_path, None, "run", "--dry-run", env={"POSTTRAIN_NODES": "2"}, file=cluster_template)
    assert two.returncode == 0 and "slot 2: waits" in two.stdout and "node2 x9" in two.stdout


def readme_gpu_example() -> dict:
    """The YAML block of the docs' "Running on a GPU cluster" section (docs/clusters.md)."""
    text = (ROOT / "docs" / "clusters.md").read_text()
    section = text[text.index("## Running on a GPU cluster") :]
    block = re.search(r"```yaml\n(.*?)```", section, re.S).group(1)
    return yaml.safe_load(block)


def test_readme_gpu_example_validates_and_dry_runs_onto_8_gpu_nodes(tmp_path):
    example = readme_gpu_example()
    model = tmp_path / "my-model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    example["model"]["name"] = str(model)  # the README's /models/my-model, here
    example["ray"].pop("address")  # plan on the cluster the example declares, not a live one
    data = {"name": "readme-gpu", **example, "stages": [RL]}
    assert posttrain(tmp_path, data, "validate").returncode == 0
    result = posttrain(tmp_path, data, "run", "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "'GPU': 8.0}" in result.stdout and "slot 0: node node1" in result.stdout
    assert example["ray"]["node_gpus"] == 8
    assert example["rollout"]["weight_sync"] in ("auto", "collective")


# ---------------------------------------------------------------- the real stack


def test_a_stuck_peer_is_a_timeout_error_not_a_hang(ray_session):
    from ray.exceptions import GetTimeoutError

    from posttrain.train.group import wait_sync

    @ray.remote(num_cpus=0)
    class Stuck:
        def receive_weights(self, version):
            time.sleep(600)
            return version

    peer = Stuck.remote()
    started = time.monotonic()
    with pytest.raises(GetTimeoutError, match="1 of 1 trainer ranks and engines gave no answer within 2 s"):
        wait_sync([peer.receive_weights.remote(1)], timeout=2)
    assert time.monotonic() - started < 300  # the receiver sleeps 600 s
    ray.kill(peer)


def test_a_member_whose_collective_timed_out_is_a_stuck_peer_for_the_pool(ray_session):
    """Trainer rank 0's broadcast timing out (NCCL blocks on an engine that hangs) reaches the
    driver as GetTimeoutError, which the pool answers by replacing the hung engine and pushing
    again; before, it was the rank's TimeoutError, which ended the run."""
    from ray.exceptions import GetTimeoutError

    from posttrain.train.group import wait_sync

    @ray.remote(num_cpus=0)
    class Rank0:
        def sync_send(self, version):
            raise TimeoutError("weight sync: a bucket broadcast took more than 1 s (NCCL group aborted)")

    @ray.remote(num_cpus=0)
    class Stuck:
        def receive_weights(self, version):
            time.sleep(900)
            return version

    rank0, engine = Rank0.remote(), Stuck.remote()
    started = time.monotonic()
    with pytest.raises(
        GetTimeoutError, match="a collective timed out .*NCCL group aborted.*an engine or rank is stuck"
    ):
        wait_sync([rank0.sync_send.remote(1), engine.receive_weights.remote(1)], timeout=600)
    assert time.monotonic() - started < 300  # the grace for a peer's death (15 s), not the whole 600 s
    ray.kill(engine)
    ray.kill(rank0)


def test_a_rank_naming_the_engines_that_missed_a_call_makes_them_the_stuck_ones(ray_session):
    """Trainer rank 0 drives the engines' side of vLLM's transfer engine; the engines that
    missed a call's deadline, named by their index, reach the pool as EnginesTimedOut
    holding those engines (replaced), not as an anonymous timeout (every engine pinged)."""
    from posttrain.rollout.pool import EnginesTimedOut
    from posttrain.rollout.transfer import EngineCallTimeout
    from posttrain.train.group import wait_sync

    @ray.remote(num_cpus=0)
    class Rank0:
        def sync_send(self, version):
            raise EngineCallTimeout("weight sync: receiving a bucket: 1 of 2 engines gave no answer within 1 s", [1])

    rank0, engines = Rank0.remote(), ["engine-a", "engine-b"]
    with pytest.raises(EnginesTimedOut, match="receiving a bucket: 1 of 2 engines") as err:
        wait_sync([rank0.sync_send.remote(1)], timeout=60, named=engines)
    assert err.value.engines == ["engine-b"]
    ray.kill(rank0)


@pytest.mark.slow
@pytest.mark.system
def test_teachers_get_their_own_resources_and_at_most_max_resident(ray_session, tiny_dir):
    """vllm teachers used to start with the rollout engines' resources; now the pool's own."""
    from posttrain.mopd.teachers import TeacherPool

    rollout = RolloutConfig(max_model_len=128, kv_cache_gib=0.05, num_cpus=1)
    config = TeacherPoolConfig(backend="vllm", num_cpus=0.25, max_resident=1, memory_gib=100)
    pool = TeacherPool({"a": str(tiny_dir), "b": str(tiny_dir)}, config, "float32", rollout, max_logprobs=64)
    try:
        first = pool.logprobs({"a": [[1, 40, 41]]})["a"]
        actor = pool.resident["a"]
        assigned = ray.get(actor.__ray_call__.remote(lambda self: ray.get_runtime_context().get_assigned_resources()))
        assert assigned == {"CPU": 0.25}, assigned
        second = pool.logprobs({"b": [[1, 40, 41]]})["b"]
        assert list(pool.resident) == ["b"] and pool.stats["unloads"] == 1  # max_resident 1: a made room for b
        assert second[0] == pytest.approx(first[0], abs=1e-6)  # the same weights score the same
        # MOPD's distill_topk through vLLM's prompt_logprobs: the response positions' top-k
        # and the sampled tokens' logprobs, as transformers computes them
        import torch
        from transformers import AutoModelForCausalLM

        seq = [1, 40, 41, 42, 43, 44]
        logp, ids, values = pool.topk({"b": [(seq, 3)]}, 64)["b"][0]
        model = AutoModelForCausalLM.from_pretrained(tiny_dir).eval()
        with torch.no_grad():
            full = torch.log_softmax(model(torch.tensor([seq])).logits[0, 2:-1].float(), -1)
        top = full.topk(64, -1)
        assert ids.shape == values.shape == (3, 64)
        assert values == pytest.approx(top.values.numpy(), abs=1e-4)
        assert (ids[:, :8] == top.indices[:, :8].numpy()).all()  # the most likely ones, in order
        assert logp == pytest.approx(full.gather(-1, torch.tensor(seq[3:])[:, None])[:, 0].tolist(), abs=1e-4)
        with pytest.raises(ValueError, match="at most 64"):
            pool.topk({"b": [(seq, 3)]}, 65)
    finally:
        pool.close()


def serving_trained_weights(pool, group, seqs) -> None:
    """Every engine serves the trainer's current weights (logprobs agree) and version."""
    import numpy as np

    assert [info["version"] for info in ray.get([e.info.remote() for e in pool.engines], timeout=60)] == [
        group.version
    ] * len(pool.engines)
    trainer = group.logprobs(seqs)
    for engine in pool.engines:
        served = ray.get(engine.prompt_logprobs.remote([list(s.token_ids) for s in seqs]), timeout=120)
        diffs = [abs(a - b) for s, lt, le in zip(seqs, trainer, served) for a, b in zip(lt, le[s.prompt_len - 1 :])]
        assert float(np.mean(diffs)) < 1e-4


@pytest.mark.slow
@pytest.mark.system
def test_collective_push_replaces_a_dead_engine_and_pushes_again(ray_session, tiny_dir):
    from posttrain.config import TrainerConfig
    from posttrain.rollout.engine import RolloutEngine
    from posttrain.rollout.pool import EnginePool
    from posttrain.train.group import TrainerGroup
    from posttrain.train.spec import loss_spec
    from posttrain.types import GenerationRequest, SamplingSettings, TrainSequence

    rollout = RolloutConfig(max_model_len=128, kv_cache_gib=0.05, weight_sync="collective", sync_bucket_mib=0.25)

    def start(i):
        return RolloutEngine.remote_actor(str(tiny_dir), rollout, "float32", seed=i)

    pool = EnginePool([start(0), start(1)], start)
    group = TrainerGroup(TrainerConfig(workers=1, zero_stage=2), seed=0, rollout=rollout)
    pool.on_restart = lambda engine: group.sync_weights([engine])
    try:
        group.load(str(tiny_dir), "float32", lr=1e-2, warmup_steps=0)
        assert pool.on_every_engine(group.sync_weights)["sync/collective"] == 1.0
        (outs,) = ray.get(pool.engines[0].generate.remote([GenerationRequest((1, 40, 41), 4, 8)], SamplingSettings()))
        seqs = [
            TrainSequence((1, 40, 41) + c.token_ids, 3, (1.0,) * len(c.token_ids), (1.0,) * len(c.token_ids))
            for c in outs
        ]
        group.train_step(seqs, loss_spec("pg"))
        dead = pool.engines[1]
        ray.kill(dead)  # between pushes: the group it was in must be formed again without it
        pool.on_every_engine(group.sync_weights)
        # only the dead one is replaced: the push failed at its first bucket, before the live
        # engine's model was touched
        assert pool.restarts == 1 and pool.engines[1] is not dead
        serving_trained_weights(pool, group, seqs)
        # now during a push: 16 KiB buckets make it dozens of buckets, and the engine dies
        # among them; the push fails without hanging, the engine is replaced, the push repeated
        group.bucket_bytes, group.sync_members = 16 * 1024, None
        pool.on_every_engine(group.sync_weights)  # the group, formed for 16 KiB buckets
        started = time.monotonic()
        pool.on_every_engine(group.sync_weights)
        push_s = time.monotonic() - started  # how long one push of them takes
        group.train_step(seqs, loss_spec("pg"))
        dead = pool.engines[0]
        killer = threading.Timer(push_s / 3, lambda: ray.kill(dead))
        killer.start()
        started = time.monotonic()
        pool.on_every_engine(group.sync_weights)
        killer.join()
        # the dead engine is replaced, and so is the other one if its reload was cut short
        assert time.monotonic() - started < 400 and pool.restarts in (2, 3) and pool.engines[0] is not dead
        serving_trained_weights(pool, group, seqs)
    finally:
        group.shutdown()
        pool.shutdown()
