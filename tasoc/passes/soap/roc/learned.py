"""ROC's learned graph partitioner (Jia thesis §4.4): online linear regression.

The loop, as ROC runs it during training:

1. start from equal-vertex ranges;
2. time every layer on every partition (one training iteration: N layers x P parts
   measurements), add them to the cost model as data points, refit (eq. 4.7);
3. re-partition: the ranges whose largest predicted cost, summed over the layers, is
   least (`balance.balanced_bounds` over the prefix sums of the predicted per-vertex
   costs, §4.4.2);
4. repeat for a few iterations, and keep the partition whose measured epoch (each
   layer's slowest partition, summed) was fastest.

Times come from `tasoc.cost.gnn.layer_timer(request.machine)`: measured here on CPU
devices, simulated on GPU presets. Tests pass a `measure` of their own. The cost model
can be passed in to keep learning across requests (the thesis' inference on new
graphs reuses the model learned in training).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from tasoc.cost.gnn import layer_timer
from tasoc.ir.graph_data import Csr
from tasoc.passes.soap.roc.balance import balanced_bounds
from tasoc.passes.soap.roc.cost_model import LayerCostModel
from tasoc.passes.soap.roc.features import PrefixFeatures
from tasoc.passes.soap.roc.partition import (
    PartitionRequest,
    VertexPartition,
    check_parts,
    equal_vertex,
    ranges,
)

DEFAULT_ITERATIONS = 4
"""Training iterations the partitioner learns over (each adds layers x parts points)."""

Measure = Callable[[PartitionRequest, VertexPartition], np.ndarray]
"""Seconds of every layer on every part of a partition: (layers, parts)."""


def machine_measure(
    request: PartitionRequest, partition: VertexPartition, repeats: int = 5
) -> np.ndarray:
    """Each layer's time on each part, from the request's machine (`layer_timer`;
    `repeats` runs of each measured one)."""
    timer = replace(layer_timer(request.machine), repeats=repeats)
    return np.array(
        [
            [
                timer(request.graph, partition.order[start:stop], d_in, d_out)
                for start, stop in zip(partition.bounds[:-1], partition.bounds[1:], strict=True)
            ]
            for d_in, d_out in request.layers
        ]
    )


def granularity_of(machine: str) -> int:
    """The memory-access granularity of the request's machine (features x4, x5)."""
    return layer_timer(machine).device.access_granularity


def epoch_seconds(times: np.ndarray) -> float:
    """An epoch's time from (layers, parts) times: every layer waits for its slowest
    part before the next starts."""
    return float(np.max(times, axis=1).sum())


@dataclass
class Iteration:
    """One step of the loop: the partition tried, its measured (layers, parts) times,
    and what the model predicted for it before measuring (None on the first)."""

    partition: VertexPartition
    times: np.ndarray
    predicted: np.ndarray | None

    @property
    def epoch(self) -> float:
        return epoch_seconds(self.times)


@dataclass
class RocResult:
    """The best partition measured, the model learned and every iteration."""

    partition: VertexPartition
    model: LayerCostModel
    history: list[Iteration] = field(default_factory=list)


@dataclass
class OnlineBalancer:
    """The learning half of the loop on one graph: every measured partition's (layers,
    parts) times become points of the cost model (`learn`), and the model's balanced
    ranges are the next partition (`balance`). `roc_partition` runs it for a few
    iterations inside `soap-shard`; `tasoc run --repartition-every` runs it as the
    model trains (`tasoc/driver/repartition.py`)."""

    graph: Csr
    parts: int
    prefix: PrefixFeatures
    model: LayerCostModel

    @classmethod
    def of(
        cls,
        request: PartitionRequest,
        model: LayerCostModel | None = None,
        granularity: int | None = None,
    ) -> OnlineBalancer:
        """A balancer for `request`'s graph, layers and machine (its granularity,
        unless given), learning into `model` (a new one when None)."""
        check_parts(request.graph, request.parts)
        granularity = granularity or granularity_of(request.machine)
        d_ins = tuple(d_in for d_in, _ in request.layers)
        prefix = PrefixFeatures.of(request.graph, d_ins, granularity)
        model = model if model is not None else LayerCostModel()
        return cls(request.graph, request.parts, prefix, model)

    def learn(self, bounds: np.ndarray, times: np.ndarray) -> None:
        """Add the (layers, parts) `times` measured on the ranges `bounds` as points of
        the cost model, and refit it (eq. 4.7)."""
        features = self.prefix.parts(bounds)
        for layer, part in np.ndindex(times.shape):
            self.model.observe(layer, features[layer, part], float(times[layer, part]))
        self.model.fit()

    def predict(self, bounds: np.ndarray) -> np.ndarray:
        """The fitted model's (layers, parts) seconds of the ranges `bounds`."""
        return np.stack(
            [self.model.predict(layer, f) for layer, f in enumerate(self.prefix.parts(bounds))]
        )

    def balance(self) -> VertexPartition:
        """The ranges whose largest predicted cost, summed over the layers, is least
        (`balanced_bounds` over the predicted per-vertex costs, §4.4.2)."""
        layers = self.prefix.sums.shape[0]
        per_layer = [np.diff(self.prefix.sums[layer], axis=0) for layer in range(layers)]
        costs = np.maximum(self.model.vertex_costs(per_layer), 0.0)
        return ranges(self.graph, balanced_bounds(costs, self.parts))


def roc_partition(
    request: PartitionRequest,
    iterations: int = DEFAULT_ITERATIONS,
    measure: Measure | None = None,
    model: LayerCostModel | None = None,
    granularity: int | None = None,
) -> RocResult:
    """Run ROC's online-learning loop for `iterations` measured partitions."""
    if iterations < 1:
        raise ValueError(f"the partitioner needs at least one iteration, got {iterations}")
    measure = measure or machine_measure
    balancer = OnlineBalancer.of(request, model, granularity)
    partition = equal_vertex(request.graph, request.parts)
    history: list[Iteration] = []
    predicted = None
    for _ in range(iterations):
        times = measure(request, partition)
        history.append(Iteration(partition, times, predicted))
        balancer.learn(partition.bounds, times)
        partition = balancer.balance()
        predicted = balancer.predict(partition.bounds)
    best = min(history, key=lambda step: step.epoch)
    return RocResult(best.partition, balancer.model, history)
