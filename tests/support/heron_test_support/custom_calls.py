"""A typed-FFI custom call as heron's host implementations receive it, for tests that call
an implementation directly (no module around it): operands are the test's arrays."""

from __future__ import annotations

from heron.hlo.custom_calls.call import CustomCall
from heron.hlo.shapes import TupleShape


def ffi_call(target: str, backend_config: str = "", instruction: str = "call") -> CustomCall:
    """The call ``target`` with ``backend_config`` (jax's MLIR attribute text), named
    ``instruction`` in computation ``main``: what its errors name."""
    return CustomCall(
        target=target,
        instruction=instruction,
        computation="main",
        operand_shapes=(),
        result_shape=TupleShape(()),
        backend_config=backend_config,
        api_version="API_VERSION_TYPED_FFI",
    )
