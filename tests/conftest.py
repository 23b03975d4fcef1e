import os
from pathlib import Path

import pytest

# The tests' environment is set here, once, at import (before any test starts Ray) and never
# changed by a test (tests/test_environment_untouched.py): setenv and unsetenv while Ray's native
# threads read the environment race with them (a worker crashed so), and a value one test set
# would reach whatever a later test starts. Tests pass the values they mean to code and to the
# processes they start instead. A caller's RAY_ADDRESS would send the tests' runs to that
# cluster: every test starts its own Ray.
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.pop("RAY_ADDRESS", None)

# Debian's chromium, which the browser-marked tests drive (POSTTRAIN_TEST_CHROMIUM: another path,
# for the test of the rule below).
CHROMIUM = Path(os.environ.get("POSTTRAIN_TEST_CHROMIUM", "/usr/bin/chromium"))


def in_ci() -> bool:
    """CI=true (or 1, yes): what GitHub Actions, GitLab CI and most other services set."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def pytest_runtest_setup(item):
    """A browser test without chromium skips on a developer's machine (installing it needs
    root), but fails in CI: a green CI run means the dashboard ran in a browser."""
    if "browser" in item.keywords and not CHROMIUM.exists():
        message = f"Debian's chromium is not installed at {CHROMIUM} (`make setup` as root installs it)"
        if in_ci():
            pytest.fail(f"{message}; in CI the browser tests must run, not skip", pytrace=False)
        pytest.skip(message)


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


# The longest files, longest first (from the suite's --durations): `make test` hands whole
# files to two xdist workers in collection order (--no-loadscope-reorder), so these go first and the short unit-test
# files fill the gaps instead of a long file running alone at the end.
LONG_FILES = (
    # make test-system's (their system tests are minutes each)
    "test_experts.py",
    "test_cluster.py",
    "test_byo_run.py",
    "test_overlap.py",
    "test_agent.py",
    "test_resume.py",
    "test_synthesis_run.py",
    # make test's
    "test_dashboard.py",
    "test_trainer_steps.py",
    "test_rewards_cli.py",
    "test_silent_traps.py",
    "test_stack.py",
    "test_optim.py",
    "test_pipelines_shipped.py",
    "test_pipeline.py",
    "test_judge_stage.py",
    "test_partial.py",
    "test_mopd.py",
    "test_gpupath.py",
    "test_rewards_audit.py",
    "test_answer_verifiers.py",
    "test_offpolicy_e2e.py",
    "test_reliability_train.py",
    "test_grm.py",
    "test_models.py",
    "test_verifiers.py",
    "test_bf16.py",
    "test_reward_hacks.py",
    "test_reward_voids.py",
    "test_dashboard_scale.py",
    "test_sandbox.py",
    # over a minute each in a fresh clone's make test (2026-12-06), left to alphabetical order
    # before: test_weight_transfer.py then ran among the last files
    "test_weight_transfer.py",
    "test_multinode_trainer.py",
    "test_reload.py",
    "test_stage_slots.py",
    "test_gpu_check_rehearsal.py",
    "test_memory_plan.py",
    "test_judge_quality.py",
    "test_minibatch_inputs.py",
    "test_export.py",
    "test_rendezvous_port.py",
    "test_answer_forms_more.py",
)


def pytest_collection_modifyitems(config, items):
    first_seen = {}
    for index, item in enumerate(items):
        first_seen.setdefault(item.path.name, index)
    rank = {name: i for i, name in enumerate(LONG_FILES)}
    items.sort(key=lambda item: (rank.get(item.path.name, len(LONG_FILES)), first_seen[item.path.name]))
    if _has_cuda():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def ray_session():
    """One real local Ray for the whole session (4 logical CPUs on 2 cores: actors mostly wait)."""
    import ray

    from posttrain.runtime.infra import QUIET_ENV

    ray.init(
        num_cpus=6,
        include_dashboard=False,
        object_store_memory=512 * 2**20,
        log_to_driver=False,
        runtime_env={"env_vars": {k: v for k, v in QUIET_ENV.items() if v}},
    )
    yield ray
    ray.shutdown()


_CHECKED_RUNS: set[Path] = set()


@pytest.fixture(autouse=True, scope="module")
def runs_keep_their_books(tmp_path_factory):
    """Every run a test module made (RL, expert and MOPD stages alike) is checked, after the
    module, by the independent reader of its rollouts file (tests/sample_accounting.py): the
    queue's own check, run before each metrics row, cannot fail a test by itself."""
    yield
    from sample_accounting import check_runs_under

    failures = check_runs_under(tmp_path_factory.getbasetemp(), _CHECKED_RUNS)
    assert not failures, "sample accounting broken:\n" + "\n".join(failures)


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    from posttrain.config import TinyModelConfig
    from posttrain.models import build_tiny

    return build_tiny(TinyModelConfig(), seed=0, target=tmp_path_factory.mktemp("models") / "tiny")


# xdist: a crashed worker never hangs the run; the test it died in fails (tests/xdist_scheduling.py)
from xdist_scheduling import (  # noqa: E402, F401
    pytest_configure,
    pytest_handlecrashitem,
    pytest_report_teststatus,
    pytest_unconfigure,
    pytest_xdist_make_scheduler,
)
