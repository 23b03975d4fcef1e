"""Trainer ranks whose rendezvous port is taken between picking it and binding it (another
group starting on the same node) start again on another port, instead of failing."""

import socket

from posttrain.config import TrainerConfig


def test_ranks_start_again_on_another_port_when_theirs_was_taken(ray_session, tiny_dir, monkeypatch):
    from posttrain.train import group

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        picked = []
        real = group.TrainerGroup._address

        def first_taken(self, rank0):
            address = ("127.0.0.1", busy) if not picked else real(self, rank0)
            picked.append(address)
            return address

        monkeypatch.setattr(group.TrainerGroup, "_address", first_taken)
        trainers = group.TrainerGroup(TrainerConfig(workers=2, zero_stage=2), seed=0)
        try:
            facts = trainers.load(str(tiny_dir), "float32", lr=1e-3, warmup_steps=0)
        finally:
            trainers.shutdown()
    assert picked[0] == ("127.0.0.1", busy) and len(picked) == 2 and picked[1] != picked[0]
    assert facts
