"""`autodiff`: forward program -> one training step (forward, loss, backward, update).

See `autodiff.py` for the pass and docs/autodiff.md for the program convention.
"""

from tasoc.passes.autodiff.autodiff import AutodiffFailed, AutodiffPass

__all__ = ["AutodiffFailed", "AutodiffPass"]
