"""The partial-rollout queue: continuation state, staleness drops, accounting, save/restore."""

import pytest

from posttrain.rollout.queue import AccountingError, PartialRolloutQueue
from posttrain.types import Message, Task

TASK = Task("t/0", "chain_sum", (Message("user", "1 + 1 ="),), "2", {"answer": "2"})


def test_groups_complete_only_when_every_trajectory_finished():
    q = PartialRolloutQueue(max_staleness=4)
    a, b = q.add_group(TASK, (1, 2), size=2, max_tokens=5, budget=None, version=0)
    a.extend([7, 8], [-0.1, -0.2], version=0, finish_reason="stop")
    b.extend([9], [-0.3], version=0, finish_reason=None)  # cut: continues later
    assert q.pop_complete(version=0) == []
    assert q.unfinished(version=1, limit=10) == [b]
    b.extend([10], [-0.4], version=1, finish_reason="stop")
    assert b.response_ids == [9, 10] and b.token_versions == [0, 1] and b.logp_behaviour == [-0.3, -0.4]
    (group,) = q.pop_complete(version=1)
    q.mark_trained(2)
    assert q.check() == {"samples/drawn": 2.0, "samples/trained": 2.0, "samples/queued": 0.0, "samples/dropped": 0.0}


def test_max_tokens_finishes_a_trajectory():
    q = PartialRolloutQueue(max_staleness=4)
    (a,) = q.add_group(TASK, (1,), size=1, max_tokens=3, budget=None, version=0)
    a.extend([1, 2, 3], [0.0] * 3, version=0, finish_reason=None)
    assert a.finished and a.finish_reason == "length"


def test_stale_groups_are_dropped_and_counted():
    q = PartialRolloutQueue(max_staleness=2)
    (old,) = q.add_group(TASK, (1,), size=1, max_tokens=9, budget=None, version=0)
    old.extend([5], [-1.0], version=0, finish_reason=None)
    (new,) = q.add_group(TASK, (1,), size=1, max_tokens=9, budget=None, version=2)
    new.extend([6], [-1.0], version=2, finish_reason=None)
    assert q.unfinished(version=2, limit=10) == [old, new]  # 2 - 0 = 2: not over the cap
    assert q.unfinished(version=3, limit=10) == [new]  # 3 - 0 > 2: dropped
    assert q.check()["samples/dropped/stale"] == 1.0
    assert q.check()["samples/queued"] == 1.0


def test_accounting_catches_a_lost_sample():
    q = PartialRolloutQueue(max_staleness=2)
    q.add_group(TASK, (1,), size=3, max_tokens=9, budget=None, version=0)
    q.groups.clear()  # a bug that forgets a group
    with pytest.raises(AccountingError, match="drawn 3"):
        q.check()


def test_queue_survives_a_save_and_restore():
    q = PartialRolloutQueue(max_staleness=3)
    a, b = q.add_group(TASK, (1, 2), size=2, max_tokens=9, budget=7, version=4)
    a.extend([3, 4], [-0.5, -0.25], version=4, finish_reason=None)
    b.extend([5], [-1.5], version=4, finish_reason="stop")
    q.dropped["stale"] += 2
    q.drawn += 2
    restored = PartialRolloutQueue.from_json(q.to_json())
    assert restored.to_json() == q.to_json()
    (ra,) = restored.unfinished(version=5, limit=5)
    assert ra.response_ids == [3, 4] and ra.prompt_ids == (1, 2) and ra.logp_behaviour == [-0.5, -0.25]
    assert restored.groups["g0"].task == TASK and restored.groups["g0"].budget == 7
    assert restored.check() == q.check()
    (nxt,) = restored.add_group(TASK, (1,), size=1, max_tokens=2, budget=None, version=5)
    assert nxt.group_id == "g1"  # ids continue, never reused


def test_rejected_groups_are_counted_as_dropped():
    q = PartialRolloutQueue(max_staleness=2)
    q.reject(4, "prompt_too_long")
    q.add_group(TASK, (1,), size=2, max_tokens=3, budget=None, version=0)
    assert q.check() == {
        "samples/drawn": 6.0,
        "samples/trained": 0.0,
        "samples/queued": 2.0,
        "samples/dropped": 4.0,
        "samples/dropped/prompt_too_long": 4.0,
    }
