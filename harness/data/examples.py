"""Counting examples in the rows a backend feeds (packed or not): the one count the plan,
the backends' work logs and the data pipeline share."""

from __future__ import annotations


def count_examples(attention_mask, position_ids=None) -> int:
    """Examples in rows (host numpy arrays): each row one, or, packed, each position 0
    that falls on a real token (a row's tail of padding restarts at 0 on pad tokens)."""
    if position_ids is None:
        return int(attention_mask.shape[0])
    return int(((position_ids == 0) & (attention_mask == 1)).sum())
