"""heron.jax: JAX programs compiled by heron, in one call.

- :func:`jit`: ``heron.jax.jit(f, backend="auto")(*args)`` lowers ``f`` with
  jax on the CPU, compiles it with heron (cached per signature, in memory and
  on disk), runs it on the chosen device and returns numpy arrays in ``f``'s
  own pytree structure;
- :func:`lower`: the module heron compiles for ``f`` at some arguments.
"""

from heron.jax.devices import HeronJaxError
from heron.jax.jit import HeronJitted, jit
from heron.jax.lowering import Lowered, Signature, lower

__all__ = ["HeronJaxError", "HeronJitted", "Lowered", "Signature", "jit", "lower"]
__version__ = "0.1.0"
