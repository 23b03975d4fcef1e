"""The task pages of the docs (Bring a dataset, Write an environment, Add a stage type), run
as a newcomer would: every file the page says to save is saved as written, in an empty
folder, and every `$ posttrain ...` command it shows is run there; each output line the
page shows must be in what the command printed, and each command must exit as the page
says. A page whose code drifts from the code base fails here."""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file

ROOT = Path(__file__).resolve().parents[1]
SAVED = re.compile(r"Save it as\s+`([^`]+)`:\n\n```\w+\n(.*?)```", re.S)
CONSOLE = re.compile(r"```console\n(.*?)```", re.S)


def saved_files(page: str) -> dict[str, str]:
    return dict(SAVED.findall(page))


def commands(page: str) -> list[tuple[str, list[str]]]:
    """(command, the output lines shown under it), in the page's order."""
    out: list[tuple[str, list[str]]] = []
    for block in CONSOLE.findall(page):
        for line in block.splitlines():
            if line.startswith("$ "):
                out.append((line[2:], []))
            elif line.strip():
                out[-1][1].append(line.strip())
    return out


def run_page(name: str, folder: Path, exits: list[int]) -> list[str]:
    """Save the page's files in `folder`, run its commands there; their outputs."""
    page = (ROOT / "docs" / name).read_text()
    for file, text in saved_files(page).items():
        (folder / file).write_text(text)
    shown = commands(page)
    assert [c for c, _ in shown] and len(shown) == len(exits), [c for c, _ in shown]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PYTHONPATH"] = str(ROOT)  # this checkout's posttrain; the folder itself is found as the CLI finds it
    outputs = []
    for (command, lines), code in zip(shown, exits):
        argv = shlex.split(command)
        assert argv[0] == "posttrain", command
        done = subprocess.run(
            [sys.executable, "-m", "posttrain.cli", *argv[1:]],
            cwd=folder, env=env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        printed = done.stdout + done.stderr
        assert done.returncode == code, f"{command}: exit {done.returncode}\n{printed[-3000:]}"
        for line in lines:
            assert line in printed, f"{name}: `{command}` did not print {line!r}:\n{printed[-3000:]}"
        outputs.append(printed)
    return outputs


def test_the_pages_are_in_the_site_and_link_the_reference():
    nav = (ROOT / "mkdocs.yml").read_text()
    for name in ("bring-a-dataset.md", "write-an-environment.md", "add-a-stage-type.md", "add-a-verifier.md"):
        assert name in nav
    from posttrain.config.reference import markdown

    anchors = {m.lower() for m in re.findall(r"^## (\w+)$", markdown(), re.M)}
    for name in ("bring-a-dataset.md", "write-an-environment.md", "add-a-stage-type.md"):
        links = re.findall(r"reference/config\.md#(\w+)", (ROOT / "docs" / name).read_text())
        assert links and set(links) <= anchors, (name, set(links) - anchors)


def test_the_pages_parse_as_the_test_reads_them():
    page = (ROOT / "docs" / "bring-a-dataset.md").read_text()
    files = {"sums.jsonl", "my.yaml", "worked.jsonl", "worked.yaml", "row.json", "good.txt", "bad.txt"}
    assert set(saved_files(page)) == files
    assert [c for c, _ in commands(page)][0] == "posttrain validate my.yaml"


def test_bring_a_dataset(tmp_path):
    run_page("bring-a-dataset.md", tmp_path, [0, 2, 0, 0])


def test_write_an_environment(tmp_path):
    run_page("write-an-environment.md", tmp_path, [0, 2])


@pytest.mark.timeout(900)
def test_add_a_stage_type(tmp_path):
    run_page("add-a-stage-type.md", tmp_path, [0, 0, 2])
    ckpt = tmp_path / "runs" / "soup" / "checkpoints"
    a, b, soup = (load_file(ckpt / n / "final" / "model.safetensors") for n in ("a", "b", "soup"))
    assert set(soup) == set(a)
    moved = [k for k in a if not a[k].equal(b[k])]
    assert moved  # the two SFT stages trained apart, so the mean is not either of them
    for key in a:
        assert soup[key].allclose((a[key] + b[key]) / 2, atol=1e-6), key


def test_median_sentence_is_short():
    """The task pages are written in short sentences (prose only: code and tables left out)."""
    lengths = []
    for name in ("bring-a-dataset.md", "write-an-environment.md", "add-a-stage-type.md", "add-a-verifier.md"):
        text = re.sub(r"```.*?```", "", (ROOT / "docs" / name).read_text(), flags=re.S)
        prose = " ".join(line for line in text.splitlines() if line and not line.startswith(("#", "|")))
        lengths += [len(s.split()) for s in re.split(r"(?<=[.!?])\s+", prose) if len(s.split()) > 2]
    lengths.sort()
    assert lengths[len(lengths) // 2] <= 18, lengths[len(lengths) // 2]
