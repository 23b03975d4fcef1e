"""The docs site builds with --strict (a broken link, a bad anchor or a page missing from the
nav fails), and every relative link of the README and the docs resolves to a file."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_the_site_builds_strict(tmp_path):
    mkdocs = Path(sys.executable).with_name("mkdocs")
    result = subprocess.run(
        [str(mkdocs), "build", "--strict", "-q", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    reference = (tmp_path / "site" / "reference" / "config" / "index.html").read_text()
    assert "micro_batch_tokens" in reference and "clip_eps_lo" in reference


def _relative_links(markdown: Path) -> list[str]:
    links = [m.group(1) for m in LINK.finditer(markdown.read_text())]
    return [link for link in links if not re.match(r"[a-z]+:", link) and not link.startswith("#")]


def test_every_readme_and_docs_link_resolves():
    pages = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.md"))]
    broken = []
    for page in pages:
        for link in _relative_links(page):
            target = (page.parent / link.split("#")[0]).resolve()
            generated = target == (ROOT / "docs" / "reference" / "config.md").resolve()
            if not target.exists() and not generated:
                broken.append(f"{page.relative_to(ROOT)} -> {link}")
    assert not broken, broken


def test_the_readme_is_a_front_page():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 200
