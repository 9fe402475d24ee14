"""Compiler passes of tasoc (xDSL ModulePasses), one sub-package per optimizer.

`get_all_passes()` is the table of every pass `tasoc opt -p` accepts (registry.py).
"""

from tasoc.passes.registry import PassRegistryError, get_all_passes

__all__ = ["PassRegistryError", "get_all_passes"]
