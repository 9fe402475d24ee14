"""`placement`: which tensors live in device memory and which in host memory, and when
they move (SwapAdvisor, ROC). See `placement.py` for the pass, `offload.py` for the
manual `offload-all` plan and `tasoc.ir.placement_plan` for the placed IR.
"""

from tasoc.passes.placement.placement import PlacementFailed, PlacementPass

__all__ = ["PlacementFailed", "PlacementPass"]
