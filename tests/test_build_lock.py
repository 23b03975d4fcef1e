"""A torch extension build killed midway (DeepSpeed's CPU comm op, built in the trainer
ranks' `init_distributed`) leaves torch's bare lock file behind; without the guard every
later rank waits on it forever. The guard's kernel lock dies with its holder."""

import subprocess
import sys
import time
import warnings

import pytest

from posttrain.train.distributed import op_build_guard

HOLD = """
import sys, time
from pathlib import Path
from posttrain.train.distributed import op_build_guard
with op_build_guard("demo_op", Path(sys.argv[2])):
    print("held", flush=True)
    time.sleep(float(sys.argv[1]))
"""


@pytest.fixture
def ext_dir(tmp_path):
    """The op's build folder, passed to the guard (never set in this process's environment)."""
    return tmp_path / "demo_op"


def test_a_lock_left_by_a_killed_build_is_removed(ext_dir):
    ext_dir.mkdir(parents=True)
    (ext_dir / "lock").touch()  # what torch's FileBaton leaves when its builder is SIGKILLed
    with pytest.warns(UserWarning, match="killed before it finished"), op_build_guard("demo_op", ext_dir):
        assert not (ext_dir / "lock").exists()


def test_a_live_builder_is_waited_for_and_a_dead_one_is_not(ext_dir):
    holder = subprocess.Popen([sys.executable, "-c", HOLD, "1.5", str(ext_dir)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    (ext_dir / "lock").touch()  # the live builder's own torch lock: not to be touched while it builds
    started = time.perf_counter()
    with pytest.warns(UserWarning), op_build_guard("demo_op", ext_dir):
        waited = time.perf_counter() - started
    assert holder.wait(10) == 0 and waited > 0.5, waited

    killed = subprocess.Popen([sys.executable, "-c", HOLD, "60", str(ext_dir)], stdout=subprocess.PIPE, text=True)
    assert killed.stdout.readline().strip() == "held"
    killed.kill()
    killed.wait(10)
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no stale torch lock this time: nothing to warn about
        with op_build_guard("demo_op", ext_dir):
            pass
    assert time.perf_counter() - started < 30  # the dead holder's kernel lock went with it (held, 60 s)
