"""Fixed, documented record subsets for benchmark runs that cannot afford a whole dataset.

The fixed third: per dataset subset, the record ids sorted as plain strings, shuffled
with `random.Random(FIXED_SUBSET_SEED)`, the first round(n/3) taken. On Who&When
Algorithm-Generated that is 42 of 126 records; `fixed_subset_ids` lists them.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from fractions import Fraction
from pathlib import Path

from faultfinder.datasets import BenchmarkRecord

__all__ = [
    "FIXED_FRACTION",
    "FIXED_SUBSET_SEED",
    "SubsetError",
    "fixed_subset_ids",
    "parse_fraction",
    "pick_fraction",
    "read_record_ids",
    "select_records",
]

FIXED_SUBSET_SEED = 20251129
"""Seed of the documented subsets; change it and every published subset changes."""

FIXED_FRACTION = Fraction(1, 3)


class SubsetError(ValueError):
    """A subset specification (fraction, record-id file, unknown id) is unusable."""


def parse_fraction(text: str) -> Fraction:
    """`1/3`, `0.25` or `1` as a fraction in (0, 1]."""
    try:
        value = Fraction(text.strip())
    except (ValueError, ZeroDivisionError):
        raise SubsetError(f"fraction {text!r} is not a number like 1/3 or 0.25") from None
    if not 0 < value <= 1:
        raise SubsetError(f"fraction {text!r} must be greater than 0 and at most 1")
    return value


def pick_fraction(
    record_ids: Iterable[str], fraction: Fraction = FIXED_FRACTION, seed: int = FIXED_SUBSET_SEED
) -> list[str]:
    """round(n × fraction) ids (at least one), chosen reproducibly, returned sorted."""
    ordered = sorted(set(record_ids))
    if not ordered:
        return []
    shuffled = list(ordered)
    random.Random(seed).shuffle(shuffled)
    count = max(1, round(len(ordered) * fraction))
    chosen = set(shuffled[:count])
    return [record_id for record_id in ordered if record_id in chosen]


def select_records(
    records: Sequence[BenchmarkRecord],
    *,
    fraction: Fraction | None = None,
    seed: int = FIXED_SUBSET_SEED,
    record_ids: Sequence[str] | None = None,
) -> list[BenchmarkRecord]:
    """The records to run, in dataset order: those named in `record_ids` (every id must
    exist), else `fraction` of each dataset subset picked by `pick_fraction`, else all."""
    if record_ids is not None:
        known = {record.record_id for record in records}
        unknown = [record_id for record_id in record_ids if record_id not in known]
        if unknown:
            shown = ", ".join(unknown[:5]) + (" …" if len(unknown) > 5 else "")
            raise SubsetError(f"{len(unknown)} record id(s) not in the dataset: {shown}")
        wanted = set(record_ids)
        return [record for record in records if record.record_id in wanted]
    if fraction is None:
        return list(records)
    by_subset: dict[str, list[str]] = {}
    for record in records:
        by_subset.setdefault(record.subset, []).append(record.record_id)
    chosen: set[str] = set()
    for ids in by_subset.values():
        chosen.update(pick_fraction(ids, fraction, seed))
    return [record for record in records if record.record_id in chosen]


def fixed_subset_ids(records: Sequence[BenchmarkRecord]) -> list[str]:
    """The documented fixed third of `records` (per dataset subset), sorted."""
    return sorted(record.record_id for record in select_records(records, fraction=FIXED_FRACTION))


def read_record_ids(path: Path) -> list[str]:
    """Record ids from a text file, one per line; blank lines and `#` comments are skipped."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SubsetError(f"cannot read record list {path}: {exc.strerror or exc}") from None
    ids = []
    for line in text.splitlines():
        entry = line.split("#", 1)[0].strip()
        if entry:
            ids.append(entry)
    if not ids:
        raise SubsetError(f"record list {path} names no record ids")
    return ids
