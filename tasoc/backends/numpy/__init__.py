"""The NumPy reference interpreter: one kernel per `graph` op, run by xDSL's interpreter."""

from tasoc.backends.numpy import backward as _backward  # noqa: F401  (registers its kernels)
from tasoc.backends.numpy.interpreter import run_float64, run_reference
from tasoc.backends.numpy.kernels import KERNELS, Kernel

__all__ = ["KERNELS", "Kernel", "run_float64", "run_reference"]
