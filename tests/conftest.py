import os

import pytest

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
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


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    from posttrain.config import TinyModelConfig
    from posttrain.models import build_tiny

    return build_tiny(TinyModelConfig(), seed=0, target=tmp_path_factory.mktemp("models") / "tiny")
