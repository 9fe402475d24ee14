"""ROC's learned cost model (Jia thesis §4.4.1, eqs. 4.4-4.7).

A GNN layer's time on a set of vertices is linear in the set's summed features
(`features.FEATURES`): t(l, G) = sum_i w_i(l) x_i(G). Each layer has its own weights,
since layers differ in d_in and d_out, and each is fitted by least squares over every
measurement seen so far (eq. 4.7). The fit is non-negative (`scipy.optimize.nnls`):
a layer's time is a sum of non-negative work per vertex, edge and memory access, and
an unconstrained fit on a few points happily trades a negative weight on one feature
for a large one on a correlated feature, which then predicts negative costs for some
ranges and misleads the binary search.

Online learning: one training iteration on P partitions of an N-layer model yields
N x P points (`observe` each), and the model is refitted from all of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import nnls

from tasoc.passes.soap.roc.features import FEATURES


class CostModelError(ValueError):
    """A prediction the model has no data for; one line for the user."""


@dataclass
class LayerCostModel:
    """The per-layer linear cost models: points seen and the weights fitted to them."""

    points: dict[int, list[tuple[np.ndarray, float]]] = field(default_factory=dict)
    weights: dict[int, np.ndarray] = field(default_factory=dict)

    def observe(self, layer: int, features: np.ndarray, seconds: float) -> None:
        """Add one measurement: layer `layer` took `seconds` on a set of vertices whose
        summed features are `features` (length 5). Refit with `fit`."""
        features = np.asarray(features, dtype=np.float64)
        if features.shape != (len(FEATURES),) or not np.all(np.isfinite(features)):
            raise CostModelError(
                f"a data point has {len(FEATURES)} finite features, got {features}"
            )
        if not (np.isfinite(seconds) and seconds >= 0):
            raise CostModelError(f"a measured time is finite and non-negative, got {seconds}")
        self.points.setdefault(layer, []).append((features, float(seconds)))

    def count(self, layer: int | None = None) -> int:
        """Points seen for `layer`, or for every layer."""
        if layer is not None:
            return len(self.points.get(layer, []))
        return sum(len(p) for p in self.points.values())

    def fit(self) -> None:
        """Refit every layer's weights by non-negative least squares over all its points.

        Columns are scaled to unit norm first (x1 counts vertices, x5 memory accesses:
        orders of magnitude apart) so the solver's tolerance treats them alike; a
        feature that is zero in every point gets weight 0."""
        for layer, points in self.points.items():
            x = np.stack([p[0] for p in points])
            y = np.array([p[1] for p in points])
            norms = np.linalg.norm(x, axis=0)
            scale = np.where(norms > 0, norms, 1.0)
            solution, _ = nnls(x / scale, y)
            self.weights[layer] = solution / scale

    def predict(self, layer: int, features: np.ndarray) -> np.ndarray:
        """Predicted seconds of layer `layer` for features (..., 5)."""
        if layer not in self.weights:
            raise CostModelError(f"the cost model has no fitted weights for layer {layer}")
        return np.asarray(features) @ self.weights[layer]

    def to_arrays(self) -> list[np.ndarray]:
        """Every layer's points, layer 0 first, as (points, 6) arrays: the 5 features,
        then the seconds. What `soap-shard{search=roc}` records for a run to go on
        learning from (`from_arrays`)."""
        return [
            np.array([[*features, seconds] for features, seconds in self.points.get(layer, [])])
            for layer in range(max(self.points, default=-1) + 1)
        ]

    @classmethod
    def from_arrays(cls, arrays: list[np.ndarray]) -> LayerCostModel:
        """The model of `to_arrays`' points, fitted; CostModelError for a bad point."""
        model = cls()
        for layer, array in enumerate(arrays):
            for row in np.asarray(array, dtype=np.float64).reshape(-1, len(FEATURES) + 1):
                model.observe(layer, row[:-1], float(row[-1]))
        if model.points:
            model.fit()
        return model

    def vertex_costs(self, per_layer_features: list[np.ndarray]) -> np.ndarray:
        """Predicted seconds of each vertex summed over the layers (eq. 4.4 per layer),
        given each layer's (V, 5) vertex features: what a balanced partition splits."""
        return sum(
            (self.predict(layer, x) for layer, x in enumerate(per_layer_features)),
            start=np.zeros(len(per_layer_features[0])),
        )
