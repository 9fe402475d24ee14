"""The checks of `soap-shard`'s options, made when the pass is built
(`SoapShardPass.__post_init__`): a bad option is one ValueError, which the driver
prints as one `tasoc: error:` line (docs/soap-shard.md lists the options)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tasoc.passes.options import (
    check_at_least,
    check_byte_size,
    check_choice,
    check_option_types,
)
from tasoc.passes.soap.meshes import device_counts, parse_mesh
from tasoc.passes.soap.roc.partition import PARTITIONERS
from tasoc.passes.soap.searches import GRAPH_SEARCH, SEARCHES, search_names
from tasoc.passes.soap.strategies import STRATEGIES

if TYPE_CHECKING:
    from tasoc.passes.soap.soap_shard import SoapShardPass


def check_options(options: SoapShardPass) -> None:
    """Every option of `options` of its type and range, and the combinations the pass
    plans (`objective=frontier` with `search=ft`, `pick=` with a frontier, `place=` with
    a search that simulates, ...); `search=auto` becomes `ft` for a frontier."""
    check_option_types(options)
    check_choice(options, "search", search_names())
    check_choice(options, "partitioner", tuple(PARTITIONERS))
    if options.search == GRAPH_SEARCH and (
        options.objective != "time" or options.place is not None
    ):
        raise ValueError("search=roc plans objective=time, without place=")
    if options.search == "auto" and options.objective == "frontier":
        object.__setattr__(options, "search", "ft")  # the one search that tracks it
    if options.mesh is not None:
        parse_mesh(options.mesh)
    check_at_least(options, "budget", 1)
    check_at_least(options, "timeout", 0, exclusive=True)
    check_at_least(options, "beta", 0, exclusive=True)
    check_at_least(options, "seed", 0)
    check_byte_size(options, "memory_cap")
    check_at_least(options, "max_points", 2)
    pick, picks = options.pick, "pick must be fastest, smallest or a point's number"
    if isinstance(pick, int) and pick < 1:
        raise ValueError(f"{picks} from 1, got {pick}")
    if isinstance(pick, str) and pick not in ("fastest", "smallest"):
        raise ValueError(f"{picks}, got {pick!r}")
    if pick is not None and options.objective != "frontier":
        raise ValueError("pick= chooses a frontier point: give objective=frontier")
    if options.objective == "frontier" and options.search != "ft":
        raise ValueError("objective=frontier needs search=ft (the search that tracks it)")
    if options.objective in ("mini-time", "mini-parallelism") and options.memory_cap is None:
        raise ValueError(f"objective={options.objective} needs memory-cap=BYTES")
    if options.devices is not None:
        if options.objective not in ("mini-parallelism", "profile"):
            raise ValueError("devices= is for objective=mini-parallelism or profile")
        device_counts(options.devices)
    if options.place is not None:
        simulating = [name for name, entry in SEARCHES.items() if entry.simulates]
        if options.search not in (*simulating, *STRATEGIES):
            raise ValueError(
                f"place= prices strategies by simulating them: search={', '.join(simulating)}"
                f", or a named strategy ({', '.join(STRATEGIES)}), not {options.search}"
            )
        if options.objective != "time":
            raise ValueError("place= is for objective=time (the fastest plan, swaps priced)")
    options.compared()
