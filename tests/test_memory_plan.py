"""The memory plan (posttrain/runtime/memory.py): shapes read from config.json alone, the
shipped cluster template planned for an 8B model (it fits; 4x its micro-batch does not,
and the refusal names the part), the defects it must refuse before a cluster is reserved,
and the dry run and validate printing it."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from posttrain.config import ModelConfig, TrainerConfig
from posttrain.config.files import validate_pipeline
from posttrain.runtime.memory import SMOLLM2, ModelShape, activation_bytes, plan_lines, shape_of, trainer_memory

ROOT = Path(__file__).resolve().parents[1]
# Llama-3-8B's shape: what the cluster template is written for
LLAMA_8B = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
    "tie_word_embeddings": False, "head_dim": 128,
}  # fmt: skip


@pytest.fixture()
def model_8b(tmp_path):
    folder = tmp_path / "llama-8b"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(LLAMA_8B))
    return folder


def _cli(*args, env_extra=None):
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"} | (env_extra or {})
    return subprocess.run(
        [sys.executable, "-m", "posttrain.cli", *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300
    )


def test_the_shape_gives_the_real_parameter_count(tiny_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    shape, _ = shape_of(str(tiny_dir), ModelConfig(name="tiny"))
    assert shape.params == sum(p.numel() for p in model.parameters())
    from posttrain.models import convert_smollm2, parameter_count

    assert SMOLLM2.params == parameter_count(convert_smollm2())
    assert ModelShape.from_hf(LLAMA_8B).params == 8_030_261_248  # Llama-3-8B's published count


def test_activations_match_what_autograd_saves_in_a_real_block():
    """The activation term against the tensors a transformers Llama block really saves for
    backward (saved-tensor hooks), fp32 and bf16, within 5 %."""
    import torch
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaForCausalLM

    cfg = LlamaConfig(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                      intermediate_size=704, vocab_size=512, head_dim=64)  # fmt: skip
    shape = ModelShape(256, 4, 4, 2, 64, 704, 512, False)
    for dtype, b in ((torch.float32, 4), (torch.bfloat16, 2)):
        model = LlamaForCausalLM(cfg).to(dtype)
        params = {p.untyped_storage().data_ptr() for p in model.parameters()}
        seen = {}

        def pack(t):
            seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            model.model(input_ids=torch.randint(0, 512, (2, 128)), use_cache=False)
        saved = sum(n for ptr, n in seen.items() if ptr not in params)
        planned = shape.layers * activation_bytes(shape, 256, b)
        assert abs(planned / saved - 1) < 0.05, (dtype, planned, saved)


def test_the_cluster_template_fits_an_8b_model_and_4x_its_micro_batch_is_refused(model_8b):
    env = {"POSTTRAIN_MODEL_DIR": str(model_8b), "POSTTRAIN_JUDGE_DIR": str(model_8b)}
    ok = _cli("run", "pipelines/cluster-8gpu.yaml", "--dry-run", env_extra=env)
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert "memory plan" in ok.stdout and "8.03B parameters" in ok.stdout and "80.0 GiB per GPU" in ok.stdout
    ranks = [line for line in ok.stdout.splitlines() if line.strip().startswith("trainer rank")]
    assert ranks and all("of 80.0 GiB" in line for line in ranks)
    for line in ranks:  # at least a 10 % margin
        share = int(line.split("GiB (")[1].split("%")[0])
        assert share <= 90, line
    big = _cli(
        "run", "pipelines/cluster-8gpu.yaml", "--dry-run", "-o", "trainer.micro_batch_tokens=65536", env_extra=env
    )
    assert big.returncode == 2
    last = big.stderr.strip().splitlines()[-1]
    assert "does not fit" in last and "activations" in last and "grow with the micro-batch" in last, last
    suggested = int(last.split("trainer.micro_batch_tokens: ")[1].split()[0])  # a setting the plan found to fit
    assert suggested < 65536
    fits = _cli("run", "pipelines/cluster-8gpu.yaml", "--dry-run", "-o", f"trainer.micro_batch_tokens={suggested}",
                env_extra=env)  # fmt: skip
    assert fits.returncode == 0, fits.stderr[-1000:]
    no_ckpt = _cli(
        "run", "pipelines/cluster-8gpu.yaml", "--dry-run", "-o", "trainer.gradient_checkpointing=false", env_extra=env
    )
    assert no_ckpt.returncode == 2
    assert "activations" in no_ckpt.stderr and "trainer.gradient_checkpointing: true fits" in no_ckpt.stderr


def test_run_and_validate_refuse_a_plan_that_does_not_fit_before_starting(model_8b, tmp_path):
    env = {"POSTTRAIN_MODEL_DIR": str(model_8b), "POSTTRAIN_JUDGE_DIR": str(model_8b)}
    args = ("pipelines/cluster-8gpu.yaml", "-o", "trainer.gradient_checkpointing=false")
    validate = _cli("validate", *args, env_extra=env)
    assert validate.returncode == 2 and "memory plan:" in validate.stderr
    run = _cli("run", *args, "--run-dir", str(tmp_path / "run"), env_extra=env)
    assert run.returncode == 2 and "memory plan:" in run.stderr
    assert not (tmp_path / "run").exists()  # refused before the run folder was made


def test_validate_prints_the_plan_as_yaml_comments(model_8b):
    import yaml

    env = {"POSTTRAIN_MODEL_DIR": str(model_8b), "POSTTRAIN_JUDGE_DIR": str(model_8b)}
    out = _cli("validate", "pipelines/cluster-8gpu.yaml", env_extra=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "# memory plan" in out.stdout and "#     trainer rank" in out.stdout
    assert yaml.safe_load(out.stdout)["name"] == "cluster-8gpu"  # still the resolved YAML


def _config(**top):
    base = {
        "name": "t",
        "model": {"name": "tiny"},
        "stages": [
            {
                "name": "rl",
                "type": "rl",
                "steps": 1,
                "lr": 1e-4,
                "tasks": {"type": "reasoning_gym", "families": [{"name": "basic_arithmetic"}], "size": 4},
            }
        ],  # fmt: skip
    }
    return validate_pipeline({**base, **top})


def test_fractional_trainer_gpus_with_several_ranks_are_refused():
    with pytest.raises(ValueError, match="Duplicate GPU"):
        TrainerConfig(workers=2, num_gpus=0.5)
    TrainerConfig(workers=1, num_gpus=0.5)  # one rank on a share of a GPU is fine
    TrainerConfig(workers=4, num_gpus=1)


def test_an_engine_asking_for_more_than_its_share_of_a_gpu_is_refused():
    config = _config(ray={"gpu_memory_gib": 80}, rollout={"num_gpus": 0.5, "gpu_memory_utilization": 0.6})
    _, problems = plan_lines(config)
    assert any("gpu_memory_utilization 0.6 is more than its num_gpus 0.5" in p for p in problems), problems


def test_an_engine_whose_kv_cache_cannot_hold_one_sequence_is_refused(model_8b):
    config = _config(
        model={"name": str(model_8b), "dtype": "bfloat16"},
        ray={"gpu_memory_gib": 80},
        rollout={"num_gpus": 1, "gpu_memory_utilization": 0.2, "max_model_len": 8192},
        trainer={"workers": 4, "num_gpus": 1, "zero_stage": 3, "gradient_checkpointing": True},
    )
    _, problems = plan_lines(config)
    assert any("KV cache cannot hold one sequence" in p and "gpu_memory_utilization" in p for p in problems), problems
    roomy = config.model_copy(update={"rollout": config.rollout.model_copy(update={"gpu_memory_utilization": 0.9})})
    assert not plan_lines(roomy)[1]


def test_zero_3_and_more_ranks_shrink_what_a_rank_holds():
    trainer = TrainerConfig(workers=1, zero_stage=2)
    one = trainer_memory(SMOLLM2, trainer, "bfloat16", 4096, 512, 64, False, 256)
    eight = trainer_memory(SMOLLM2, trainer.model_copy(update={"workers": 8}), "bfloat16", 4096, 512, 64, False, 256)
    z3 = trainer_memory(SMOLLM2, trainer.model_copy(update={"workers": 8, "zero_stage": 3}), "bfloat16", 4096, 512, 64,
                        False, 256)  # fmt: skip
    assert eight.between["optimizer state"] == one.between["optimizer state"] / 8
    assert z3.between["weights"] == eight.between["weights"] / 8
    ckpt = trainer_memory(SMOLLM2, trainer.model_copy(update={"gradient_checkpointing": True}), "bfloat16", 4096, 512,
                          64, False, 256)  # fmt: skip
    assert ckpt.phases["forward and backward"]["activations"] < one.phases["forward and backward"]["activations"] / 5
    kl = trainer_memory(SMOLLM2, trainer, "bfloat16", 4096, 512, 64, True, 256)
    assert kl.between["reference model"] == 2 * SMOLLM2.params
    kl3 = trainer_memory(SMOLLM2, trainer.model_copy(update={"workers": 8, "zero_stage": 3}), "bfloat16", 4096, 512,
                         64, True, 256)  # fmt: skip
    assert kl3.between["reference model"] == 2 * SMOLLM2.params / 8  # partitioned like the policy


def test_a_cpu_pipeline_is_planned_on_the_host_and_never_refused():
    lines, problems = plan_lines(_config())
    assert not problems
    text = "\n".join(lines)
    assert "GPU memory: unknown" in text and "(host)" in text and "trainer rank" in text


def test_a_model_without_config_json_is_not_planned(tmp_path):
    shape, why = shape_of(str(tmp_path), ModelConfig(name="tiny"))
    assert shape is None and "no config.json" in why


def test_the_plan_holds_against_a_measured_peak_of_a_real_trainer_step(tmp_path):
    """One case of bench/memory_plan.py in the default tier: a real DeepSpeed rank (ZeRO-2,
    fp32, a 6-layer model, a 4k-token micro-batch) steps once in a fresh process, and its
    measured peak (VmHWM above the loaded baseline) is set against the plan's. Memory, not
    speed: the figures do not depend on the machine's load."""
    out = tmp_path / "plan.json"
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run(
        [sys.executable, "bench/memory_plan.py", "--only", "tiny-fp32-z2-4k", "--json", str(out)],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (row,) = json.loads(out.read_text())
    ratio = row["plan"]["peak_mib"] / row["measured"]["peak_mib"]
    assert 0.8 <= ratio <= 1.25, row  # the bench's target: within 20 % of the measured peak
