"""Start-up by phase (records/startup.py): the process-wide phases go to the first stage
that reaches a step, each stage adds its own, and the total counts from the process's
start for that first stage and from its own start for the next."""

import threading
import time

from posttrain.records.startup import StageStartup, StartupClock, process_started

IMPORTED = time.time()


def test_the_first_stage_takes_the_process_phases_and_the_next_counts_from_its_own_start():
    clock = StartupClock(origin=time.time() - 10.0)  # the process started 10 s ago
    with clock.phase("ray"):
        time.sleep(0.02)
    with clock.phase("slot"):
        pass
    with clock.phase("ray"):  # a phase that runs twice adds up
        time.sleep(0.02)
    sft = StageStartup(clock)
    with sft.phase("trainers"):
        time.sleep(0.01)
    row = sft.first_step()
    assert set(row) == {"startup/ray_s", "startup/slot_s", "startup/trainers_s", "startup/total_s"}
    assert row["startup/ray_s"] >= 0.04 and row["startup/trainers_s"] >= 0.01
    assert 10.0 <= row["startup/total_s"] < 11.0
    assert sft.first_step() == {}  # once per stage

    time.sleep(0.05)
    rl = StageStartup(clock)  # the next stage, started now
    with rl.phase("first_push"):
        time.sleep(0.01)
    row = rl.first_step()
    assert set(row) == {"startup/first_push_s", "startup/total_s"}  # Ray's time is not counted again
    assert row["startup/first_push_s"] <= row["startup/total_s"] < 1.0


def test_expert_jobs_in_threads_take_the_process_phases_once():
    clock = StartupClock(origin=time.time())
    with clock.phase("ray"):
        pass
    rows = []
    jobs = [StageStartup(clock) for _ in range(6)]
    threads = [threading.Thread(target=lambda j=j: rows.append(j.first_step())) for j in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum("startup/ray_s" in r for r in rows) == 1 and all("startup/total_s" in r for r in rows)


def test_the_process_started_before_this_module_was_imported():
    assert IMPORTED - 24 * 3600 < process_started() <= IMPORTED


def test_a_later_stage_counts_from_its_own_begin_with_the_slot_it_opened():
    clock = StartupClock(origin=time.time() - 10.0)
    clock.stage_begins()  # the first stage: a synthesis stage, which logs no step
    with clock.phase("ray"):
        pass
    time.sleep(0.05)
    clock.stage_begins()  # the next stage (ray.placement: per_stage opens its slot now)
    with clock.phase("slot"):
        time.sleep(0.01)
    row = StageStartup(clock).first_step()
    assert set(row) == {"startup/slot_s", "startup/total_s"}
    assert row["startup/slot_s"] <= row["startup/total_s"] < 1.0  # not the 10 s before, nor the first stage's
