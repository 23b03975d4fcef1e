"""The trainer's side of the collective weight sync (rollout/collective.py), as methods of
every rank: all ranks take part in gathering the full weights (ZeRO-3 partitions them),
rank 0 alone hosts the group's store and broadcasts.

The driver (`TrainerGroup.broadcast_weights`) calls, in order: `sync_manifest` (once per
loaded model), `sync_device_id` and `sync_listen` on rank 0, then `sync_connect` beside
the engines' `join_weight_group` (once per set of engines), then `sync_send` on every
rank beside the engines' `receive_weights` (every push).
"""

from __future__ import annotations


class WeightSender:
    """Mixed into TrainerWorker; uses its `rank`, `tied`, `engine` and `config.zero_stage`."""

    sync_group = None
    sync_store = None
    sync_manifest_ = None

    def sync_manifest(self, bucket_bytes: int):
        """Every rank keeps the layout of every push (read from the parameters' shapes: no
        gather); rank 0 returns it."""
        from posttrain.rollout.collective import manifest_of
        from posttrain.train.export import weight_entries

        entries, aliases = weight_entries(self.engine.module)
        self.sync_manifest_ = manifest_of(entries, aliases, bucket_bytes, self.tied)
        return self.sync_manifest_ if self.rank == 0 else None

    def sync_device_id(self) -> str:
        from posttrain.rollout.collective import device_id

        return device_id()

    def sync_listen(self, size: int, timeout_s: float) -> tuple[str, int]:
        """Rank 0: host a fresh group's store; returns (address, port) for the engines."""
        import ray

        from posttrain.rollout.collective import SyncGroup

        self.sync_close()
        host = ray.util.get_node_ip_address()
        self.sync_store, port = SyncGroup.host_store(host, size, timeout_s)
        return host, port

    def sync_connect(self, size: int, backend: str, timeout_s: float) -> int:
        """Rank 0: form the group (returns once every engine worker has joined)."""
        from posttrain.rollout.collective import SyncGroup

        self.sync_group = SyncGroup(self.sync_store, 0, size, backend, timeout_s)
        return 0

    def sync_send(self, version: int) -> int:
        """Every rank, bucket by bucket (under ZeRO-3 each bucket is a gather on every rank);
        rank 0 broadcasts each one. Returns bytes sent (0 elsewhere)."""
        from posttrain.rollout.collective import bucket_groups, send
        from posttrain.train.export import gathered, weight_entries

        entries, _ = weight_entries(self.engine.module)
        buckets = gathered(bucket_groups(self.sync_manifest_, entries), self.config.zero_stage)
        if self.rank != 0:
            for _ in buckets:  # take part in each gather
                pass
            return 0
        if self.sync_group is None:
            for _ in buckets:
                pass
            raise RuntimeError("weight sync: rank 0 is in no weight-sync group")
        try:
            return send(self.sync_group, buckets, self.sync_manifest_, version, self.device)
        except Exception:
            self.sync_close()  # a broken group is never reused: the driver forms a new one
            raise

    def sync_close(self) -> None:
        if self.sync_group is not None:
            self.sync_group.close()
        self.sync_group = self.sync_store = None
