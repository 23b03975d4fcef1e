"""The eval view's data, from eval.json: a domain x effort grid per checkpoint role, each
student minus its teachers, and the paired comparisons in the recipe's order with whether
each is beyond two standard errors."""

from __future__ import annotations

import math

from posttrain.dashboard.rows import EVAL_NUMBERS, finite, number

DOMAINS = ("general", "coding", "agent")
EFFORTS = ("max", "high", "low")
ROLES = {"sft": "SFT", "expert": "experts (each on its own cell)", "rl": "RL", "student": "student", "base": "base"}
COMPARISONS = {
    "max_minus_low": "max − low effort",
    "max_minus_high": "max − high effort",
    "high_minus_low": "high − low effort",
    "expert_minus_sft": "expert − SFT",
    "student_minus_teacher": "student − teacher",
}


def comparison_table(found: list[dict]) -> list[dict]:
    """eval.json's paired comparisons, grouped by kind in the recipe's order, each with
    `beyond`: more than two standard errors from 0 (on more than one task)."""
    order = list(COMPARISONS)
    found = sorted(found, key=lambda c: _rank(order, c["kind"]))
    out = []
    for c in found:
        diff, se, n = finite(c["diff"]), finite(c["se"]), c["n"]
        beyond = diff is not None and se is not None and (n or 0) > 1 and abs(diff) > 2 * se
        out.append({**c, "diff": diff, "se": se, "title": COMPARISONS.get(c["kind"], c["kind"]), "beyond": beyond})
    return out


def eval_grids(rows: list[dict]) -> list[dict]:
    """The domain x effort grids of eval.json: one per checkpoint role (checkpoints scored on a
    single cell, the experts, share one grid; any other checkpoint has its own), then each
    student minus the teacher of every cell."""
    order = list(ROLES)
    by_ckpt: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        by_ckpt.setdefault((str(r.get("role", "?")), str(r["checkpoint"])), []).append(r)
    grids: dict[str, dict] = {}
    for (role, ckpt), mine in sorted(by_ckpt.items(), key=lambda kv: (_rank(order, kv[0][0]), kv[0][1])):
        single = len({(r.get("domain"), r.get("effort")) for r in mine}) == 1
        key = f"{role}:*" if single else f"{role}:{ckpt}"
        title = ROLES.get(role, role) if single else f"{ROLES.get(role, role)}: {ckpt}"
        grid = grids.setdefault(key, {"title": title, "role": role, "kind": "score", "cells": {}})
        for r in mine:
            grid["cells"][(r.get("domain"), r.get("effort"))] = _eval_cell(r)
    out = [dict(g, cells=_cells(g["cells"])) for g in grids.values()]
    teacher = next((g for g in grids.values() if g["role"] == "expert"), None)
    for g in list(grids.values()):
        if g["role"] == "student" and teacher is not None:
            out.append(_difference(g, teacher))
    return out


def _rank(order: list[str], role: str) -> int:
    return order.index(role) if role in order else len(order)


def _eval_cell(r: dict) -> dict:
    return {"checkpoint": r["checkpoint"], **{k: finite(number(r, k)) for k in EVAL_NUMBERS}}


def _cells(cells: dict) -> list[dict]:
    return [{"domain": d, "effort": e, **(cells.get((d, e)) or {})} for d in DOMAINS for e in EFFORTS]


def _difference(student: dict, teacher: dict) -> dict:
    cells = {}
    for cell, s in student["cells"].items():
        t = teacher["cells"].get(cell)
        if t is None or s.get("score") is None or t.get("score") is None:
            continue
        ses = [s.get("score_se"), t.get("score_se")]
        cells[cell] = {
            "diff": s["score"] - t["score"],
            "diff_se": math.hypot(*ses) if None not in ses else None,
            "student": s["score"],
            "teacher": t["score"],
            "checkpoint": t.get("checkpoint"),
        }
    return {
        "title": f"{student['title']} minus teacher",
        "role": "difference",
        "kind": "difference",
        "cells": _cells(cells),
    }
