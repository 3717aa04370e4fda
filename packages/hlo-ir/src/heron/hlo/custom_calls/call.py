"""One custom call as its implementation sees it, and the checks around the call.

:class:`CustomCall` is built from a ``custom-call`` instruction
(:func:`custom_call_of`, for the evaluator and the compiler) or from a
``CustomCallThunk`` (the runtime, which has no instruction): the same record
either way, so an implementation cannot tell who calls it, and every message
names the target and the instruction the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import numpy as np

from heron.hlo.attributes import QuotedString, RawAttribute
from heron.hlo.errors import UnsupportedError
from heron.hlo.ir import Instruction
from heron.hlo.lexer import unescape
from heron.hlo.plugin_loading import PluginError
from heron.hlo.shapes import ArrayShape, Shape, TupleShape

__all__ = [
    "CustomCall",
    "CustomCallError",
    "UnknownCustomCallTarget",
    "attribute_text",
    "custom_call_of",
]


class CustomCallError(PluginError):
    """A custom call could not be made, or its implementation broke the ABI; names both."""


class UnknownCustomCallTarget(CustomCallError):
    """No installed plugin provides the target a custom call names."""


@attrs.frozen
class CustomCall:
    """A call site of a custom-call target: what its host implementation receives.

    ``operand_shapes`` are the array leaves of the operands in order;
    ``result_shape`` is the declared result (an array, or a tuple of arrays).
    ``backend_config`` and ``opaque`` are the instruction's attribute texts
    (``""`` when absent; a quoted ``backend_config="..."`` is unquoted, a
    ``backend_config={...}`` is given as written), ``api_version`` XLA's word
    (``API_VERSION_STATUS_RETURNING``, ``""`` when absent). ``instruction``
    and ``computation`` say where the call is.
    """

    target: str
    instruction: str
    computation: str
    operand_shapes: tuple[ArrayShape, ...] = attrs.field(converter=tuple)
    result_shape: Shape
    backend_config: str = ""
    opaque: str = ""
    api_version: str = ""

    @property
    def result_shapes(self) -> tuple[ArrayShape, ...]:
        """The result's array leaves, in order."""
        return tuple(self.result_shape.leaves())

    @property
    def tuple_result(self) -> bool:
        return isinstance(self.result_shape, TupleShape)

    @property
    def where(self) -> str:
        """``custom-call 'cc' in computation 'main'``: how every message names the call."""
        return f"custom-call '{self.instruction}' in computation '{self.computation}'"

    def error(self, message: str) -> CustomCallError:
        """An error about this call: names the instruction, its computation and the target."""
        return CustomCallError(f"{self.where} (custom_call_target '{self.target}'): {message}")

    def check_operands(self, operands: Sequence[np.ndarray]) -> tuple[np.ndarray, ...]:
        """``operands`` as the read-only arrays the implementation gets (checked: a bug
        in heron, not in the plugin, would make them differ from the declared shapes).

        Each in row-major order whatever the layout of the buffer it came from: an
        implementation's arithmetic may depend on strides (numpy hands a matrix
        product to BLAS kernels chosen by them, which sum in other orders), and the
        same call must give the same bits on a device's runtime, whose buffers have
        the HLO's layouts, and in the reference evaluator, whose arrays do not. A
        transposed Cholesky factor made ``jax.scipy.linalg.cho_solve`` differ by 3 ulps
        between the two, which ``heron run --check`` called a disagreement."""
        if len(operands) != len(self.operand_shapes):
            raise self.error(
                f"{len(operands)} operand arrays for {len(self.operand_shapes)} operand leaves"
            )
        given = []
        for k, (array, shape) in enumerate(zip(operands, self.operand_shapes, strict=True)):
            array = np.asarray(array)
            why = _mismatch(array, shape)
            if why is not None:
                raise self.error(f"operand {k}: {why}")
            view = np.asarray(array, order="C").view()  # (0-d stays 0-d)
            view.flags.writeable = False
            given.append(view)
        return tuple(given)

    def check_results(self, value: Any, provider: str) -> list[np.ndarray]:
        """What ``host`` returned (``provider`` names it) as one array per result leaf.

        Exactly the declared dimensions and dtypes, nothing converted: an
        implementation that computes in another type must say so by casting. A
        numpy scalar (what arithmetic on 0-d arrays gives) stands for its 0-d array.
        """
        shapes = self.result_shapes
        if self.tuple_result:
            if not isinstance(value, (list, tuple)):
                raise self.error(
                    f"{provider} returned {_describe(value)}; the result is a tuple of"
                    f" {len(shapes)} arrays ({self.result_shape}), so it must return a sequence"
                    f" of {len(shapes)} numpy arrays"
                )
            items = list(value)
            if len(items) != len(shapes):
                raise self.error(
                    f"{provider} returned {len(items)} arrays; the result"
                    f" {self.result_shape} has {len(shapes)}"
                )
        else:
            items = [value]
        results = []
        for k, (item, shape) in enumerate(zip(items, shapes, strict=True)):
            if isinstance(item, np.generic):  # numpy arithmetic on 0-d arrays gives scalars
                item = np.asarray(item)
            why = _mismatch(item, shape)
            if why is not None:
                raise self.error(f"{provider} returned a wrong result {k}: {why}")
            results.append(np.asarray(item, order="C"))  # (ascontiguousarray makes 0-d 1-d)
        return results

    def nest(self, leaves: Sequence[np.ndarray]) -> Any:
        """Result leaves as a value of ``result_shape``: an array, or (nested) tuples of them."""
        remaining = iter(leaves)

        def build(shape: Shape) -> Any:
            if isinstance(shape, TupleShape):
                return tuple(build(element) for element in shape.elements)
            return next(remaining)

        return build(self.result_shape)


def _describe(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"{value.dtype}{list(value.shape)}"
    if isinstance(value, (list, tuple)):
        return f"a {type(value).__name__} of {len(value)}"
    return type(value).__name__


def _mismatch(value: Any, shape: ArrayShape) -> str | None:
    """Why ``value`` is not an array of ``shape`` (None when it is)."""
    expected = f"{shape} (numpy {np.dtype(shape.numpy_dtype)}{list(shape.dims)})"
    if not isinstance(value, np.ndarray):
        return f"{_describe(value)} where a numpy array {expected} is declared"
    if value.dtype != shape.numpy_dtype or tuple(value.shape) != tuple(shape.dims):
        return f"{_describe(value)} where {expected} is declared"
    return None


def attribute_text(value: Any) -> str:
    """An attribute's value as text: quoted strings unquoted, raw text as written."""
    if value is None:
        return ""
    if isinstance(value, QuotedString):
        return value.text
    if isinstance(value, RawAttribute):
        text = value.text
        if len(text) >= 2 and text[0] == '"' and text[-1] == '"':
            return unescape(text[1:-1])
        return text
    return str(value)


def _refusal(inst: Instruction, message: str) -> UnsupportedError:
    """An UnsupportedError at ``inst``'s location whose message already names it."""
    error = UnsupportedError(message, inst.location)
    error.names_instruction = True  # type: ignore[attr-defined]
    return error


def custom_call_of(inst: Instruction) -> CustomCall:
    """The :class:`CustomCall` of a ``custom-call`` instruction.

    Raises ``UnsupportedError`` (at the instruction's location, naming it) for
    what heron's ABI does not carry: no ``custom_call_target``, token or
    dynamically shaped operands or results.
    """
    computation = inst.parent.name if inst.parent is not None else "?"
    where = f"custom-call '{inst.name}' in computation '{computation}'"
    target = inst.attr("custom_call_target")
    if not isinstance(target, QuotedString) or not target.text:
        raise _refusal(inst, f"{where}: it has no custom_call_target")
    operand_shapes = [leaf for operand in inst.operands for leaf in operand.shape.leaves()]
    for role, leaves in (("operand", operand_shapes), ("result", list(inst.shape.leaves()))):
        for k, leaf in enumerate(leaves):
            if leaf.is_token or any(leaf.dynamic or ()):
                raise _refusal(
                    inst,
                    f"{where} (custom_call_target '{target.text}'): {role} leaf {k} is {leaf};"
                    " a custom call's operands and results are static arrays (no tokens or"
                    " dynamic dimensions)",
                )
    return CustomCall(
        target=target.text,
        instruction=inst.name,
        computation=computation,
        operand_shapes=operand_shapes,
        result_shape=inst.shape,
        backend_config=attribute_text(inst.attr("backend_config")),
        opaque=attribute_text(inst.attr("opaque")),
        api_version=attribute_text(inst.attr("api_version")),
    )
