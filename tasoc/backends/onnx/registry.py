"""What an ONNX op handler is, and the tables that map op types to handlers.

Each topic module (`elementwise`, `indexing`, `recurrent`, ...) keeps its own table and
fills it with `registrar`; `handlers.HANDLERS` merges them. The topic modules import
this module, never `handlers`, so that `handlers` can import them without a cycle.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import onnx

from tasoc.backends.onnx.known_values import Value

if TYPE_CHECKING:
    from tasoc.backends.onnx.importer import Importer


Handler = Callable[["Importer", onnx.NodeProto, dict[str, Any]], list[Value | None]]
"""Imports a node: its output values (None for one its readers take over)."""


def registrar(table: dict[str, Handler]) -> Callable[..., Callable[[Handler], Handler]]:
    """A decorator factory: `@handles("Sqrt", "Exp")` enters the function into `table`
    for each op type, refusing an op type that already has a handler (two handlers
    for one op would leave the importer's choice to import order)."""

    def handles(*op_types: str) -> Callable[[Handler], Handler]:
        def register(fn: Handler) -> Handler:
            for op_type in op_types:
                if op_type in table:
                    raise ValueError(f"ONNX op {op_type} has two handlers")
                table[op_type] = fn
            return fn

        return register

    return handles


def merged(*tables: Mapping[str, Handler]) -> dict[str, Handler]:
    """The union of handler tables, refusing an op type that two of them handle."""
    union: dict[str, Handler] = {}
    for table in tables:
        twice = sorted(union.keys() & table.keys())
        if twice:
            raise ValueError(f"ONNX ops {', '.join(twice)} have two handlers")
        union.update(table)
    return union
