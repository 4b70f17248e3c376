"""Sequence packing: several samples in one row, with no attention or loss across them.

Best-fit-decreasing into rows of at most ``cutoff_len`` tokens, O(n log width).
Each sample keeps its own positions (0, 1, ...), which is how the model tells
samples apart (see ``collate.TokenCounter``); the first label of every sample
is ignored, so the loss never predicts one sample from the previous one.
"""

from __future__ import annotations

from .templates import IGNORE


def pack(rows: list[dict], width: int) -> list[dict]:
    """Best-fit-decreasing packing of samples into rows of at most ``width`` tokens (see ``bins`` and ``join``)."""
    return [join([rows[i] for i in members]) for members in bins([len(r["input_ids"]) for r in rows], width)]


def join(members: list[dict]) -> dict:
    """Samples in one row. Each keeps its own positions (0, 1, ...), which is how the model tells samples apart;
    the first label of every sample is ignored: the loss would otherwise predict it from the previous sample's
    last token."""
    row: dict[str, list[int]] = {"input_ids": [], "labels": [], "position_ids": []}
    for r in members:
        row["input_ids"] += r["input_ids"]
        row["labels"] += [IGNORE] + list(r["labels"][1:])
        row["position_ids"] += list(range(len(r["input_ids"])))
    return row


class PackedRows:
    """Packed rows over a (memory-mapped) tokenized dataset: the bins are computed once, each row joined when read.

    Nothing is copied: a rank holds the bins (sample indices), and a row costs the pages of its samples.
    """

    def __init__(self, dataset, width: int):
        self.dataset = dataset.select_columns(["input_ids", "labels"])
        self.lengths = dataset.with_format("numpy", columns=["length"])[:]["length"].tolist()
        self.bins = bins(self.lengths, width)

    def __len__(self) -> int:
        return len(self.bins)

    def __getitem__(self, i: int) -> dict:
        rows = self.dataset[self.bins[i]]  # one read of the members: columns of lists
        return join([{"input_ids": a, "labels": b} for a, b in zip(rows["input_ids"], rows["labels"])])


def bins(lengths: list[int], width: int) -> list[list[int]]:
    """Best-fit decreasing: sample indices grouped into rows of at most ``width`` tokens.

    Rows are found by their free space in a tree over 0..width, so a large dataset packs in O(n log width).
    """
    size = 1 << max(1, width).bit_length()
    count = [0] * (2 * size)  # count[size + r]: rows with r tokens free; inner nodes: sums
    open_rows: dict[int, list[int]] = {}  # free space -> indices of the rows with that much free

    def add(free: int, delta: int) -> None:
        i = size + free
        while i:
            count[i] += delta
            i //= 2

    def tightest(n: int) -> int | None:
        """The smallest free space >= n that some row has: up from leaf n to a right sibling with rows, then down."""
        i = size + n
        if count[i]:
            return n
        while i > 1:
            if i % 2 == 0 and count[i + 1]:
                i += 1
                while i < size:
                    i = 2 * i if count[2 * i] else 2 * i + 1
                return i - size
            i //= 2
        return None

    groups: list[list[int]] = []
    for i in sorted(range(len(lengths)), key=lambda k: lengths[k], reverse=True):
        n = lengths[i]
        free = tightest(n)
        if free is None:
            groups.append([])
            b, free = len(groups) - 1, width
        else:
            b = open_rows[free].pop()
            add(free, -1)
        groups[b].append(i)
        open_rows.setdefault(free - n, []).append(b)
        add(free - n, 1)
    return groups
