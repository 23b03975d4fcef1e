"""The trainer's weights as a vLLM `WeightSource`, what vLLM's trainer-side weight-transfer
engines read: each parameter and persistent buffer once, then the names it also goes by (a
tied lm_head, named even where the state dict leaves it out: vLLM's in-place reload leaves
it on its old values otherwise, see rollout/weights.py). Imported only where a collective
sync is connected (it imports vLLM).
"""

from __future__ import annotations

from collections.abc import Iterator

from vllm.distributed.weight_transfer.base import ParamMeta, WeightSource

from posttrain.train.export import buckets_of, full_shape, gathered, weight_entries


class GatheredSource(WeightSource):
    """Metadata from the parameters' whole shapes (no gather); each pass gathers bucket by
    bucket (ZeRO-3, every rank together), so no rank holds more than one bucket above its
    partition, and yields each tensor whole."""

    def __init__(self, module, bucket_bytes: int, zero_stage: int, tied_embeddings: bool):
        self.entries, aliases = weight_entries(module)
        self.bucket_bytes, self.zero_stage = bucket_bytes, zero_stage
        names = {name for name, _ in self.entries} | {alias for alias, _ in aliases}
        if tied_embeddings and "lm_head.weight" not in names and "model.embed_tokens.weight" in names:
            aliases.append(("lm_head.weight", "model.embed_tokens.weight"))
        self.repeats: dict[str, list[str]] = {}
        for alias, name in aliases:
            self.repeats.setdefault(name, []).append(alias)

    def metadata(self) -> list[ParamMeta]:
        out = []
        for name, tensor in self.entries:
            shape = full_shape(tensor)[0]
            out += [ParamMeta(n, tensor.dtype, shape) for n in [name, *self.repeats.get(name, [])]]
        return out

    def __iter__(self) -> Iterator:
        for part in gathered(buckets_of(self.entries, self.bucket_bytes), self.zero_stage):
            for name, tensor in part.items():
                for n in [name, *self.repeats.get(name, [])]:
                    yield n, tensor
