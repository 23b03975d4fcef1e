"""The trainer's side of the collective weight sync, vLLM's weight-transfer engine, as
methods of every rank: all ranks take part in gathering the full weights (ZeRO-3
partitions them) bucket by bucket; rank 0 alone drives the engines (rollout/transfer.py)
and sends.

The driver (`TrainerGroup.broadcast_weights`) calls `sync_connect` on every rank once per
set of engines (vLLM's `trainer_init`: the engines join the backend's group), then
`sync_send` on every rank for every push (vLLM's `send_weights`).
"""

from __future__ import annotations


class WeightSender:
    """Mixed into TrainerWorker; uses its `rank`, `tied`, `engine` and `config.zero_stage`."""

    transfer = None  # vLLM's trainer-side weight-transfer engine, while connected
    transfer_backend = ""

    def sync_connect(
        self, engines: list, workers: list[int], backend: str, bucket_bytes: int, timeout_s: float
    ) -> None:
        """Every rank: vLLM's `trainer_init` for `backend`; rank 0 returns once every engine
        worker (`workers` per engine) has joined."""
        import ray
        from vllm.distributed.weight_transfer.factory import WeightTransferTrainerFactory

        from posttrain.rollout.transfer import EngineClient, trainer_init_info
        from posttrain.train.source import GatheredSource

        self.sync_close()
        source = GatheredSource(self.engine.module, bucket_bytes, self.config.zero_stage, self.tied)
        address = ray.util.get_node_ip_address()
        info = trainer_init_info(backend, self.rank, address, 1 + sum(workers), bucket_bytes, timeout_s)
        client = EngineClient(engines, workers, timeout_s)
        self.transfer = WeightTransferTrainerFactory.trainer_init(info, client=client, source=source)
        self.transfer_backend = backend

    def sync_send(self, version: int) -> list[int]:
        """Every rank sends (under ZeRO-3 each bucket is a gather on every rank); rank 0
        returns the version each engine reports serving ([] elsewhere)."""
        if self.transfer is None:
            raise RuntimeError("weight sync: this rank has no weight transfer (sync_connect first)")
        from posttrain.rollout.transfer import send_aborting_on_a_miss

        self.transfer.client.version = version
        try:
            if self.transfer_backend == "nccl":  # its broadcast has no deadline of its own
                send_aborting_on_a_miss(self.transfer)
            else:  # gloo's operations have the push's deadline; ipc sends no collective
                self.transfer.send_weights()
        except BaseException:
            self.sync_close()  # a broken group is never reused: the driver connects again
            raise
        return list(self.transfer.client.versions) if self.rank == 0 else []

    def sync_bytes(self) -> int:
        """Bytes of one push's weights, each tensor once (a tied head's repeat left out)."""
        from posttrain.train.export import full_shape, weight_entries

        return sum(full_shape(tensor)[1] for _, tensor in weight_entries(self.engine.module)[0])

    def sync_close(self) -> None:
        if self.transfer is not None:
            self.transfer.shutdown()
        self.transfer = None
