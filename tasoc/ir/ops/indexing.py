"""Indexing: `embedding` (row lookup), `gather` (NumPy's take along an axis) and
`scatter_add` (an embedding table's gradient).

Which rows or entries a device needs depends on the indices' values, so the gathered
axis never splits. A lookup reads only the entries it gathers (`gathers` names the
indices operand, for the cost model). The kernels differ by backend: the reference
raises on an index out of range, which a jitted function cannot.
"""

from __future__ import annotations

from collections.abc import Sequence

from tasoc.ir.opdef import OpDef, define
from tasoc.ir.shapes import (
    Attrs,
    ShapeError,
    TensorSig,
    axis_index,
    fmt_shape,
    int_attr,
    need_float,
    need_indices,
)
from tasoc.ir.soap import Factor, OpRule
from tasoc.ir.soap_rules import (
    Inputs,
    Results,
    all_but,
    op_rule,
)

# ------------------------------------------------------------------ typing


def _embedding_type(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    ids, table = inputs
    need_indices(ids, "indices")
    if table.rank != 2:
        raise ShapeError(f"table must be 2-D (vocabulary x features), got {fmt_shape(table.shape)}")
    return [TensorSig((*ids.shape, table.shape[1]), table.dtype)]


def _gather_type(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    data, indices = inputs
    need_indices(indices, "indices")
    axis = axis_index(int_attr(attrs, "axis"), data.rank)
    return [TensorSig((*data.shape[:axis], *indices.shape, *data.shape[axis + 1 :]), data.dtype)]


def _scatter_add_type(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    ids, updates = inputs
    need_indices(ids, "ids")
    need_float(updates, "updates")
    if updates.rank != ids.rank + 1 or updates.shape[:-1] != ids.shape:
        raise ShapeError(
            f"updates must have the shape of ids ({fmt_shape(ids.shape)}) plus a feature axis, "
            f"got {fmt_shape(updates.shape)}"
        )
    rows = int_attr(attrs, "rows")
    if rows < 0:
        raise ShapeError(f"rows must not be negative, got {rows}")
    return [TensorSig((rows, updates.shape[-1]), updates.dtype)]


# ---------------------------------------------------------------- SOAP rules
def _embedding_soap(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    ids, table = inputs
    factors, dims = all_but(ids, ())
    factors.append(Factor("f", table.shape[1], "parameter"))
    # A table's rows do not split: which rows a device needs depends on the ids.
    return op_rule(factors, [dims, (None, "f")], [(*dims, "f")], ((1,),))


def _gather_soap(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    # Data's other dims and the indices' dims split; the gathered axis does not (which
    # entries a device needs depends on the indices). Linear in the data.
    data, indices = inputs
    axis = attrs["axis"] % data.rank
    factors, data_dims = all_but(data, [axis])
    index_factors, index_dims = all_but(indices, (), prefix="i")
    factors += [Factor(f.name, f.size, "attribute") for f in index_factors]
    out = (*data_dims[:axis], *index_dims, *data_dims[axis + 1 :])
    return op_rule(factors, [data_dims, index_dims], [out], ((0,),))


def _scatter_add_soap(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    # The table gradient sums the updates of every id: split ids leave partial sums.
    ids, updates = inputs
    factors, dims = all_but(ids, ())
    factors.append(Factor("f", updates.shape[-1], "parameter"))
    return op_rule(factors, [dims, (*dims, "f")], [(None, "f")], ((1,),))


# -------------------------------------------------------------- definitions


def _scatter_add_flops(
    inputs: Sequence[TensorSig], attrs: Attrs, results: Sequence[TensorSig]
) -> int:
    """One addition per element of the updates."""
    return inputs[1].size


define(
    OpDef("embedding", (2, 2), _embedding_type, _embedding_soap, 0, None, gathers=0),
    OpDef(
        "gather",
        (2, 2),
        _gather_type,
        _gather_soap,
        0,
        "not differentiated yet",
        gathers=1,
    ),
    OpDef(
        "scatter_add",
        (2, 2),
        _scatter_add_type,
        _scatter_add_soap,
        _scatter_add_flops,
        "a gradient op made by autodiff, not differentiated again",
    ),
)
