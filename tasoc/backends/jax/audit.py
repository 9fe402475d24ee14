"""The HLO audit: the collectives a compiled sharded program runs beside those its IR asks for.

A sharded program makes all communication explicit (`parallel` ops, plus the
statistics all-reduces of ops with split `synced` factors), so what XLA compiles
should communicate exactly that. XLA is free to differ: its combiners merge
all-reduces, it may decompose an all-to-all or add a collective-permute. The audit
reads the optimized HLO (`compiled().as_text()`), lists each collective with its
operand bytes per device and replica groups, and compares per kind with the IR:
equal counts and total bytes within 5 % are "ok", anything else is named ("XLA
added", "removed", "changed the bytes", or "combined"/"split" when the bytes are the
same in fewer or more collectives) and shown as found, never hidden. The same program
cross-lowered for CUDA (StableHLO, before XLA's optimizations; no GPU needed) gives
the collectives a GPU compile would start from.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import SSAValue

from tasoc.backends.jax.lowering import jax_dtype
from tasoc.backends.jax.sharded import MOMENTS, SYNCED_LOWERINGS, ShardedProgram
from tasoc.ir import soap
from tasoc.ir.graph import GraphOp, sig_of
from tasoc.ir.parallel import CollectiveOp, lookup_mesh, meshes, sharding_of

KINDS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")
"""The HLO collectives the audit counts (names as HLO spells them)."""

BYTES_TOLERANCE = 0.05
"""How far the found bytes of a kind may be from the asked before it is "changed"."""

STATISTICS_BYTES = 4
"""Bytes per statistic of a synced op: its sharded kernel reduces in float32."""


@dataclass(frozen=True, slots=True)
class Asked:
    """One collective the IR asks for: HLO kind, mesh axes, operand bytes per device
    and the op asking (a `parallel` collective, or a synced op's statistics)."""

    kind: str
    axes: tuple[str, ...]
    bytes: int
    source: str


@dataclass(frozen=True, slots=True)
class Found:
    """One collective of the compiled HLO: kind, operand bytes per device, groups."""

    kind: str
    bytes: int
    replica_groups: str


@dataclass(frozen=True, slots=True)
class KindRow:
    """One kind side by side: the IR's, the CPU HLO's and the CUDA StableHLO's."""

    kind: str
    asked: int
    asked_bytes: int
    found: int
    found_bytes: int
    cuda: int
    verdict: str


@dataclass(frozen=True)
class Audit:
    asked: list[Asked]
    found: list[Found]
    rows: list[KindRow]

    @property
    def ok(self) -> bool:
        """Every kind in equal count and bytes."""
        return all(row.verdict == "ok" for row in self.rows)

    @property
    def same_bytes(self) -> bool:
        """Every kind with the bytes asked for, perhaps in combined collectives."""
        return all(
            row.verdict == "ok" or row.verdict.endswith("the same bytes") for row in self.rows
        )

    def summary(self) -> str:
        if self.ok:
            return "the compiled collectives are the ones the IR asks for"
        if self.same_bytes:
            return "the kinds and bytes the IR asks for, in collectives XLA combined or split"
        return "XLA's collectives differ from the IR's"

    def to_json(self) -> dict[str, object]:
        return {
            "ok": self.ok,
            "same_bytes": self.same_bytes,
            "kinds": [asdict(row) for row in self.rows],
            "asked": [asdict(a) for a in self.asked],
            "found": [asdict(f) for f in self.found],
        }

    def table(self) -> list[str]:
        """The per-kind table and one line per collective found, for the terminal."""
        header = ("kind", "IR", "IR bytes", "CPU HLO", "HLO bytes", "CUDA", "")
        lines = [header] + [
            (
                r.kind,
                str(r.asked),
                str(r.asked_bytes),
                str(r.found),
                str(r.found_bytes),
                str(r.cuda),
                r.verdict,
            )
            for r in self.rows
        ]
        widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
        text = [
            "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
            for line in lines
        ]
        text += [f"  HLO {f.kind}: {f.bytes} bytes, groups {f.replica_groups}" for f in self.found]
        return text


# ------------------------------------------------------------------------ the IR

_HLO_KIND = {
    "all_gather": "all-gather",
    "all_reduce": "all-reduce",
    "reduce_scatter": "reduce-scatter",
    "all_to_all": "all-to-all",
}


def _moved_axes(op: CollectiveOp) -> tuple[str, ...]:
    source, target = sharding_of(sig_of(op.input.type)), sharding_of(sig_of(op.output.type))
    assert source is not None and target is not None
    unreduced = tuple(a for a in source.unreduced if a not in target.unreduced)
    split = tuple(a for s, t in zip(source.dims, target.dims, strict=True) for a in s if a not in t)
    return unreduced or split


def asked_collectives(module: ModuleOp) -> list[Asked]:
    """The collectives `module` asks for, in program order (all_slice asks for none)."""
    asked: list[Asked] = []
    moments: set[tuple[SSAValue, tuple[str, ...]]] = set()
    for op in module.walk():
        if isinstance(op, CollectiveOp) and op.KIND in _HLO_KIND:
            sig = sig_of(op.input.type)
            sharding = sharding_of(sig)
            assert sharding is not None
            mesh = lookup_mesh(op, sharding.mesh)
            local = math.prod(sharding.local_shape(sig.shape, mesh))
            size = local * jax_dtype(sig.dtype).itemsize
            asked.append(Asked(_HLO_KIND[op.KIND], _moved_axes(op), size, op.name))
        elif isinstance(op, GraphOp) and op.op_name() in SYNCED_LOWERINGS:
            asked += _statistics(op, moments)
    return asked


def _statistics(op: GraphOp, moments: set[tuple[SSAValue, tuple[str, ...]]]) -> list[Asked]:
    """The all-reduces of a synced op's sharded kernel (none unless a synced factor
    is split), each of per-channel float32 statistics; the moments of a value over
    the same axes once (`moments`: those already asked for)."""
    in_sigs = [sig_of(v.type) for v in op.operands]
    out_sigs = [sig_of(r.type) for r in op.results]
    shardings = [sharding_of(sig) for sig in in_sigs]
    assert all(s is not None for s in shardings)
    mesh = lookup_mesh(op, shardings[0].mesh)  # type: ignore[union-attr]
    rule = soap.rule_of(op.op_name(), in_sigs, op.py_attrs(), out_sigs)
    _, config = soap.propagate(rule, shardings, mesh.name)  # type: ignore[arg-type]
    synced = soap.internal_collectives(rule, config)
    if not synced:
        return []
    axes = tuple(axis for _, factor_axes in synced for axis in factor_axes)
    channels = shardings[0].local_shape(in_sigs[0].shape, mesh)[1]  # type: ignore[union-attr]
    counts = list(SYNCED_LOWERINGS[op.op_name()].statistics)
    if (op.operands[0], axes) not in moments:
        moments.add((op.operands[0], axes))
        counts = [*MOMENTS, *counts]
    return [
        Asked("all-reduce", axes, count * channels * STATISTICS_BYTES, f"{op.name} statistics")
        for count in counts
    ]


# ---------------------------------------------------------------------- the HLO

_COMMENT = re.compile(r"/\*.*?\*/")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?(?P<name>[\w.\-]+)\s*=\s*(?P<rest>.*)$")
_ARRAY = re.compile(r"\b(pred|[subf]\d+|bf16|f8\w*|c64|c128)\[([\d,]*)\]")
_GROUPS = re.compile(
    r"(?:replica_groups|source_target_pairs)=(.*?)"
    r"(?=, (?:dimensions|use_global_device_ids|to_apply|channel_id|constrain_layout|"
    r"metadata|backend_config|frontend_attributes|slice_sizes)=|$)"
)
_BITS = {"pred": 8, "bf16": 16, "c64": 64, "c128": 128}


def _type_bytes(text: str) -> int:
    """Bytes of an HLO type (`f32[4,8]{1,0}`, or a tuple of them)."""
    total = 0
    for element, dims in _ARRAY.findall(text):
        bits = _BITS.get(element) or int(re.sub(r"\D", "", element.split("e")[0]) or 8)
        total += math.prod(int(d) for d in dims.split(",") if d) * bits // 8
    return total


def _split_type(rest: str) -> tuple[str, str]:
    """(type, the rest) of an instruction's right-hand side; tuple types nest parens."""
    if not rest.startswith("("):
        head, _, tail = rest.partition(" ")
        return head, tail
    depth = 0
    for index, char in enumerate(rest):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0:
            return rest[: index + 1], rest[index + 1 :].lstrip()
    return rest, ""


def hlo_collectives(hlo: str) -> list[Found]:
    """The collectives of an HLO module's text, each with its operand bytes per device
    (operands named by instruction, their types looked up) and its replica groups.
    Async pairs count once, at their `-start`."""
    types: dict[str, str] = {}
    found = []
    for line in hlo.splitlines():
        match = _INSTRUCTION.match(_COMMENT.sub("", line))
        if not match:
            continue
        type_, body = _split_type(match["rest"])
        types[match["name"]] = type_
        opcode, _, tail = body.partition("(")
        kind = opcode.removesuffix("-start")
        if kind not in KINDS or opcode.endswith("-done"):
            continue
        operands = tail.split(")", 1)[0]
        size = 0
        for operand in operands.split(","):
            operand = operand.strip()
            shaped = _type_bytes(operand)
            size += shaped or _type_bytes(types.get(operand.lstrip("%"), ""))
        groups = _GROUPS.search(tail)
        found.append(Found(kind, size, groups.group(1) if groups else "all devices"))
    return found


def stablehlo_counts(text: str) -> Counter[str]:
    """Collectives by HLO kind in StableHLO text (`stablehlo.all_reduce`, ...)."""
    return Counter({kind: text.count(f"stablehlo.{kind.replace('-', '_')}") for kind in KINDS})


# ---------------------------------------------------------------- the comparison


def verdict(asked: Sequence[Asked], found: Sequence[Found]) -> str:
    """ "ok", or how XLA differs: exactly the same bytes in fewer or more collectives is
    a combiner's or a decomposition's work; fewer or more bytes in other counts is
    collectives removed or added, said with the bytes (a small collective dropped is
    within the byte tolerance, so the tolerance only excuses equal counts)."""
    want, have = sum(a.bytes for a in asked), sum(f.bytes for f in found)
    if len(found) == len(asked):
        return (
            "ok"
            if abs(have - want) <= BYTES_TOLERANCE * max(want, 1)
            else ("XLA changed the bytes")
        )
    if have == want and asked and found:
        joined = "combined" if len(found) < len(asked) else "split"
        return f"XLA {joined} {len(asked)} into {len(found)}, the same bytes"
    if len(found) > len(asked):
        return f"XLA added {len(found) - len(asked)} ({have - want:+d} bytes)"
    return f"XLA removed {len(asked) - len(found)} ({have - want:+d} bytes)"


def audit(module: ModuleOp, program: ShardedProgram) -> Audit:
    """The audit of `program` (lowered from `module`): compiles it for this machine
    and cross-lowers it for CUDA."""
    if len(meshes(module)) != 1:
        raise ValueError("the audit reads programs on one mesh")
    asked = asked_collectives(module)
    found = hlo_collectives(program.compiled().as_text())
    cuda = stablehlo_counts(program.lowered("cuda").as_text())
    rows = []
    for kind in KINDS:
        mine = [a for a in asked if a.kind == kind]
        theirs = [f for f in found if f.kind == kind]
        if not mine and not theirs and not cuda[kind]:
            continue
        rows.append(
            KindRow(
                kind,
                len(mine),
                sum(a.bytes for a in mine),
                len(theirs),
                sum(f.bytes for f in theirs),
                cuda[kind],
                verdict(mine, theirs),
            )
        )
    return Audit(asked, found, rows)
