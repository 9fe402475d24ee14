"""The JAX backend: a `graph` program as one jitted JAX function."""

from tasoc.backends.jax.xla_flags import set_correctness_flags

set_correctness_flags()  # before any of the backend's modules can start XLA

from tasoc.backends.jax import backward as _backward  # noqa: E402, F401  (registers its lowerings)
from tasoc.backends.jax.lowering import JAX_KERNELS, JaxProgram, bench, jax_dtype, lower  # noqa: E402

__all__ = ["JAX_KERNELS", "JaxProgram", "bench", "jax_dtype", "lower"]
