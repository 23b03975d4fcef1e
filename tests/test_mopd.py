"""MOPD: the advantage by hand, the teacher pool's memory budget, routing of each sample to
its own teacher, the reverse KL falling, and the manifest, on tiny models with the real
engine, trainer and teacher workers."""

import json
import math
import shutil

import numpy as np
import pytest
import ray
from sample_accounting import assert_accounting_matches_rollouts

from posttrain.config import MOPDStage, TeacherPoolConfig
from posttrain.mopd.advantage import mopd_advantages, reverse_kl


def test_advantage_on_hand_computed_values():
    lt, ls, mask = [-0.5, -2.0, -1.0, -0.1], [-1.0, -1.0, -3.0, -0.2], [1, 1, 0, 1]
    assert mopd_advantages(lt, ls, mask) == pytest.approx([0.5, -1.0, 0.0, 0.1])
    assert mopd_advantages(lt, ls, mask, outcome_advantage=-2.0, alpha=0.25) == pytest.approx([0.0, -1.5, 0.0, -0.4])
    assert reverse_kl(lt, ls, mask) == (pytest.approx(-0.5 + 1.0 - 0.1), 3)
    with pytest.raises(ValueError, match="lengths differ"):
        mopd_advantages([0.0], [0.0, 1.0], [1, 1])


def test_topk_kl_on_hand_computed_values():
    """Uniform student over 4 tokens, teacher 1/2 on tokens 0 and 1: KL = log 2, gradient
    (Q p_v - q_v) / T = -1/4 on the teacher's tokens and +1/4 off them. A padding entry
    (zero mass) changes nothing; a top-k short of the vocabulary matches the reference
    computed through torch's own log_softmax, value and gradient."""
    import torch

    from posttrain.algo.losses import topk_forward_kl
    from posttrain.train.batching import NO_MASS

    logits = torch.zeros(1, 4, requires_grad=True)
    half = math.log(0.5)
    ids, logp = torch.tensor([[0, 1, 0]]), torch.tensor([[half, half, NO_MASS]])
    kl = topk_forward_kl(logits, ids, logp)
    kl.sum().backward()
    assert kl.item() == pytest.approx(math.log(2), abs=1e-6)
    assert logits.grad.tolist() == [pytest.approx([-0.25, -0.25, 0.25, 0.25], abs=1e-6)]
    torch.manual_seed(0)
    teacher = torch.log_softmax(torch.randn(3, 5, 11), -1)
    weights = torch.randn(3, 5)
    for k in (11, 4):
        values, top = teacher.topk(k, -1)
        a = torch.randn(3, 5, 11, requires_grad=True)
        b = a.detach().clone().requires_grad_()
        ours = topk_forward_kl(a, top, values, temperature=0.7)
        ref = (values.exp() * (values - torch.log_softmax(b / 0.7, -1).gather(-1, top))).sum(-1)
        (ours * weights).sum().backward()
        (ref * weights).sum().backward()
        assert torch.allclose(ours.detach(), ref.detach(), atol=1e-5)
        assert torch.allclose(a.grad, b.grad, atol=1e-6)
    full = (teacher.exp() * (teacher - torch.log_softmax(a.detach() / 0.7, -1))).sum(-1)
    exact = topk_forward_kl(a.detach(), *reversed(teacher.topk(11, -1)), 0.7)
    assert torch.allclose(exact, full, atol=1e-5)  # k = vocabulary: the exact KL(teacher || student)


def test_config_rejects_unknown_domains_duplicate_cells_and_other_temperatures():
    base = dict(
        name="m",
        type="mopd",
        lr=1e-4,
        steps=1,
        domains={"general": {"type": "reasoning_gym", "families": [{"name": "basic_arithmetic"}]}},
        teachers=[{"domain": "general", "effort": "max", "checkpoint": "/x"}],
    )
    MOPDStage(**base)
    with pytest.raises(ValueError, match="unknown domain 'coding'"):
        MOPDStage(**{**base, "teachers": [{"domain": "coding", "effort": "max", "checkpoint": "/x"}]})
    with pytest.raises(ValueError, match="second teacher for cell general-max"):
        MOPDStage(**{**base, "teachers": base["teachers"] * 2})
    with pytest.raises(ValueError, match="temperature and top_p must be 1.0"):
        MOPDStage(**{**base, "temperature": 0.7})
    with pytest.raises(ValueError, match="nucleus truncation biases"):
        MOPDStage(**{**base, "top_p": 0.9})


def make_teacher(base_dir, target, answers: list[str], steps: int = 80):
    """The tiny model fine-tuned (in process, plain torch) to reply one of `answers` (in
    turn) to any arithmetic prompt: with one answer, a teacher with its own strong
    preference; with several, a student that knows them all. Same tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from posttrain.config import ReasoningGymTasks
    from posttrain.data.chat import render_prompt, render_response, with_effort
    from posttrain.data.tasks import load_tasks

    shutil.copytree(base_dir, target)
    tok = AutoTokenizer.from_pretrained(base_dir)
    model = AutoModelForCausalLM.from_pretrained(base_dir)
    tasks = load_tasks(ReasoningGymTasks(families=[{"name": "basic_arithmetic"}], size=16, seed=99))
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    torch.manual_seed(0)
    for step in range(steps):
        task = tasks[step % len(tasks)]
        prompt = render_prompt(tok, with_effort(task.messages, ("low", "high", "max")[step % 3]))
        ids = torch.tensor([prompt + render_response(tok, answers[step % len(answers)])])
        logits = model(ids).logits[0, len(prompt) - 1 : -1]
        loss = torch.nn.functional.cross_entropy(logits, ids[0, len(prompt) :])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.save_pretrained(target, safe_serialization=True)
    return target


@pytest.fixture(scope="module")
def teachers(tiny_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("teachers")
    return {
        f"general-{effort}": str(make_teacher(tiny_dir, root / effort, [answer]))
        for effort, answer in (("max", "77"), ("low", "7"), ("high", "5"))
    }


@pytest.fixture(scope="module")
def student(tiny_dir, tmp_path_factory):
    """Answers 7 or 12 whatever the effort: MOPD must teach it which cell wants which."""
    return make_teacher(tiny_dir, tmp_path_factory.mktemp("student") / "s", ["7", "12"], steps=150)


def direct_logprobs(folder, seqs):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    out = []
    with torch.no_grad():
        for ids in seqs:
            logp = torch.log_softmax(model(torch.tensor([ids])).logits[0, :-1], -1)
            out.append(logp.gather(-1, torch.tensor(ids[1:])[:, None])[:, 0].tolist())
    return out


def flat(rows):
    return [x for row in rows for x in row]


@pytest.mark.system
def test_teacher_pool_respects_its_memory_budget(ray_session, teachers):
    from posttrain.mopd.teachers import GIB, TeacherPool

    probe = TeacherPool({"general-max": teachers["general-max"]}, TeacherPoolConfig(memory_gib=8), "float32")
    probe.logprobs({"general-max": [[1, 2, 3]]})
    one = probe.measured_bytes()  # one teacher in its worker process, as really measured
    weights = probe.weights["general-max"]
    probe.close()
    # The teachers share one process: three resident cost one runtime, not three.
    together = TeacherPool(teachers, TeacherPoolConfig(memory_gib=8), "float32")
    together.logprobs({tid: [[1, 2, 3]] for tid in teachers})
    assert len(together.resident) == 3 and together.measured_bytes() < 1.5 * one
    together.close()
    # Room for two teachers, not three: a runtime (what was measured, plus room for the
    # activations) and 2.5 teachers' weights.
    overhead = one - weights + GIB // 4
    budget_gib = (overhead + 2.5 * weights) / GIB
    pool = TeacherPool(teachers, TeacherPoolConfig(memory_gib=budget_gib, overhead_gib=overhead / GIB), "float32")
    seqs = [[1, 40, 41, 42], [1, 50]]
    seen_resident = []
    for tid in ["general-max", "general-low", "general-high", "general-max", "general-low"]:
        out = pool.logprobs({tid: seqs})
        assert flat(out[tid]) == pytest.approx(flat(direct_logprobs(teachers[tid], seqs)), abs=1e-5)
        seen_resident.append(len(pool.resident))
        assert pool.resident_bytes <= pool.budget
        assert pool.measured_bytes() <= pool.budget  # what the process really holds, too
    assert max(seen_resident) == 2
    assert pool.stats["loads"] == 5 and pool.stats["unloads"] == 3  # LRU: max and low were evicted in turn
    assert pool.metrics()["teacher_pool/peak_gib"] <= budget_gib
    pool.close()
    with pytest.raises(ValueError, match="more than teacher_pool.memory_gib"):
        TeacherPool(teachers, TeacherPoolConfig(memory_gib=0.001, overhead_gib=0.0), "float32")


@pytest.fixture(scope="module")
def mopd_run(ray_session, student, teachers, tmp_path_factory):
    from transformers import AutoTokenizer

    from posttrain.config import PipelineConfig, RolloutConfig, TrainerConfig
    from posttrain.mopd.teachers import TeacherPool
    from posttrain.records.metrics import MetricsLog
    from posttrain.rollout.engine import RolloutEngine
    from posttrain.rollout.pool import EnginePool
    from posttrain.runtime.infra import Infra
    from posttrain.stages.mopd import MOPDRun, teacher_checkpoints
    from posttrain.train.group import TrainerGroup

    stage = MOPDStage(
        name="mopd",
        type="mopd",
        lr=2e-3,
        steps=40,
        prompts_per_step=8,
        group_size=4,
        max_tokens=8,
        domains={"general": {"type": "reasoning_gym", "families": [{"name": "basic_arithmetic"}], "size": 40}},
        teachers=[{"domain": "general", "effort": e, "checkpoint": teachers[f"general-{e}"]} for e in ("max", "low")],
        effort_max_tokens={"low": 4},
        distill_topk=512,  # the tiny model's whole vocabulary: the exact KL
    )
    config = PipelineConfig(
        model={"name": "tiny"},
        rollout=RolloutConfig(max_model_len=128),
        trainer=TrainerConfig(workers=2, micro_batch_tokens=512),
        stages=[stage],
    )
    run_dir = tmp_path_factory.mktemp("mopd")
    trainers = TrainerGroup(config.trainer, seed=0)
    trainers.load(str(student), "float32", lr=stage.lr, warmup_steps=0)
    pool = EnginePool([RolloutEngine.remote_actor(str(student), config.rollout, "float32", 0)], None)
    trainers.sync_weights(pool.engines)
    teacher_pool = TeacherPool(teacher_checkpoints(stage, student), stage.teacher_pool, "float32", max_logprobs=512)
    infra = Infra(config, run_dir, trainers, pool, MetricsLog(run_dir), AutoTokenizer.from_pretrained(student))
    run = MOPDRun(stage, infra, teacher_pool)
    yield run
    teacher_pool.close()
    pool.shutdown()
    trainers.shutdown()


def test_every_sample_is_scored_by_its_own_teacher(mopd_run, teachers):
    from posttrain.stages.mopd import MOPDRun

    # a run of its own on the same engines, trainers and teachers: what it draws and inspects
    # never enters the books of the run that the next test trains and checks
    run = MOPDRun(mopd_run.stage, mopd_run.infra, mopd_run.teachers)
    groups, _ = run.iterate(run.infra.trainers.version, None)
    run.prepare(groups)
    cells = {g.task.entry["cell"] for g in groups}
    assert cells == {"general-max", "general-low"}  # round-robin: both cells in every batch
    for group in groups:
        own = group.task.entry["cell"]
        assert "Reasoning effort: " + own.split("-")[1] in group.task.messages[0].content
        trajs = [t for t in group.trajectories if t.response_ids]
        seqs = [list(t.prompt_ids) + t.response_ids for t in trajs]
        for tid, folder in teachers.items():
            if tid not in cells:
                continue
            direct = [lp[len(lp) - len(t.response_ids) :] for t, lp in zip(trajs, direct_logprobs(folder, seqs))]
            used = [run.logp_teacher[t.traj_id] for t in trajs]
            close = all(math.isclose(a, b, abs_tol=1e-4) for d, u in zip(direct, used) for a, b in zip(d, u))
            assert close == (tid == own), (own, tid)
        for t in trajs:  # the teacher's whole next-token distribution at each response position
            top = run.teacher_of(t)
            assert top.ids.shape == (len(t.response_ids), 512)
            assert np.exp(top.logp).sum(-1) == pytest.approx(np.ones(len(t.response_ids)), abs=1e-4)
            assert (np.diff(top.logp, axis=-1) <= 0).all()  # most likely first
            at_sampled = [row[ids == tok][0] for row, ids, tok in zip(top.logp, top.ids, t.response_ids)]
            assert at_sampled == pytest.approx(run.logp_teacher[t.traj_id], abs=1e-5)
        if own == "general-low":
            assert all(len(t.response_ids) <= 4 for t in trajs)  # the effort's token limit


def test_reverse_kl_falls_and_the_manifest_is_written(mopd_run, teachers):
    run = mopd_run
    run.run()
    rows = [json.loads(line) for line in (run.infra.run_dir / "metrics.jsonl").read_text().splitlines()]
    kl = [r["mopd/reverse_kl"] for r in rows]
    assert len(kl) == 40 and all(f"mopd/reverse_kl/{c}" in rows[-1] for c in ("general-max", "general-low"))
    first, last = sum(kl[:3]) / 3, sum(kl[-10:]) / 10  # per-step estimates from 32 samples: noisy
    assert last < 0.65 * first, [round(k, 2) for k in kl]
    assert {"reward/general-max", "response_tokens/low", "teacher_pool/loads"} <= set(rows[-1])
    distill = [r["loss/distill_kl"] for r in rows]  # the exact KL(teacher || student) per token
    assert sum(distill[-10:]) / 10 < 0.5 * sum(distill[:3]) / 3, [round(k, 2) for k in distill]
    assert_accounting_matches_rollouts(run.infra.run_dir, "mopd", group_size=4)  # read from the rollouts file
    assert all(r["mopd/topk_mass"] == pytest.approx(1.0, abs=1e-4) for r in rows)  # k = vocabulary
    folder = run.save(run.infra.run_dir / "checkpoints" / "mopd" / "final")
    manifest = json.loads((run.infra.run_dir / "checkpoints/mopd/final/mopd_manifest.json").read_text())
    assert folder.endswith("final")
    assert [(t["teacher_id"], t["domain"], t["effort"]) for t in manifest["teachers"]] == [
        ("general-max", "general", "max"),
        ("general-low", "general", "low"),
    ]
    from posttrain.mopd.teachers import weights_sha256

    assert manifest["teachers"][0]["sha256"] == weights_sha256(teachers["general-max"])
    assert ray.get(run.infra.pool.engines[0].info.remote())["version"] == run.infra.trainers.version
