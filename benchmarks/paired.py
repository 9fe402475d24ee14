"""The figure every benchmark here reports for a side-by-side timing: the median and
quartiles of per-pair ratios (A then B, B then A, ... in one process; DESIGN.md §7)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass
class PairedRatio:
    """Median and quartiles of per-pair time ratios (the numerator's time over the
    denominator's: > 1 means the denominator ran faster)."""

    median: float
    q1: float
    q3: float
    pairs: int

    @classmethod
    def of(cls, ratios: Sequence[float]) -> PairedRatio:
        if len(ratios) == 1:
            return cls(ratios[0], ratios[0], ratios[0], 1)
        q1, median, q3 = statistics.quantiles(ratios, n=4, method="inclusive")
        return cls(median, q1, q3, len(ratios))

    def __str__(self) -> str:
        return f"{self.median:.3f} ({self.q1:.3f}-{self.q3:.3f}, n={self.pairs})"
