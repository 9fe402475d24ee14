"""The JAX backend: a `graph` program as one jitted JAX function."""

from tasoc.backends.jax import backward as _backward  # noqa: F401  (registers its lowerings)
from tasoc.backends.jax.lowering import JAX_KERNELS, JaxProgram, bench, jax_dtype, lower

__all__ = ["JAX_KERNELS", "JaxProgram", "bench", "jax_dtype", "lower"]
