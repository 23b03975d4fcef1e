"""bench/verifier_refusals.py on crafted rollouts: each response counted once, by its
verifier's verdict (the one before a budget's penalty), per domain, with examples."""

import importlib.util
import json
from pathlib import Path

spec = importlib.util.spec_from_file_location(
    "verifier_refusals", Path(__file__).resolve().parent.parent / "bench" / "verifier_refusals.py"
)
refusals = importlib.util.module_from_spec(spec)
spec.loader.exec_module(refusals)


def rows_file(run: Path, name: str, rows: list[dict]) -> None:
    path = run / "rollouts" / f"{name}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"torn')


def test_shares_per_domain_by_the_verifier_s_own_verdict(tmp_path, capsys):
    rows_file(
        tmp_path,
        "experts/general-max",
        [
            {"stage": "experts/general-max", "reason": "correct: 12", "response": "12"},
            {"stage": "experts/general-max", "reason": "hedged: the answer says 'maybe'", "response": "maybe 12"},
            {
                "stage": "experts/general-max",
                "reason": "not an answer: 'The sum is large'",
                "response": "The sum is large",
            },
            # over budget: counted by the verdict the penalty replaced, a wrong answer
            {
                "stage": "experts/general-max",
                "over_budget": True,
                "response": "13",
                "reason": "over budget: 50 > 40 tokens (was: wrong: 13 (gold 12))",
            },
        ],
    )
    rows_file(
        tmp_path,
        "mopd",
        [
            {
                "stage": "mopd",
                "entry": {"domain": "agent"},
                "reason": "no answer found (no final line)",
                "response": "ok",
            },
            {"stage": "mopd", "entry": {"domain": "coding"}, "reason": "3/5 tests passed", "response": "def f(): pass"},
        ],
    )
    counts = refusals.tally(refusals.read_run(tmp_path, None))
    assert {k: v for k, v in counts["general"].items() if not k.startswith("phrase:")} == {
        "correct": 1,
        "hedged": 1,
        "unreadable": 1,
        "wrong": 1,
    }
    assert counts["agent"]["unreadable"] == 1 and counts["coding"]["other"] == 1
    assert counts["coding"]["phrase:3/5 tests passed"] == 1  # an unknown phrase is listed, not dropped
    assert refusals.main([str(tmp_path), "--examples", "1"]) == 0
    out = capsys.readouterr().out
    assert "| general | 4 | 1 (25.0%) | 1 (25.0%) | 1 (25.0%) | 1 (25.0%) | 0 (0.0%) |" in out
    assert "unreadable [experts/general-max] 'The sum is large'" in out


def test_only_one_stage_and_a_folder_without_rollouts(tmp_path, capsys):
    rows_file(tmp_path, "sft_rl", [{"stage": "sft_rl", "reason": "correct: 1", "response": "1"}])
    assert refusals.main([str(tmp_path), "--stage", "experts"]) == 2
    assert "no saved responses of stage experts" in capsys.readouterr().err
    assert refusals.main([str(tmp_path / "nowhere")]) == 2


def test_an_agent_episode_s_reasons():
    assert refusals.verdict_class("no final answer (the episode ended on a tool call)") == "unreadable"
    assert refusals.verdict_class("answer 'you get 78.5.' != expected '1260'") == "wrong"
    assert refusals.verdict_class("store['size4'] = None, expected 'violet'") == "other"
    assert refusals.head("store['size4'] = None, expected 'violet'") == "store"
