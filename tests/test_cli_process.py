"""The tests' way of starting a run (tests/cli_process.py) reads its output as it comes: a
run that prints more than a pipe holds, while its test waits on a checkpoint without reading,
must not block."""

import subprocess
import sys
import time

from cli_process import CliProcess

PRINTS = "import sys\nfor i in range(4000): print('x' * 60, i)\nprint('done')"  # about 260 KiB


def test_a_process_that_prints_more_than_a_pipe_holds_exits_without_being_read():
    proc = CliProcess([sys.executable, "-c", PRINTS], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.wait(timeout=60) == 0  # a bare pipe blocks the child at 64 KiB: this wait would time out
    out, _ = proc.communicate()
    assert out.count("\n") == 4001 and out.endswith("done\n")


def test_output_so_far_is_readable_before_the_exit():
    code = "import time\nprint('first', flush=True)\ntime.sleep(30)"
    proc = CliProcess([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        for _ in range(200):
            if proc.output():
                break
            time.sleep(0.05)
        assert proc.output() == "first\n" and proc.poll() is None
    finally:
        proc.kill()
        proc.communicate()
