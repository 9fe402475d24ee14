"""The cost-model interface passes program against, and the fused-sum evaluator
that both concrete models share.

A search evaluates thousands of candidate dags that share almost all their nodes
(nodes are hash-consed), so `FusedSumCost` caches each node's work per fusion
variant, keyed weakly by the node itself: evaluating a candidate is one pass over
its ops with a dictionary lookup each, and only the nodes a rewrite created (and
those whose fusion it changed) are ever priced.
"""

from __future__ import annotations

import math
import weakref
from typing import Protocol, runtime_checkable

from tasoc.cost.devices import Device
from tasoc.cost.fusion import FusionPlan, plan_fusion, relaid_out_weights, relayout, weight_bytes
from tasoc.ir.dag import Dag, Node, Value
from tasoc.ir.limits import bytes_and_size, format_bytes


class CostError(ValueError):
    """A cost that cannot be computed (an impossible memory limit, for one)."""


class OutOfTime(CostError):
    """A price needed a measurement (an op, a region) after the model's `budget` ran
    out: the search that asked stops there and returns the best graph it priced."""


class Budget(Protocol):
    """When a cost model must stop measuring: `tasoc.passes.search.Deadline` is one
    (a protocol, since `cost/` imports no pass)."""

    def expired(self) -> bool: ...


@runtime_checkable
class CostModel(Protocol):
    """Predicted run time of a graph in seconds; `math.inf` when it cannot run
    (over the memory limit)."""

    def cost(self, dag: Dag) -> float: ...

    def describe(self) -> str: ...


def check_memory_limit(memory_limit: float | None) -> float | None:
    if memory_limit is not None and not memory_limit > 0:
        raise ValueError(f"memory limit must be a positive number of bytes, got {memory_limit}")
    return memory_limit


_Variant = tuple[int, bool]
Work = tuple[float, float]
"""(compute seconds, memory seconds) an op adds to its kernel."""


class FusedSumCost:
    """A graph's time as the sum of its kernels' times under the fusion model
    (`tasoc.cost.fusion`), infinite when its peak memory exceeds `memory_limit`.

    A kernel (an op and the ops fused into it) takes `device.launch_overhead_s` plus
    the roofline of its members' summed work: max(sum of compute seconds, sum of
    memory seconds), so a memory-bound epilogue hides under a compute-bound matmul.
    A layout view adds no work (XLA folds it into its convolution, which is priced
    as reading its weight); where the device relays out convolution weights
    (`Device.conv_weight_relayout`), each weight relaid out on every call
    (`fusion.relaid_out_weights`) adds a kernel: what its transpose to HWIO costs.
    Subclasses say what work one op adds in one fusion variant (`op_work`). `misses`
    counts the (node, variant) works computed rather than found in the cache, so
    tests and benchmarks can see the cache work.
    """

    def __init__(
        self,
        device: Device,
        memory_limit: float | None = None,
        fusion: bool = True,
        fold_weights: bool = True,
    ) -> None:
        self.device = device
        self.memory_limit = check_memory_limit(memory_limit)
        self.fusion = fusion
        self.fold_weights = fold_weights
        self.misses = 0
        self.budget: Budget | None = None
        """The time a model that measures (`MeasuredCost`, `XlaCost`) may spend on it:
        set by the search pricing with it (`tasoc.passes.search.charging`), so that
        measuring is charged to the pass's `timeout`; None: no limit."""
        self._works: weakref.WeakKeyDictionary[Node, dict[_Variant, Work]] = (
            weakref.WeakKeyDictionary()
        )
        self._relayouts: weakref.WeakKeyDictionary[Node, dict[int, Work]] = (
            weakref.WeakKeyDictionary()
        )

    def cost(self, dag: Dag) -> float:
        plan = plan_fusion(dag, self.fusion, self.fold_weights)
        if self.memory_limit is not None and _over_memory(plan, self.memory_limit):
            return math.inf
        kernel_of: dict[Node, int] = {}
        compute: list[float] = []
        memory: list[float] = []
        views = plan.views
        for node, fused, internal in zip(plan.running, plan.fused, plan.internal, strict=True):
            if node in views:  # folded into its convolutions: no work of its own
                work = (0.0, 0.0)
            elif fused >= 0 and node.inputs[fused].node in views:
                work = self._work(node, -1, internal)  # the convolution reads its weight
            else:
                work = self._work(node, fused, internal)
            if fused < 0:
                kernel = kernel_of[node] = len(compute)
                compute.append(work[0])
                memory.append(work[1])
            else:
                kernel = kernel_of[node] = kernel_of[node.inputs[fused].node]
                compute[kernel] += work[0]
                memory[kernel] += work[1]
        if self.device.conv_weight_relayout:
            for weight in relaid_out_weights(plan):  # a kernel each, on every call
                compute_s, memory_s = self._relayout_work(weight)
                compute.append(compute_s)
                memory.append(memory_s)
        launches = len(compute) * self.device.launch_overhead_s
        return launches + sum(map(max, compute, memory))

    def _work(self, node: Node, fused: int, internal: bool) -> Work:
        """`op_work`, cached per node and fusion variant."""
        variants = self._works.get(node)
        if variants is None:
            variants = self._works[node] = {}
        work = variants.get((fused, internal))
        if work is None:
            work = variants[fused, internal] = self.op_work(node, fused, internal)
            self.misses += 1
        return work

    def _relayout_work(self, weight: Value) -> Work:
        """The work of relaying out `weight` (`fusion.relayout`: its transpose to HWIO,
        a kernel of its own), cached by the weight: the transpose node is made only to
        be priced, so the cache cannot be keyed by it."""
        works = self._relayouts.get(weight.node)
        if works is None:
            works = self._relayouts[weight.node] = {}
        work = works.get(weight.index)
        if work is None:
            work = works[weight.index] = self.op_work(relayout(weight), -1, False)
            self.misses += 1
        return work

    def op_work(self, node: Node, fused: int, internal: bool) -> Work:
        """What `node` adds to its kernel in this fusion variant (`fusion.FusionPlan`)."""
        raise NotImplementedError

    def check_budget(self) -> None:
        """Called before and after each new measurement: OutOfTime once `budget` has
        expired. A measurement already running is let finish (a compile cannot be
        interrupted) and its time is cached, but a price it ends past the budget is
        not used: the search stops there, at most one measurement late."""
        if self.budget is not None and self.budget.expired():
            raise OutOfTime("the time ran out measuring an uncached op or region")

    def _options(self) -> str:
        """The shared part of `describe()`."""
        parts = ["XLA fusion" if self.fusion else "no fusion"]
        if self.fold_weights:
            parts.append("weight-only ops preprocessed")
        if self.memory_limit is not None:
            parts.append(f"memory limit {format_bytes(int(self.memory_limit))}")
        return ", ".join(parts)


def _over_memory(plan: FusionPlan, limit: float) -> bool:
    """Whether the plan's peak memory exceeds `limit`; CostError when even the
    graph's weights do not fit, since no rewrite removes the weights a graph is given."""
    weights = weight_bytes(plan.dag)
    if limit < weights:
        raise CostError(
            f"impossible memory limit: {bytes_and_size(int(limit))} < weights "
            f"{bytes_and_size(weights)}"
        )
    return plan.peak_bytes() > limit
