"""A library convolution's bias, residual and ReLU, computed by the library (XLA's fused conv).

XLA:GPU makes ``convolution + broadcast(bias)`` and a following
``maximum(·, 0)`` one cuDNN call (``__cudnn$convBiasActivationForward``:
cuDNN runs the epilogue in the convolution's kernel), so the result is
written once instead of being read back by a loop fusion. heron does the same
for the forward convolutions the ``library-convolution-rewriter`` made
``__heron$convolution`` calls: the ``library-convolution-fusion`` pass finds

    call = __heron$convolution(x, w)          a forward convolution
    [t = transpose(call)]                     back into the program's order
    [a = add(t, broadcast(b))]                b [K], one value per output feature
    [s = add(a, z)]                           z: a residual of the result's shape (XLA's
                                              side input), where there is no transpose
    [r = maximum(s, broadcast(0))]            ReLU

(at least one of the last three, each the only user of what it reads) and
makes it ``transpose(__heron$convolution(x, w[, b][, z]))`` with
``"activation": "relu"`` in the call's ``backend_config`` where the ReLU was
fused. (A residual beside a transpose back to the program's order would need
its own transpose into the call's: not taken.) The call's meaning
is unchanged (:mod:`heron.hlo.custom_calls.convolution` computes the same HLO
on the host); cuDNN computes the epilogue in f32 before its one rounding, where
the program rounded the convolution first: for f32 the same, for f16 and bf16
within one rounding, the reassociation bound a check allows a library call.

It runs before layout assignment, after the simplifier has folded the
rewriter's identity transposes (``simplification_pipeline(before_layout=...)``),
for a Target with a DNN library.
"""

from __future__ import annotations

import json

import attrs
import numpy as np

from heron.compiler.library_convolution import is_library_convolution, library_mode
from heron.hlo.attributes import QuotedString
from heron.hlo.custom_calls.convolution import ACTIVATION, activation_of
from heron.hlo.ir import Computation, Instruction, Module
from heron.hlo.passes.manager import HloPass
from heron.hlo.passes.rewrite import Uses, non_fusion_computations, remove_instructions
from heron.hlo.shapes import ArrayShape
from heron.target import Target

__all__ = ["ConvolutionEpilogue", "fuse_convolution_epilogues", "library_convolution_fusion"]


@attrs.frozen
class ConvolutionEpilogue:
    """What follows one library convolution call and can join it."""

    call: Instruction
    #: the transpose back into the program's order (None where there is none)
    transpose: Instruction | None
    #: the bias [K] added per output feature (None: no bias)
    bias: Instruction | None
    #: the residual added to the result (None: none)
    residual: Instruction | None
    #: ``"relu"`` or ``""``
    activation: str
    #: the instruction the fused call (transposed back) replaces
    last: Instruction
    #: every instruction the fused call makes dead
    replaced: tuple[Instruction, ...]


def _only_user(inst: Instruction, uses: Uses, computation: Computation) -> Instruction | None:
    users = uses.users(inst)
    if len(users) != 1 or computation.root is inst:
        return None
    return users[0]


def _is_forward_call(call: Instruction) -> bool:
    return (
        is_library_convolution(call)
        and len(call.operands) == 2
        and library_mode(call) == "forward"
        and not _config_activation(call)
    )


def _config_activation(call: Instruction) -> str:
    config = call.attributes.get("backend_config")
    return activation_of(config.text) if isinstance(config, QuotedString) else ""


def _feature_position(call: Instruction, transpose: Instruction | None) -> int:
    """Where the call's output features are in the program's order."""
    feature = len(call.shape.dims) - 1  # b01f: the canonical output's features are last
    if transpose is None:
        return feature
    return list(transpose.attributes["dimensions"]).index(feature)


def _per_feature(value: Instruction, position: int, element: object) -> Instruction | None:
    """The [K] operand ``value`` broadcasts along ``position``, else None."""
    if value.opcode != "broadcast" or len(value.operands) != 1:
        return None
    (operand,) = value.operands
    dims = tuple(value.attributes.get("dimensions", ()))
    if dims != (position,) or len(operand.shape.dims) != 1:
        return None
    return operand if operand.shape.element_type == element else None


def _other_operand(binary: Instruction, value: Instruction) -> Instruction:
    """The operand of ``binary`` (which reads ``value``) that is not ``value``."""
    return binary.operands[1] if binary.operands[0] is value else binary.operands[0]


def _is_zeros(value: Instruction) -> bool:
    if value.opcode != "broadcast" or len(value.operands) != 1:
        return False
    (scalar,) = value.operands
    if scalar.opcode != "constant" or scalar.shape.dims:
        return False
    literal = scalar.literal
    return isinstance(literal, np.ndarray) and literal.size == 1 and float(literal) == 0.0


def convolution_epilogue(
    call: Instruction, uses: Uses, computation: Computation
) -> ConvolutionEpilogue | None:
    """The bias, residual and ReLU after a forward library convolution ``call``, or None."""
    if not _is_forward_call(call):
        return None
    value, replaced = call, [call]
    transpose = None
    user = _only_user(call, uses, computation)
    if user is not None and user.opcode == "transpose":
        transpose, value = user, user
        replaced.append(user)
        user = _only_user(user, uses, computation)
    element = call.shape.element_type
    position = _feature_position(call, transpose)
    bias = None
    if user is not None and user.opcode == "add" and value in user.operands:
        other = _other_operand(user, value)
        bias = _per_feature(other, position, element)
        if bias is not None:
            value = user
            replaced.append(user)
            user = _only_user(user, uses, computation)
    residual = None
    if transpose is None and user is not None and user.opcode == "add" and value in user.operands:
        other = _other_operand(user, value)
        same = isinstance(other.shape, ArrayShape) and (
            other.shape.dims,
            other.shape.element_type,
        ) == (call.shape.dims, element)
        # a broadcast stays in the kernel that reads it, not materialised for the library
        if same and other is not value and other.opcode != "broadcast":
            residual, value = other, user
            replaced.append(user)
            user = _only_user(user, uses, computation)
    activation = ""
    if user is not None and user.opcode == "maximum" and value in user.operands:
        other = _other_operand(user, value)
        if _is_zeros(other):
            activation, value = "relu", user
            replaced.append(user)
    if bias is None and residual is None and not activation:
        return None
    return ConvolutionEpilogue(call, transpose, bias, residual, activation, value, tuple(replaced))


def _fuse(epilogue: ConvolutionEpilogue, uses: Uses, computation: Computation) -> None:
    call = epilogue.call
    config = json.loads(call.attributes["backend_config"].text)
    if epilogue.activation:
        config[ACTIVATION] = epilogue.activation
    extra = [e for e in (epilogue.bias, epilogue.residual) if e is not None]
    operands = [*call.operands, *extra]
    fused = Instruction(
        call.name,
        "custom-call",
        call.shape,
        operands=operands,
        attributes=call.attributes
        | {"backend_config": QuotedString(json.dumps(config, sort_keys=True))},
        location=call.location,
    )
    result = uses.add(fused)
    if epilogue.transpose is not None:
        t = epilogue.transpose
        result = uses.add(
            Instruction(
                t.name, "transpose", t.shape, [fused], dict(t.attributes), location=t.location
            )
        )
    uses.replace(epilogue.last, result)
    remove_instructions(computation, epilogue.replaced)


def fuse_convolution_epilogues(module: Module, target: Target) -> bool:
    """Each forward library convolution's bias, residual and ReLU made part of its call."""
    if not target.dnn_library:
        return False
    changed = False
    for computation in non_fusion_computations(module):
        uses = Uses(computation)
        for call in list(computation.instructions):
            epilogue = convolution_epilogue(call, uses, computation)
            if epilogue is not None:
                _fuse(epilogue, uses, computation)
                changed = True
    return changed


def library_convolution_fusion(target: Target) -> HloPass:
    """The ``library-convolution-fusion`` pass for ``target``."""
    return HloPass(
        "library-convolution-fusion",
        lambda module: fuse_convolution_epilogues(module, target),
        "a library convolution's bias and ReLU computed by the library (XLA's fused-conv rewriter)",
    )
