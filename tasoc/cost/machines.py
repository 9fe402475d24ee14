"""Machine models: devices, the links between them, and what moving bytes costs.

A `Machine` is FlexFlow's device topology (Jia thesis §3.4, Fig. 3.1) in the shape
real clusters have: `nodes` nodes of `devices_per_node` identical devices, one
kind of link between devices of a node (`intra`), one between nodes (`inter`) and
one between a device and its host's memory (`host`, what placement's swaps cross).
Devices are numbered node-major: device `d` is on node `d // devices_per_node`.

Every bandwidth is one direction, in bytes/s, and *per device*: `intra` is what one
device can send to the others of its node at once (all its NVLinks, or its PCIe
slot), `inter` is each device's share of its node's network (its own NIC, or a
shared NIC divided by the devices sharing it), `host` its link to host memory. Per
device, because in a sharded step every group along a mesh axis communicates at
the same time, so a device's share is what it gets.

Prices follow FlexFlow's assumption A2 (a transfer of s bytes over a link of
bandwidth b takes s / b, plus the link's latency per hop); collectives are priced
by the algorithms NCCL and MPI use (ring and tree), the faster of the two
(`Machine.collective_time`). The presets name the source of every number
(`Machine.sources`); docs/soap-shard.md lists them, and the machine file format a
user writes instead of a preset.
"""

from __future__ import annotations

import json
import math
import re
import tomllib
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

from tasoc.cost.analytic import op_class, roofline
from tasoc.cost.devices import (
    CACHE_LINE_FLOATS,
    CPU,
    DEVICES,
    H100,
    K80,
    OP_CLASSES,
    P100,
    V100,
    Device,
    Efficiency,
    OpClass,
)
from tasoc.cost.measured import cache_dir
from tasoc.ir import soap
from tasoc.ir.dag import Node
from tasoc.ir.limits import format_bytes

CollectiveKind = soap.CollectiveKind
COLLECTIVE_KINDS: tuple[CollectiveKind, ...] = get_args(CollectiveKind)
PRICED_KINDS: tuple[CollectiveKind, ...] = tuple(k for k in COLLECTIVE_KINDS if k != "all_slice")
"""The collectives that move bytes, so a link can price each (`Link.collectives`):
every kind but `all_slice`, which each device does alone."""

LinkKind = Literal["nvlink", "pcie", "infiniband", "ethernet", "host", "shared-memory", "loopback"]
LINK_KINDS: tuple[LinkKind, ...] = get_args(LinkKind)

Pricing = Literal["analytic", "measured"]
"""How a machine prices an op's task: the roofline of its device (`analytic`: the
presets, `cpu-N`, machine files by default), or the measured op table of this host
(`measured`: `tasoc.cost.op_table`, the `local` machine `tasoc machine calibrate`
writes)."""
PRICINGS: tuple[Pricing, ...] = get_args(Pricing)

LOCAL = "local"
"""The machine name that means this host as `tasoc machine calibrate` measured it: the
file `local.toml` in the cache directory (`local_machine_path`)."""


class MachineError(ValueError):
    """A machine that cannot be built: an unknown preset, a bad machine file, a device
    id or group the machine does not have. The message is one line."""


@dataclass(frozen=True)
class CollectivePrice:
    """What one collective kind delivers over a link, where it differs from the link's
    own figures: `bandwidth` in bytes/s and `latency_s` per step, read by
    `Machine.collective_time` in the same formulas. One library's collectives are
    not one link: on our VM, gloo's all-reduces between two processes cost ~1.7x what
    a link fitted to all-reduces and all-gathers together prices, its all-gathers less
    (issue 30, docs/benchmarks.md, "Round 4"), so calibration fits each kind alone."""

    bandwidth: float
    latency_s: float

    def __post_init__(self) -> None:
        if not 0 < self.bandwidth < math.inf or not 0 <= self.latency_s < math.inf:
            raise MachineError(
                "a collective's price needs a positive bandwidth and a non-negative "
                f"latency, got {self.bandwidth!r} B/s and {self.latency_s!r} s"
            )


@dataclass(frozen=True)
class Link:
    """One kind of connection: `bandwidth` in bytes/s one direction, `latency_s` the
    fixed cost of one transfer (or one step of a collective) over it, and
    `duplex_bandwidth` what both directions carry together when that is less than twice
    `bandwidth` (a PCIe link measured at 12 GB/s one way and 20 GB/s both ways), None
    when each direction runs at `bandwidth` whatever the other does. `collectives`
    prices some collective kinds on figures of their own (`CollectivePrice`,
    `for_collective`); a kind not listed, and every kind of a link without them (the
    presets', older machine files'), is priced on `bandwidth` and `latency_s`."""

    kind: LinkKind
    bandwidth: float
    latency_s: float
    duplex_bandwidth: float | None = None
    collectives: tuple[tuple[CollectiveKind, CollectivePrice], ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in LINK_KINDS:
            raise MachineError(f"link kind '{self.kind}' is not one of {', '.join(LINK_KINDS)}")
        if not 0 < self.bandwidth < math.inf:
            raise MachineError(
                f"{self.kind} link: bandwidth must be positive, got {self.bandwidth}"
            )
        if not 0 <= self.latency_s < math.inf:
            raise MachineError(
                f"{self.kind} link: latency must be non-negative, got {self.latency_s}"
            )
        for collective, price in self.collectives:
            if collective not in PRICED_KINDS or not isinstance(price, CollectivePrice):
                raise MachineError(
                    f"{self.kind} link: a collective's price is one of "
                    f"{', '.join(PRICED_KINDS)} and a CollectivePrice, got "
                    f"{collective!r} = {price!r}"
                )
        duplex = self.duplex_bandwidth
        if duplex is not None and not self.bandwidth <= duplex <= 2 * self.bandwidth:
            raise MachineError(
                f"{self.kind} link: duplex bandwidth must be between the bandwidth and "
                f"twice it, got {duplex} for {self.bandwidth}"
            )

    def for_collective(self, kind: CollectiveKind) -> Link:
        """This link as collective `kind` sees it: its `CollectivePrice`'s bandwidth and
        latency where it has one, else the link itself."""
        price = dict(self.collectives).get(kind)
        if price is None:
            return self
        return Link(self.kind, price.bandwidth, price.latency_s, self.duplex_bandwidth)

    def time(self, nbytes: float) -> float:
        """Seconds to send `nbytes` over this link (FlexFlow A2: size / bandwidth, plus
        the latency); nothing sent costs nothing."""
        return nbytes / self.bandwidth + self.latency_s if nbytes > 0 else 0.0

    def shared_time(self, nbytes: float) -> float | None:
        """Seconds `nbytes` hold the link's shared capacity (`duplex_bandwidth`), which
        both directions draw on; None when the directions do not share one."""
        if self.duplex_bandwidth is None:
            return None
        return nbytes / self.duplex_bandwidth if nbytes > 0 else 0.0


@dataclass(frozen=True)
class Machine:
    """`nodes` x `devices_per_node` identical devices and the links between them (see
    the module docstring for what each bandwidth means); `sources` cites every number."""

    name: str
    device: Device
    nodes: int
    devices_per_node: int
    intra: Link
    inter: Link | None
    host: Link
    sources: tuple[str, ...] = ()
    pricing: Pricing = "analytic"
    call_overhead_s: float = 0.0
    """What a call of a jitted step costs besides its ops and collectives (JAX's
    dispatch over the machine's devices), and `array_overhead_s` more per array it
    takes or returns: `step_overhead`. Calibrated machines measure both; the presets
    leave them 0, their figures being device time per iteration."""
    array_overhead_s: float = 0.0
    compute_scales: tuple[tuple[str, float], ...] = ()
    """Per setup of this host's devices (`setup_name`: P processes of D devices running
    a step at once), how much longer an op takes there than the measured op table
    says, which times ops on as many devices of one process: two processes each bring
    XLA threads of their own to the cores they share (on our 2-core VM, sim_validate's
    2x1 steps ran 1.38-1.43x the table's compute). `tasoc machine calibrate --processes
    P` times a probe step in its P workers at once and in one process of P devices
    (`tasoc.cost.calibration.compute_rounds`, on CPU time per device: the wall clock's
    ratio is the share of the cores each setup wins from other load) and writes their
    ratio for `Px1`;
    and it times one op of each `OpClass` alike (`calibration.class_probes`: a
    matmul, a convolution, an add, a sum, a transpose, each timed as the op table
    times an op) and writes their ratios for `Px1-CLASS` (`scale_key`), which price
    the ops of that class (`compute_scale`): the processes' threads contend for the
    cores unlike for a GEMM than for a memory-bound op. Measured pricing only; a
    setup not listed (one process, the table's own) is priced by the table as it is."""

    def __post_init__(self) -> None:
        if self.pricing not in PRICINGS:
            raise MachineError(
                f"machine {self.name}: pricing must be one of {', '.join(PRICINGS)}, "
                f"got {self.pricing!r}"
            )
        for field in ("call_overhead_s", "array_overhead_s"):
            if not 0 <= getattr(self, field) < math.inf:
                raise MachineError(
                    f"machine {self.name}: {field} must be non-negative, "
                    f"got {getattr(self, field)!r}"
                )
        for setup, scale in self.compute_scales:
            if not re.fullmatch(SCALE_PATTERN, setup) or not 0 < scale < math.inf:
                raise MachineError(
                    f"machine {self.name}: a compute scale is a setup PxD (or PxD-CLASS) "
                    f"and a positive factor, got {setup!r} = {scale!r}"
                )
        for field in ("nodes", "devices_per_node"):
            count = getattr(self, field)
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                raise MachineError(
                    f"machine {self.name}: {field} must be an integer >= 1, got {count!r}"
                )
        if self.nodes > 1 and self.inter is None:
            raise MachineError(
                f"machine {self.name}: {self.nodes} nodes but no inter-node link, "
                "so devices on different nodes cannot reach each other"
            )

    @property
    def size(self) -> int:
        """How many devices the machine has."""
        return self.nodes * self.devices_per_node

    @property
    def collectives_block_compute(self) -> bool:
        """Whether a device's collectives run on its compute stream, so that nothing
        else runs on the device meanwhile: on this host's XLA:CPU devices (`pricing =
        "measured"`) a collective is a step of the device's own executor, in process
        or over gloo; a GPU's NCCL kernels run on streams of their own, as FlexFlow's
        simulator overlaps them with compute. (On the 2-core VM, sim_validate's 1x2
        step times follow device 0's compute plus its collectives, not their overlap:
        Kendall tau 0.85 against 0.77, issue 30 in `docs/benchmarks.md`.)"""
        return self.pricing == "measured"

    def step_overhead(self, arrays: int) -> float:
        """Seconds a call of a step taking and returning `arrays` arrays in all costs
        besides its ops and collectives (`call_overhead_s`)."""
        return self.call_overhead_s + arrays * self.array_overhead_s

    def setup_of(self, running: int) -> str:
        """The setup (`setup_name`) of a step on the machine's first `running` devices,
        node-major: as many nodes (processes, on this host) as they fill, as many
        devices of each as run."""
        per_node = min(running, self.devices_per_node)
        return setup_name(math.ceil(running / self.devices_per_node), per_node)

    def compute_scale(self, running: int, op: str | None = None) -> float:
        """The factor on the measured op table's prices for a step of `running` devices
        (`compute_scales` of its setup, `setup_of`; 1 for a setup not measured); for
        the op named `op`, its class's factor in that setup where one was measured
        (`scale_key`), else the setup's."""
        scales, setup = dict(self.compute_scales), self.setup_of(running)
        if op is not None and (key := scale_key(setup, op_class(op))) in scales:
            return scales[key]
        return scales.get(setup, 1.0)

    def op_seconds(self, local: Node, running: int = 1, fused: int = -1) -> float:
        """Seconds one device takes for `local` (an op at the local shapes of the shard
        it holds) while `running` of the machine's devices run ops at once.

        Analytic pricing: the roofline of one kernel on `device` plus one launch
        (`running` changes nothing). Measured pricing: the measured table's entry,
        launch included (this host's devices share its cores, so `running` matters;
        every device of a `local` machine, processes included, is on this host), times
        the `compute_scale` of the step's setup for the op's class.
        `fused` >= 0 says the op joins the kernel of its operand `fused`'s producer
        (`tasoc.cost.fusion`): it launches nothing and does not read that operand from
        memory, so its time is the roofline of that fused variant, or the measured
        entry less the device's launch, scaled by the fused variant's roofline over the
        op's own (as `MeasuredCost` scales a measured op)."""
        alone = roofline(local, -1, False, self.device)
        if self.pricing == "measured":
            from tasoc.cost.op_table import shared_table

            seconds = shared_table().seconds(local, running, self.size)
            if fused >= 0 and alone:
                kernel = max(seconds - self.device.launch_overhead_s, 0.0)
                seconds = kernel * roofline(local, fused, False, self.device) / alone
            return seconds * self.compute_scale(running, local.op)
        if fused >= 0:
            return roofline(local, fused, False, self.device)
        return alone + self.device.launch_overhead_s

    def node(self, device: int) -> int:
        """The node `device` is on (devices are numbered node-major)."""
        if isinstance(device, bool) or not isinstance(device, int) or not 0 <= device < self.size:
            raise MachineError(
                f"machine {self.name} has devices 0..{self.size - 1}, not {device!r}"
            )
        return device // self.devices_per_node

    def path(self, a: int, b: int) -> tuple[Link, ...]:
        """The links a transfer from device `a` to device `b` crosses: none to itself,
        the intra-node link inside a node, the network between nodes. One hop across
        nodes: GPUDirect RDMA streams device memory to the NIC, so the PCIe leg to the
        NIC is pipelined with the network, not a separate store-and-forward hop."""
        node_a, node_b = self.node(a), self.node(b)
        if a == b:
            return ()
        if node_a == node_b:
            return (self.intra,)
        assert self.inter is not None  # __post_init__: several nodes have a network
        return (self.inter,)

    def transfer_time(self, nbytes: int, a: int, b: int) -> float:
        """Seconds to move `nbytes` from device `a` to device `b`: FlexFlow's A2 on each
        hop of `path` (size / bandwidth + latency), summed."""
        _check_bytes(nbytes)
        return sum(link.time(nbytes) for link in self.path(a, b))

    def collective_time(self, kind: CollectiveKind, nbytes: int, group: Sequence[int]) -> float:
        """Seconds for one collective over the devices `group`, each holding `nbytes` of
        operand (`soap.Collective.bytes`): the faster of a ring and a tree algorithm.

        With p devices, n = nbytes, a ring of bandwidth B_r and a tree whose steps run
        at the slowest link bandwidth B with the largest latency a (a ring step waits
        for its slowest hop too, so it pays a as well), L = ceil(log2 p):

        | kind | ring | tree |
        | --- | --- | --- |
        | all_gather | (p-1)(a + n/B_r) | L a + (p-1) n/B (recursive doubling) |
        | reduce_scatter | (p-1)(a + n/(p B_r)) | L a + (p-1)/p n/B (recursive halving) |
        | all_reduce | 2(p-1)(a + n/(p B_r)) | L (a + n/B) (recursive doubling) |
        | all_to_all | (p-1) a + exchange (pairwise, below) | L (a + n/(2B)) (Bruck) |

        These are the costs of Thakur, Rabenseifner and Gropp, "Optimization of
        Collective Communication Operations in MPICH" (IJHPCA 2005) without the
        reduction's arithmetic; the ring's factors 2(p-1)/p and (p-1)/p are NCCL's
        bus-bandwidth factors (nccl-tests doc/PERFORMANCE.md). So a ring wins on large
        messages (fewer bytes per device) and a tree on small ones (fewer latencies).

        Groups spanning nodes are bounded by the network: a ring over the group in id
        order crosses each node's boundary once, and NCCL runs one ring channel per
        device's NIC share, so B_r = min(intra bandwidth if any node has two of the
        group, inter bandwidth x the fewest group devices on one node); a tree step or
        an exchange pairs devices on different nodes, each at its own share, so
        B = the inter bandwidth. The pairwise exchange sends n/p to each other device
        at once over different links: its time is the largest over nodes of the bytes
        a device sends off its node over `inter`, and within it over `intra`.

        `all_slice` moves nothing (0); `replicate` is one copy of n bytes over the
        slowest link between the devices of `group` (pass the union of both groups).
        One device, or no bytes, costs 0. Each link is taken as `kind` sees it
        (`Link.for_collective`): a calibrated link may price each kind on its own
        bandwidth and latency, the same formulas otherwise.
        """
        if kind not in COLLECTIVE_KINDS:
            raise MachineError(
                f"unknown collective '{kind}' (expected {', '.join(COLLECTIVE_KINDS)})"
            )
        _check_bytes(nbytes)
        per_node = self._group_per_node(group)
        p = sum(per_node.values())
        if kind == "all_slice" or p == 1 or nbytes == 0:
            return 0.0
        used = [
            (link.for_collective(kind), channels) for link, channels in self._links_used(per_node)
        ]
        latency = max(link.latency_s for link, _ in used)
        bandwidth = min(link.bandwidth for link, _ in used)
        if kind == "replicate":
            return nbytes / bandwidth + latency
        ring_bandwidth = min(link.bandwidth * channels for link, channels in used)
        steps = math.ceil(math.log2(p))
        if kind == "all_gather":
            ring = (p - 1) * (latency + nbytes / ring_bandwidth)
            tree = steps * latency + (p - 1) * nbytes / bandwidth
        elif kind == "reduce_scatter":
            ring = (p - 1) * (latency + nbytes / p / ring_bandwidth)
            tree = steps * latency + (p - 1) / p * nbytes / bandwidth
        elif kind == "all_reduce":
            ring = 2 * (p - 1) * (latency + nbytes / p / ring_bandwidth)
            tree = steps * (latency + nbytes / bandwidth)
        else:
            ring = (p - 1) * latency + self._exchange_time(per_node, nbytes, kind)
            tree = steps * (latency + nbytes / 2 / bandwidth)
        return min(ring, tree)

    def group_shape(self, group: Sequence[int]) -> tuple[int, ...]:
        """How many devices of `group` each node it spans holds, largest first: all that
        `collective_time` depends on of a group (every node is alike), so two groups of
        one shape take equally long for every collective."""
        return tuple(sorted(self._group_per_node(group).values(), reverse=True))

    def _group_per_node(self, group: Sequence[int]) -> Counter[int]:
        """How many devices of `group` each node holds; MachineError for a device the
        machine does not have, a repeated one or an empty group."""
        if not group:
            raise MachineError(f"machine {self.name}: a collective needs at least one device")
        if len(set(group)) != len(group):
            raise MachineError(f"machine {self.name}: group {list(group)} names a device twice")
        return Counter(self.node(device) for device in group)

    def _links_used(self, per_node: Counter[int]) -> list[tuple[Link, int]]:
        """The links a collective over these devices crosses, each with the ring
        channels that run over it side by side (see `collective_time`): one inside a
        node, the fewest group devices on one node across nodes."""
        used = [(self.intra, 1)] if max(per_node.values()) > 1 else []
        if len(per_node) > 1:
            assert self.inter is not None  # __post_init__: several nodes have a network
            used.append((self.inter, min(per_node.values())))
        return used

    def _exchange_time(self, per_node: Counter[int], nbytes: int, kind: CollectiveKind) -> float:
        """The transfer time of a pairwise all-to-all (n/p to every other device, all at
        once): the busiest device's bytes off its node over `inter`, or within its node
        over `intra`, whichever takes longer, each link as `kind` sees it."""
        p = sum(per_node.values())
        intra = self.intra.for_collective(kind)
        inter = self.inter.for_collective(kind) if self.inter is not None else None
        worst = 0.0
        for count in per_node.values():
            worst = max(worst, (count - 1) * nbytes / p / intra.bandwidth)
            if inter is not None and count < p:
                worst = max(worst, (p - count) * nbytes / p / inter.bandwidth)
        return worst


def _check_bytes(nbytes: int) -> None:
    if not nbytes >= 0:
        raise MachineError(f"a transfer of {nbytes} bytes: bytes must be non-negative")


# ------------------------------------------------------------------ presets


def _gbit(gigabits_per_s: float) -> float:
    """Bytes/s of a network rate quoted in Gb/s."""
    return gigabits_per_s * 1e9 / 8


def _us(microseconds: float) -> float:
    """Seconds of a latency quoted in microseconds (as machine files give them)."""
    return microseconds / 1e6


_NCCL_LATENCY = (
    "per-step latencies from NCCL's tuning model (src/graph/tuning.cc, hwLat, LL protocol, "
    "ring): NVLink 0.47 us, PCIe 1.0 us, network 2.7 us, rounded to 0.5 / 1 / 2.7 us"
)
_PCIE3 = "PCIe 3.0 x16: 8 GT/s x 16 lanes x 128b/130b = 15.75 GB/s per direction"
_PCIE_LATENCY = _us(1.0)
_NVLINK_LATENCY = _us(0.5)
_NETWORK_LATENCY = _us(2.7)


def _link(kind: LinkKind, bandwidth: float, duplex: float | None = None) -> Link:
    """A link of `kind` with NCCL's per-step latency for its kind (`_NCCL_LATENCY`)."""
    latency = {"nvlink": _NVLINK_LATENCY, "pcie": _PCIE_LATENCY, "infiniband": _NETWORK_LATENCY}
    return Link(kind, bandwidth, latency[kind], duplex)


_PCIE3_LINK = _link("pcie", 15.75e9)

P100_CLUSTER = Machine(
    name="p100-cluster",
    device=P100,
    nodes=4,
    devices_per_node=4,
    intra=_link("nvlink", 80e9),
    inter=_link("infiniband", _gbit(100) / 4),
    host=_PCIE3_LINK,
    sources=(
        "FlexFlow's first cluster (Jia thesis §3.7.1, Fig. 3.5): 4 nodes x 4 Tesla P100, "
        "NVLink within a node, 100 Gb/s EDR InfiniBand between nodes",
        "P100 SXM2 datasheet: NVLink 160 GB/s bidirectional = 80 GB/s per direction per GPU",
        "inter: one 100 Gb/s NIC per node (assumed) shared by its 4 GPUs = 3.125 GB/s each",
        f"host: {_PCIE3} (P100 datasheet: PCIe Gen3 x16)",
        _NCCL_LATENCY,
    ),
)
"""FlexFlow's 16-GPU P100 cluster."""

K80_CLUSTER = Machine(
    name="k80-cluster",
    device=K80,
    nodes=16,
    devices_per_node=4,
    intra=_PCIE3_LINK,
    inter=_link("infiniband", _gbit(56) / 4),
    host=_link("pcie", 15.75e9 / 2),
    sources=(
        "FlexFlow's second cluster (Jia thesis §3.7.1, Fig. 3.5): 16 nodes x 4 Tesla K80 "
        "GPUs, adjacent GPUs on a separate PCIe switch, all on a shared PCIe switch to the "
        "CPUs, 56 Gb/s InfiniBand between nodes",
        f"intra: {_PCIE3} (K80 datasheet: PCIe Gen3 x16); a ring over a node crosses each "
        "board's x16 link once per direction",
        "inter: one 56 Gb/s NIC per node (assumed) shared by its 4 GPUs = 1.75 GB/s each",
        "host: the two GPUs of a K80 board share its PCIe 3.0 x16 link: 7.875 GB/s each",
        _NCCL_LATENCY,
    ),
)
"""FlexFlow's 64-GPU K80 cluster."""

V100_TENSOROPT = Machine(
    name="v100-tensoropt",
    device=V100,
    nodes=2,
    devices_per_node=8,
    intra=_link("nvlink", 150e9),
    inter=_link("infiniband", _gbit(100) / 8),
    host=_PCIE3_LINK,
    sources=(
        "TensorOpt's cluster (its §5): machines of 8 Tesla V100 16 GB joined by NVLink, "
        "RDMA over 100 Gb/s EDR InfiniBand between machines, experiments on 16 GPUs",
        "V100 SXM2 datasheet: NVLink 300 GB/s bidirectional = 150 GB/s per direction per GPU",
        "inter: one 100 Gb/s NIC per machine (assumed) shared by its 8 GPUs = 1.5625 GB/s each",
        f"host: {_PCIE3} (V100 datasheet: PCIe Gen3 x16)",
        _NCCL_LATENCY,
    ),
)
"""TensorOpt's 16-GPU V100 cluster."""

V100_SWAPADVISOR = Machine(
    name="v100-swapadvisor",
    device=V100,
    nodes=1,
    devices_per_node=1,
    intra=_link("nvlink", 150e9),
    inter=None,
    host=_link("pcie", 12e9, duplex=20e9),
    sources=(
        "SwapAdvisor's testbed (Huang thesis, SwapAdvisor evaluation): an EC2 p3.2xlarge, one "
        "V100 with 16 GB, PCIe between CPU and GPU measured at 12 GB/s unidirectional "
        "(20 GB/s bidirectional): host link 12 GB/s each way, 20 GB/s both ways together",
        "intra: V100 SXM2 NVLink, 150 GB/s per direction (unused: one device)",
        _NCCL_LATENCY,
    ),
)
"""SwapAdvisor's single V100, for placement."""

_H100_SOURCES = (
    "H100 SXM5 datasheet: NVLink 4 900 GB/s total per GPU = 450 GB/s per direction "
    "(NVSwitch: every GPU reaches every other at that rate); PCIe Gen5 128 GB/s "
    "bidirectional = 64 GB/s per direction",
    _NCCL_LATENCY,
)

H100_NODE = Machine(
    name="h100-node",
    device=H100,
    nodes=1,
    devices_per_node=8,
    intra=_link("nvlink", 450e9),
    inter=None,
    host=_link("pcie", 64e9),
    sources=("an 8 x H100 SXM node (DGX/HGX H100)", *_H100_SOURCES),
)
"""One 8 x H100 SXM node."""

H100_CLUSTER = Machine(
    name="h100-cluster",
    device=H100,
    nodes=4,
    devices_per_node=8,
    intra=_link("nvlink", 450e9),
    inter=_link("infiniband", _gbit(400)),
    host=_link("pcie", 64e9),
    sources=(
        "4 nodes of 8 x H100 SXM (DGX H100)",
        "DGX H100 datasheet: 8 single-port ConnectX-7, 400 Gb/s NDR InfiniBand, one per GPU "
        "= 50 GB/s per GPU",
        *_H100_SOURCES,
    ),
)
"""Four 8 x H100 SXM nodes on NDR InfiniBand."""

PRESETS: Mapping[str, Machine] = {
    preset.name: preset
    for preset in (
        P100_CLUSTER,
        K80_CLUSTER,
        V100_TENSOROPT,
        V100_SWAPADVISOR,
        H100_NODE,
        H100_CLUSTER,
    )
}
"""The named machines (`cpu-N` is made on demand by `cpu_machine`)."""


SHARED_MEMORY = Link("shared-memory", 20e9, _us(50.0))
"""How this machine's fake CPU devices talk, calibrated here (2-core AMD EPYC VM, JAX
0.12, XLA:CPU): they share one memory, so a transfer is a copy, and `numpy.copyto` of
64 MiB runs at 20-23 GB/s (20 GB/s taken); the latency is fitted to a collective, a
`psum` of 4 bytes on 8 fake devices in `shard_map`, which costs 60-200 us (median
over 300 runs, 3 rounds) more than an `add` in the same program: ~150 us, the tree's
3 steps of 50 us each. Re-measure on another machine: both move with its memory and
core count."""


SETUP_PATTERN = r"[1-9][0-9]*x[1-9][0-9]*"
"""A setup's name: processes x devices per process (`setup_name`)."""
SCALE_PATTERN = rf"{SETUP_PATTERN}(-({'|'.join(OP_CLASSES)}))?"
"""A key of `Machine.compute_scales`: a setup, or a setup and an op class
(`scale_key`)."""


def scale_key(setup: str, op_class: OpClass) -> str:
    """`PxD-CLASS`: the key of the compute scale of `op_class`'s ops in `setup` (a TOML
    bare key, as the machine file writes it)."""
    return f"{setup}-{op_class}"


def setup_name(processes: int, devices: int) -> str:
    """`PxD`: `processes` processes of `devices` devices each running a step together
    (a key of `Machine.compute_scales`)."""
    return f"{processes}x{devices}"


def cpu_machine(count: int) -> Machine:
    """`cpu-N`: N fake devices of this machine (`jax_num_cpu_devices`), one node, each
    priced as `devices.CPU`, joined (and joined to the host) by `SHARED_MEMORY`."""
    if count < 1:
        raise MachineError(f"cpu-{count}: a machine needs at least one device")
    return Machine(
        name=f"cpu-{count}",
        device=CPU,
        nodes=1,
        devices_per_node=count,
        intra=SHARED_MEMORY,
        inter=None,
        host=SHARED_MEMORY,
        sources=(
            "devices.CPU and machines.SHARED_MEMORY: measured on this machine (their docstrings)",
        ),
    )


def local_machine_path() -> Path:
    """Where `tasoc machine calibrate` keeps this host's machine file: `local.toml` in
    the cache directory (`measured.cache_dir`), read as `machine=local`."""
    return cache_dir() / f"{LOCAL}.toml"


def machine(spec: str) -> Machine:
    """The machine `spec` names: a preset (`PRESETS`), `cpu-N`, `local` (this host as
    last calibrated), or a path to a .json/.toml machine file (`load_machine`)."""
    if spec in PRESETS:
        return PRESETS[spec]
    if match := re.fullmatch(r"cpu-(\d+)", spec):
        return cpu_machine(int(match.group(1)))
    if spec == LOCAL:
        path = local_machine_path()
        if not path.exists():
            raise MachineError(
                f"machine 'local' is this host as calibrated, and {path} does not exist: "
                "run 'tasoc machine calibrate' first"
            )
        return load_machine(path)
    path = Path(spec)
    if path.suffix in (".json", ".toml") or path.exists():
        return load_machine(path)
    raise MachineError(
        f"unknown machine '{spec}' (expected {', '.join(PRESETS)}, cpu-N, {LOCAL}, "
        "or a .json/.toml machine file)"
    )


# ------------------------------------------------------------------ machine files

_LINK_NAMES = ("intra", "inter", "host")
_OVERHEADS = ("call_overhead_us", "array_overhead_us")
"""A machine file's step overheads (`Machine.step_overhead`), in microseconds."""
_DEVICE_NUMBERS = ("peak_flops", "mem_bandwidth", "memory_bytes", "launch_overhead_s")


def load_machine(path: Path) -> Machine:
    """The machine a .json or .toml file describes (docs/soap-shard.md, "Machines");
    MachineError naming the file and the problem otherwise."""
    where = f"machine file {path}"
    if path.suffix not in (".json", ".toml"):
        raise MachineError(f"{where}: expected a .json or .toml file")
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) else str(error)
        raise MachineError(f"{where}: cannot read it ({reason})") from None
    try:
        data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as error:
        kind = "JSON" if path.suffix == ".json" else "TOML"
        raise MachineError(f"{where}: not valid {kind}: {error}") from None
    return machine_from_dict(data, where, default_name=path.stem)


def machine_from_dict(data: object, where: str, default_name: str = "machine") -> Machine:
    """The machine a parsed machine file describes; `where` starts every error."""
    table = _table(
        data,
        where,
        "the file",
        required=("device", "devices_per_node", "links"),
        optional=("name", "nodes", "sources", "pricing", "compute_scales", *_OVERHEADS),
    )
    name = table.get("name", default_name)
    _expect(isinstance(name, str), where, "name", "a string", name)
    nodes = table.get("nodes", 1)
    for key, count in (("nodes", nodes), ("devices_per_node", table["devices_per_node"])):
        _expect(
            isinstance(count, int) and not isinstance(count, bool), where, key, "an integer", count
        )
        _expect(count >= 1, where, key, "at least 1", count)
    links = _table(table["links"], where, "links", required=("intra", "host"), optional=("inter",))
    if nodes > 1 and "inter" not in links:
        raise MachineError(
            f"{where}: {nodes} nodes but no links.inter, so devices on different nodes "
            "cannot reach each other"
        )
    sources = table.get("sources", [])
    _expect(
        isinstance(sources, list) and all(isinstance(s, str) for s in sources),
        where,
        "sources",
        "a list of strings",
        sources,
    )
    pricing = table.get("pricing", "analytic")
    _expect(pricing in PRICINGS, where, "pricing", f"one of {', '.join(PRICINGS)}", pricing)
    overheads = {key: _number(table, key, where, "") if key in table else 0 for key in _OVERHEADS}
    for key, value in overheads.items():
        _expect(value >= 0, where, key, "non-negative", value)
    parsed = {
        key: _link_from(links[key], where, f"links.{key}") for key in _LINK_NAMES if key in links
    }
    scales = table.get("compute_scales", {})
    _expect(isinstance(scales, Mapping), where, "compute_scales", "a table", scales)
    for setup in scales:
        _expect(
            bool(re.fullmatch(SCALE_PATTERN, setup)),
            where,
            "compute_scales",
            "PxD or PxD-CLASS",
            setup,
        )
        scale = _number(scales, setup, where, "compute_scales")
        _expect(scale > 0, where, f"compute_scales.{setup}", "positive", scale)
    return Machine(
        name=name,
        device=_device_from(table["device"], where, name),
        nodes=nodes,
        devices_per_node=table["devices_per_node"],
        intra=parsed["intra"],
        inter=parsed.get("inter"),
        host=parsed["host"],
        sources=tuple(sources),
        pricing=pricing,
        call_overhead_s=_us(overheads["call_overhead_us"]),
        array_overhead_s=_us(overheads["array_overhead_us"]),
        compute_scales=tuple(scales.items()),
    )


def machine_to_dict(machine: Machine) -> dict[str, Any]:
    """`machine` as a machine file's contents (json.dump it, or write it as TOML):
    what `machine_from_dict` reads back into an equal machine."""
    device: dict[str, Any] = {"name": machine.device.name}
    device |= {key: getattr(machine.device, key) for key in _DEVICE_NUMBERS}
    if machine.device.peak_flops_half is not None:
        device["peak_flops_half"] = machine.device.peak_flops_half
    device["efficiency"] = machine.device.efficiency.as_dict()
    device["access_granularity"] = machine.device.access_granularity
    if machine.device.conv_weight_relayout:
        device["conv_weight_relayout"] = True
    links = {"intra": machine.intra, "inter": machine.inter, "host": machine.host}
    return {
        "name": machine.name,
        "nodes": machine.nodes,
        "devices_per_node": machine.devices_per_node,
        "pricing": machine.pricing,
        **{
            key: seconds * 1e6
            for key, seconds in zip(
                _OVERHEADS, (machine.call_overhead_s, machine.array_overhead_s), strict=True
            )
            if seconds
        },
        "sources": list(machine.sources),
        **({"compute_scales": dict(machine.compute_scales)} if machine.compute_scales else {}),
        "device": device,
        "links": {
            key: {
                "kind": link.kind,
                "bandwidth_bytes": link.bandwidth,
                "latency_us": link.latency_s * 1e6,
                **(
                    {"duplex_bandwidth_bytes": link.duplex_bandwidth}
                    if link.duplex_bandwidth is not None
                    else {}
                ),
                **(
                    {
                        "collectives": {
                            collective: {
                                "bandwidth_bytes": price.bandwidth,
                                "latency_us": price.latency_s * 1e6,
                            }
                            for collective, price in link.collectives
                        }
                    }
                    if link.collectives
                    else {}
                ),
            }
            for key, link in links.items()
            if link is not None
        },
    }


def machine_to_toml(machine: Machine) -> str:
    """`machine` as a TOML machine file (`machine_to_dict`'s contents; the standard
    library reads TOML but does not write it, and a machine file is a few levels of
    tables of numbers and strings)."""
    return "\n".join(_toml_table(machine_to_dict(machine), "")) + "\n"


def _toml_table(table: Mapping[str, Any], name: str) -> list[str]:
    """The lines of `table` under the header `[name]` (none for the top level, nor for
    a table of tables alone): its values first, then each of its tables, as TOML
    requires."""
    values = {key: value for key, value in table.items() if not isinstance(value, Mapping)}
    lines = ["", f"[{name}]"] if name and values else []
    lines += [f"{key} = {_toml_value(value)}" for key, value in values.items()]
    for key, value in table.items():
        if isinstance(value, Mapping):
            lines += _toml_table(value, f"{name}.{key}" if name else key)
    return lines


def _toml_value(value: object) -> str:
    """A string, boolean, number or list of strings as TOML (a JSON string is a TOML basic
    string)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[\n" + "".join(f"    {_toml_value(item)},\n" for item in value) + "]"
    if isinstance(value, str):
        return json.dumps(value)
    assert isinstance(value, int | float) and math.isfinite(value)
    return repr(value)


MIN_DEVICE_MEMORY = 2**20
MAX_DEVICE_MEMORY = 2**50
"""The device memory a machine file may give (1 MiB to 1 PiB): every plan's
feasibility is judged against it (docs/soap-shard.md), so `memory_bytes = 16` (16 GB
meant, 16 bytes written) or `1e30` is refused, not taken for a device nothing fits."""


def _device_from(value: object, where: str, machine_name: str) -> Device:
    """A device preset's name, or a table of a device's numbers."""
    if isinstance(value, str):
        if value not in DEVICES:
            raise MachineError(
                f"{where}: unknown device preset '{value}' (expected {', '.join(DEVICES)})"
            )
        return DEVICES[value]
    table = _table(
        value,
        where,
        "device",
        required=_DEVICE_NUMBERS,
        optional=(
            "name",
            "peak_flops_half",
            "efficiency",
            "access_granularity",
            "conv_weight_relayout",
        ),
    )
    name = table.get("name", f"{machine_name}-device")
    _expect(isinstance(name, str), where, "device.name", "a string", name)
    numbers = {key: _number(table, key, where, "device") for key in _DEVICE_NUMBERS}
    for key in ("peak_flops", "mem_bandwidth", "memory_bytes"):
        _expect(numbers[key] > 0, where, f"device.{key}", "positive", numbers[key])
    memory = numbers["memory_bytes"]
    _expect(
        MIN_DEVICE_MEMORY <= memory <= MAX_DEVICE_MEMORY,
        where,
        "device.memory_bytes",
        f"a device's memory in bytes, {format_bytes(MIN_DEVICE_MEMORY)} to "
        f"{format_bytes(MAX_DEVICE_MEMORY)} (16 GB is 16e9)",
        memory,
    )
    _expect(
        numbers["launch_overhead_s"] >= 0,
        where,
        "device.launch_overhead_s",
        "non-negative",
        numbers["launch_overhead_s"],
    )
    half = (
        _number(table, "peak_flops_half", where, "device") if "peak_flops_half" in table else None
    )
    _expect(half is None or half > 0, where, "device.peak_flops_half", "positive", half)
    efficiency = _efficiency_from(table.get("efficiency", {}), where)
    granularity = table.get("access_granularity", CACHE_LINE_FLOATS)
    _expect(
        isinstance(granularity, int) and not isinstance(granularity, bool) and granularity >= 1,
        where,
        "device.access_granularity",
        "float32 elements per memory access, an integer >= 1",
        granularity,
    )
    relayout = table.get("conv_weight_relayout", False)
    _expect(
        isinstance(relayout, bool), where, "device.conv_weight_relayout", "true or false", relayout
    )
    return Device(
        name=name,
        peak_flops_half=half,
        efficiency=efficiency,
        access_granularity=granularity,
        conv_weight_relayout=relayout,
        **numbers,
    )


def _efficiency_from(value: object, where: str) -> Efficiency:
    """A device's `efficiency` table: any of the op classes, each a fraction in (0, 1];
    a class left out runs at the roofline (1.0), as a measured device's would."""
    table = _table(value, where, "device.efficiency", required=(), optional=OP_CLASSES)
    for key in table:
        fraction = _number(table, key, where, "device.efficiency")
        _expect(0 < fraction <= 1, where, f"device.efficiency.{key}", "in (0, 1]", fraction)
    return Efficiency(**table)


def _link_from(value: object, where: str, key: str) -> Link:
    """A link table: kind, bandwidth_gbps (Gb/s) or bandwidth_bytes (bytes/s), latency_us,
    optionally duplex_bandwidth_bytes (both directions together, `Link`) and a table
    `collectives` of per-kind prices (`_prices_from`)."""
    table = _table(
        value,
        where,
        key,
        required=("kind", "latency_us"),
        optional=("bandwidth_gbps", "bandwidth_bytes", "duplex_bandwidth_bytes", "collectives"),
    )
    kind = table["kind"]
    _expect(kind in LINK_KINDS, where, f"{key}.kind", f"one of {', '.join(LINK_KINDS)}", kind)
    bandwidth, latency = _bandwidth_latency(table, where, key)
    duplex = table.get("duplex_bandwidth_bytes")
    if duplex is not None:
        duplex = float(_number(table, "duplex_bandwidth_bytes", where, key))
    prices = _prices_from(table.get("collectives", {}), where, f"{key}.collectives")
    return Link(kind, bandwidth, latency, duplex, prices)


def _bandwidth_latency(table: Mapping[str, Any], where: str, key: str) -> tuple[float, float]:
    """(bytes/s, seconds) of a table giving latency_us and exactly one of bandwidth_gbps
    (Gb/s) or bandwidth_bytes (bytes/s): a link's, or a collective kind's on it."""
    given = [unit for unit in ("bandwidth_gbps", "bandwidth_bytes") if unit in table]
    if len(given) != 1:
        raise MachineError(f"{where}: {key} needs exactly one of bandwidth_gbps, bandwidth_bytes")
    bandwidth = _number(table, given[0], where, key)
    _expect(bandwidth > 0, where, f"{key}.{given[0]}", "positive", bandwidth)
    latency = _number(table, "latency_us", where, key)
    _expect(latency >= 0, where, f"{key}.latency_us", "non-negative", latency)
    return _gbit(bandwidth) if given[0] == "bandwidth_gbps" else float(bandwidth), _us(latency)


def _prices_from(
    value: object, where: str, key: str
) -> tuple[tuple[CollectiveKind, CollectivePrice], ...]:
    """A link's `collectives` table: for each collective kind it names (one of
    `PRICED_KINDS`), a table of latency_us and bandwidth_bytes or bandwidth_gbps
    (`Link.collectives`)."""
    table = _table(value, where, key, required=(), optional=PRICED_KINDS)
    return tuple(
        (
            kind,
            CollectivePrice(
                *_bandwidth_latency(
                    _table(
                        table[kind],
                        where,
                        f"{key}.{kind}",
                        required=("latency_us",),
                        optional=("bandwidth_gbps", "bandwidth_bytes"),
                    ),
                    where,
                    f"{key}.{kind}",
                )
            ),
        )
        for kind in PRICED_KINDS
        if kind in table
    )


def _table(
    value: object, where: str, key: str, required: tuple[str, ...], optional: tuple[str, ...]
) -> Mapping[str, Any]:
    """`value` as a table with exactly these keys (all of `required`, any of `optional`)."""
    _expect(isinstance(value, Mapping), where, key, "a table", value)
    assert isinstance(value, Mapping)
    expected = (*required, *optional)
    for name in value:
        if name not in expected:
            raise MachineError(
                f"{where}: unknown key '{name}' in {key} (expected {', '.join(expected)})"
            )
    for name in required:
        if name not in value:
            raise MachineError(f"{where}: missing key '{name}' in {key}")
    return value


def _number(table: Mapping[str, Any], key: str, where: str, prefix: str) -> float:
    """A finite number (int or float, never a bool or a string) from `table`."""
    value = table[key]
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    _expect(ok, where, f"{prefix}.{key}" if prefix else key, "a number", value)
    return value


def _expect(condition: bool, where: str, key: str, what: str, value: object) -> None:
    if not condition:
        raise MachineError(f"{where}: {key} must be {what}, got {value!r}")
