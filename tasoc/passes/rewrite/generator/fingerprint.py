"""Fingerprints: which values, and which graphs, compute the same tensors.

A value's fingerprint is a 128-bit digest of its shape and of its exact contents
(integers modulo `evaluate.PRIME`) at every fingerprint shape set, on fixed random
inputs; values with one fingerprint form a *class*, numbered in order of discovery.
A graph's fingerprint is TASO's two-step hash (thesis eq. 2.1) made exact: hash_1 is
the class of an output, hash_2 the sorted tuple of the outputs' classes, symmetric
in the outputs as it must be (a graph's outputs have no order of their own).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

import numpy as np


def value_key(shapes: Sequence[tuple[int, ...]], arrays: Sequence[np.ndarray]) -> bytes:
    """The fingerprint of one value from its shape and exact contents per set."""
    digest = hashlib.blake2b(digest_size=16)
    for shape, array in zip(shapes, arrays, strict=False):
        digest.update(np.asarray(shape, dtype=np.int64).tobytes())
        digest.update(np.ascontiguousarray(array, dtype=np.int64).tobytes())
    return digest.digest()


def graph_fingerprint(output_classes: Iterable[int]) -> tuple[int, ...]:
    """The fingerprint of a graph from the classes of its outputs."""
    return tuple(sorted(output_classes))
