"""Micro-batches of a rank's shard: which sequences go together (`micro_batches`, one
packing loop for both layouts), and as tensors: `collate` (right-padded rows, one
sequence each) and `collate_shared` (a group's prompt computed once per row, a 4-D mask
keeping each sequence's logprobs its own), both giving per-token tensors over the window
of positions that predict a response token; `collate_micro_batch` picks the layout."""

from __future__ import annotations

from posttrain.types import TrainSequence

# Stands in for a micro-batch on a rank that has run out of data: zero loss, but a full
# backward, so the rank joins every gradient collective of the others.
PAD_SEQUENCE = TrainSequence(token_ids=(0, 0), prompt_len=1, advantages=(0.0,), loss_mask=(0.0,))


def micro_batches(
    shard: list[TrainSequence], cap: int, share_prompts: bool, max_shared: int | None = None
) -> list[list[int]]:
    """Indices of `shard` in micro-batches of at most `cap` positions (rows x the longest
    row, padding included), filled shortest row first. A row is one sequence, or with
    `share_prompts` a shared-prompt row (`prompt_rows`: a group's sequences together, at most
    `max_shared` positions, listed in row order, which `collate_shared` rebuilds). A row
    longer than `max_shared` (a sequence alone) never shares a micro-batch with shared rows:
    its micro-batch takes the plain layout, with no L^2 mask."""
    if share_prompts:
        limit = shared_row_cap(cap, max_shared)
        order = sorted(range(len(shard)), key=lambda i: shard[i].token_ids[: shard[i].prompt_len])
        rows = [[order[k] for k in row] for row in prompt_rows([shard[i] for i in order], limit)]
        sizes = [len(shard[row[0]].token_ids) + sum(shard[i].response_len + 1 for i in row[1:]) for row in rows]
        short = [k for k in range(len(rows)) if sizes[k] <= limit]
        long = [k for k in range(len(rows)) if sizes[k] > limit]
        return _pack([rows[k] for k in short], [sizes[k] for k in short], cap) + _pack(
            [rows[k] for k in long], [sizes[k] for k in long], cap
        )
    rows = [[i] for i in range(len(shard))]
    sizes = [len(s.token_ids) for s in shard]
    return _pack(rows, sizes, cap)


def shared_row_cap(cap: int, max_shared: int | None) -> int:
    """The most positions a shared-prompt row may hold."""
    return cap if max_shared is None else min(cap, max_shared)


def _pack(rows: list[list[int]], sizes: list[int], cap: int) -> list[list[int]]:
    """Rows, sorted by size (stable), into micro-batches: a row starts a new micro-batch when
    the current one, padded to its longest row, would pass `cap` positions with it."""
    batches, current, longest = [], [], 0
    for k in sorted(range(len(rows)), key=lambda k: sizes[k]):
        longest_if = max(longest, sizes[k])
        if current and longest_if * (len(current) + 1) > cap:
            batches.append([i for row in current for i in row])
            current, longest_if = [], sizes[k]
        current.append(rows[k])
        longest = longest_if
    if current:
        batches.append([i for row in current for i in row])
    return batches


def collate_micro_batch(
    seqs: list[TrainSequence],
    device,
    cap: int,
    share_prompts: bool,
    max_shared: int | None = None,
    bias_dtype=None,
) -> dict:
    """With `share_prompts`, the shared-prompt layout where a micro-batch has a prompt to
    share and every row fits `max_shared`; otherwise (SFT, long rows, and always without
    it) one padded row per sequence, whose 2-D mask lets attention skip masking when
    nothing is padded."""
    if share_prompts:
        limit = shared_row_cap(cap, max_shared)
        rows = prompt_rows(seqs, limit)
        if any(len(row) > 1 for row in rows) and all(len(seqs[i].token_ids) <= limit for i in range(len(seqs))):
            return collate_shared(seqs, device, limit, bias_dtype)
    return collate(seqs, device)


def collate(seqs: list[TrainSequence], device) -> dict:
    """Right-padded token ids, and per-token tensors over the window of positions that
    predict a response token (position t predicts token t+1, so response token j of a
    sequence sits at prompt_len-1+j; `where` holds each sequence's (row, first column) in
    the window). Logits are computed for the window only. Every tensor is on `device`."""
    import torch

    length = max(len(s.token_ids) for s in seqs)
    lo = min(s.prompt_len - 1 for s in seqs)
    hi = max(len(s.token_ids) - 1 for s in seqs)
    ids = torch.zeros(len(seqs), length, dtype=torch.long)
    attn = torch.zeros(len(seqs), length, dtype=torch.long)
    # advantages, loss mask, engine logprobs, stale, has_engine (1 where the engine's logprobs came with it)
    per_token = torch.zeros(5, len(seqs), max(hi - lo, 0))
    starts = []
    for row, s in enumerate(seqs):
        n, start = len(s.token_ids), s.prompt_len - 1 - lo
        ids[row, :n] = torch.tensor(s.token_ids)
        attn[row, :n] = 1
        _fill_per_token(per_token, row, start, s)
        starts.append(start)
    per_token = per_token.to(device)
    ids, attn = ids.to(device), attn.to(device)
    where = [(row, start) for row, start in enumerate(starts)]
    return {
        **teacher_targets(seqs, where, per_token.shape[1:], device),
        "input_ids": ids,
        "attention_mask": attn,
        "targets": ids[:, lo + 1 : hi + 1],
        "window": (lo, hi),
        "where": where,
        "advantages": per_token[0],
        "loss_mask": per_token[1],
        "logp_engine": per_token[2],
        "stale": per_token[3],
        "has_engine": per_token[4],
        "positions": (len(seqs) * length, sum(len(s.token_ids) for s in seqs)),  # padded, real
    }


def prompt_rows(seqs: list[TrainSequence], cap: int) -> list[list[int]]:
    """Indices of `seqs` in shared-prompt rows: consecutive sequences with the same prompt
    share a row (the prompt once) while it holds at most `cap` positions."""
    rows: list[list[int]] = []
    size = 0
    for i, s in enumerate(seqs):
        prompt = s.token_ids[: s.prompt_len]
        last = seqs[rows[-1][0]] if rows else None
        same = last is not None and last.token_ids[: last.prompt_len] == prompt
        if same and size + s.response_len + 1 <= cap:
            rows[-1].append(i)
            size += s.response_len + 1
        else:
            rows.append([i])
            size = len(s.token_ids)
    return rows


def collate_shared(seqs: list[TrainSequence], device, cap: int, bias_dtype=None) -> dict:
    """The layout of `collate` (same keys), with each group's prompt computed once: a row
    holds the prompt but its last token, then per sequence its last prompt token and its
    response. Each such segment attends to the shared part and causally to itself (a 4-D
    mask), with the positions it would have alone, so every logprob is the separate
    sequence's. The window starts at the earliest segment of any row.

    The mask goes to the device once, as an additive bias in `bias_dtype` (the model's
    compute dtype; float32 by default): SDPA would otherwise turn a boolean mask into a
    new bias in every layer, each kept for the backward pass (rows x L^2 x layers). On a
    GPU rows are padded to a multiple of 16 positions, the alignment its memory-efficient
    kernel wants of a bias (else it pads a copy in every layer)."""
    import torch

    rows = prompt_rows(seqs, cap)
    layouts = []  # per row: shared length, [(sequence, offset)]
    for row in rows:
        shared = seqs[row[0]].prompt_len - 1
        offsets, at = [], shared
        for i in row:
            offsets.append((i, at))
            at += seqs[i].response_len + 1
        layouts.append((shared, offsets, at))
    align = 16 if getattr(device, "type", "cpu") == "cuda" else 1
    length = -(-max(end for _, _, end in layouts) // align) * align
    lo = min(shared for shared, _, _ in layouts)
    hi = length - 1
    ids = torch.zeros(len(rows), length, dtype=torch.long)
    targets = torch.zeros(len(rows), max(hi - lo, 0), dtype=torch.long)
    positions = torch.zeros(len(rows), length, dtype=torch.long)
    allowed = torch.zeros(len(rows), length, length, dtype=torch.bool)
    per_token = torch.zeros(5, len(rows), max(hi - lo, 0))
    where: list[tuple[int, int]] = [(0, 0)] * len(seqs)
    for b, (shared, offsets, end) in enumerate(layouts):
        first = seqs[offsets[0][0]]
        ids[b, :shared] = torch.tensor(first.token_ids[:shared])
        positions[b, :shared] = torch.arange(shared)
        allowed[b, :shared, :shared] = torch.ones(shared, shared, dtype=torch.bool).tril()
        for i, at in offsets:
            s = seqs[i]
            n = s.response_len + 1
            ids[b, at : at + n] = torch.tensor(s.token_ids[shared:])
            positions[b, at : at + n] = torch.arange(shared, shared + n)
            allowed[b, at : at + n, :shared] = True
            allowed[b, at : at + n, at : at + n] = torch.ones(n, n, dtype=torch.bool).tril()
            col = at - lo
            targets[b, col : col + n - 1] = torch.tensor(s.token_ids[s.prompt_len :])
            _fill_per_token(per_token, b, col, s)
            where[i] = (b, col)
        allowed[b, end:, end:] = torch.eye(length - end, dtype=torch.bool)  # padding sees itself: no empty row
    dtype = bias_dtype or torch.float32
    mask = torch.zeros(allowed.shape, dtype=dtype).masked_fill_(~allowed, torch.finfo(dtype).min).unsqueeze(1)
    del allowed
    per_token = per_token.to(device)
    return {
        **teacher_targets(seqs, where, per_token.shape[1:], device),
        "input_ids": ids.to(device),
        "attention_mask": mask.to(device),
        "position_ids": positions.to(device),
        "targets": targets.to(device),
        "window": (lo, hi),
        "where": where,
        "advantages": per_token[0],
        "loss_mask": per_token[1],
        "logp_engine": per_token[2],
        "stale": per_token[3],
        "has_engine": per_token[4],
        "positions": (len(rows) * length, sum(end for _, _, end in layouts)),
    }


def _fill_per_token(per_token, row: int, col: int, s: TrainSequence) -> None:
    """advantages, loss mask, engine logprobs, stale, has_engine of `s` from column `col`."""
    import torch

    end = col + s.response_len
    per_token[0, row, col:end] = torch.tensor(s.advantages, dtype=torch.float32)
    per_token[1, row, col:end] = torch.tensor(s.loss_mask, dtype=torch.float32)
    if s.logp_engine:
        per_token[2, row, col:end] = torch.tensor(s.logp_engine, dtype=torch.float32)
        per_token[4, row, col:end] = 1.0
    if s.stale:
        per_token[3, row, col:end] = torch.tensor(s.stale, dtype=torch.float32)


NO_MASS = -1e4  # a teacher logprob whose probability is 0 (padding), finite so 0 * logprob stays 0


def teacher_targets(seqs: list[TrainSequence], where: list[tuple[int, int]], shape, device) -> dict:
    """`teacher_ids`, `teacher_logp` [rows, window, k]: each sequence's teacher top-k at its
    response positions (`where`: its row and first column), zero mass everywhere else; no
    keys when no sequence carries a teacher."""
    import torch

    ks = {s.teacher.k for s in seqs if s.teacher is not None}
    if not ks:
        return {}
    if len(ks) > 1:
        raise ValueError(f"sequences of one micro-batch carry teachers' top-k of different sizes: {sorted(ks)}")
    k = ks.pop()
    ids = torch.zeros(*shape, k, dtype=torch.long)
    logp = torch.full((*shape, k), NO_MASS, dtype=torch.float32)
    for s, (row, col) in zip(seqs, where):
        if s.teacher is None:
            continue
        if len(s.teacher.ids) != s.response_len:
            raise ValueError(f"teacher top-k covers {len(s.teacher.ids)} positions, the response {s.response_len}")
        end = col + s.response_len
        ids[row, col:end] = torch.as_tensor(s.teacher.ids, dtype=torch.long)
        logp[row, col:end] = torch.as_tensor(s.teacher.logp, dtype=torch.float32).clamp(min=NO_MASS)
    return {"teacher_ids": ids.to(device), "teacher_logp": logp.to(device)}
