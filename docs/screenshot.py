"""Screenshots of `posttrain dashboard` for the README, taken by Playwright in Debian's
chromium from a real run folder:

    python docs/screenshot.py runs/quickstart docs/ [JOB]

writes dashboard-pipeline.png (stages and the expert grid), dashboard-job.png (every plot of
JOB, by default experts/general-max), dashboard-health.png (the health flags),
dashboard-eval.png (the eval heatmaps) and dashboard-rewards.png (the reward debugger with
the first GRM sample that has a rubric)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import quote

ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def main(run_dir: str, out: str, job: str = "experts/general-max") -> None:
    from playwright.sync_api import sync_playwright

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "posttrain.cli", "dashboard", run_dir, "--port", str(port)])
    url = f"http://127.0.0.1:{port}/"
    stage, _, name = job.partition("/")
    views = [  # name, view, whole page (the job view: its first rows of plots, the curated ones)
        ("pipeline", "pipeline", True),
        ("job", f"job?stage={quote(stage)}&job={quote(name)}&runs=0", False),
        ("health", "health", True),
        ("eval", "eval", True),
    ]
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(url, timeout=2)
                break
            except OSError:
                time.sleep(0.3)
        board = Path(run_dir) / "scoreboard.jsonl"
        judged = [e for e in map(json.loads, board.read_text().splitlines()) if e["rubric"]] if board.exists() else []
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 1240})
            for name, view, whole in views:
                page.goto(f"{url}#{view}")
                page.wait_for_timeout(3000)
                page.screenshot(path=str(Path(out) / f"dashboard-{name}.png"), full_page=whole)
            page.set_viewport_size({"width": 1400, "height": 900})
            if judged:
                page.goto(f"{url}#rewards?run=0&stage={judged[0]['stage']}&source=grm")
                page.wait_for_timeout(2500)
                page.locator(f"#samples tr[data-sample='{judged[0]['sample']}']").click()
                page.wait_for_selector(".rubric tr.criterion")
                page.screenshot(path=str(Path(out) / "dashboard-rewards.png"), full_page=True)
            browser.close()
    finally:
        server.terminate()
        server.wait(10)


if __name__ == "__main__":
    main(*sys.argv[1:])
