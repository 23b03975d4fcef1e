"""`posttrain --version`: what a bug report needs (the commit, the libraries' versions)."""

import pytest


def test_version_names_the_commit_and_the_libraries(capsys):
    from posttrain import __version__
    from posttrain.cli import main

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    first, libraries = capsys.readouterr().out.strip().splitlines()
    assert first.startswith(f"posttrain {__version__}")
    for name in ("torch", "vllm", "deepspeed", "ray", "transformers"):
        assert f"{name} " in libraries and f"{name} not installed" not in libraries
