"""The ``xla-library-calls`` pass: XLA:GPU's library custom calls as heron computes them.

XLA's optimized module calls cuDNN, cuBLAS and its own top-k kernel through
custom calls whose targets no heron plugin provides, so heron refused every
such module by name. This pass rewrites the calls whose meaning it can state:

- ``__cudnn$convForward`` and ``__cudnn$convBiasActivationForward`` (activation
  none or ReLU) become heron's ``__heron$convolution``
  (:mod:`heron.hlo.custom_calls.convolution`) with the same window,
  ``dim_labels`` and group counts, the bias and side input as its epilogue
  (result scale 1, side input scale 0 or 1): cuDNN computes it on a CUDA
  device, the host elsewhere; with other scales (XLA folds an SGD update
  ``w - lr * dw`` into a weight gradient's call) the plain call, then the
  epilogue as HLO;
- ``__cudnn$convBackwardFilter`` (a forward convolution without base dilation,
  grouped or not) becomes the weight-gradient ``convolution`` of the forward
  convolution its ``window``, ``dim_labels`` and ``feature_group_count``
  describe (the groups as its ``batch_group_count``);
- ``__cudnn$convBackwardInput`` (likewise) becomes the input-gradient
  ``convolution``: the output gradient dilated by the forward stride, the kernel
  reversed with its features exchanged (regrouped where the forward is grouped);
- ``__cublas$gemm`` and ``__cublas$lt$matmul`` become the ``dot`` their
  dimension numbers describe (heron's pipeline picks the GEMM library or its own
  kernel again), followed, where the call has them, by its scales, its ``c``
  operand, its bias and its ReLU or GELU as HLO
  (:mod:`heron.hlo.passes.library_epilogue`);
- ``__cublas$triangularSolve`` becomes the ``triangular-solve`` its
  ``backend_config`` describes (heron's pipeline makes it a library call again);
- ``__gpu$TopK`` becomes ``topk``, ``k`` the result's last dimension, largest
  first (``order = "TOTAL"``: NaNs ordered as heron's ``topk`` orders them).

Each XLA call returns a tuple whose last element is the library's scratch
memory; only ``get-tuple-element`` reads of the other elements may use it, and
they are given the new instruction's values, and control edges to the call or
its readers name them. A call that does not fit (backward filters and inputs
of base-dilated convolutions, other activations, a scratch that is
read, GEMMs with fp8 scales or auxiliary outputs) is left as it is, and the module is
refused naming its target.

The reference evaluator gives such a call its value through the same rewrite
(:func:`equivalent_computation`): the calls mean one thing, here.
"""

from __future__ import annotations

import json
import re

import attrs
import numpy as np

from heron.hlo.attributes import (
    ConvDimensionNumbers,
    InstructionRefs,
    QuotedString,
    RawAttribute,
    SliceRange,
    Window,
    WindowDim,
)
from heron.hlo.custom_calls.convolution_config import TARGET as CONVOLUTION
from heron.hlo.custom_calls.convolution_config import backend_config as convolution_config
from heron.hlo.errors import UnsupportedError
from heron.hlo.ir import Computation, Instruction, Module
from heron.hlo.passes.library_epilogue import Epilogue
from heron.hlo.passes.registry import hlo_pass
from heron.hlo.passes.rewrite import (
    CONTROL,
    Inserter,
    module_names,
    non_fusion_computations,
    rename_control_predecessors,
)
from heron.hlo.passes.xla_attention_calls import (
    BACKWARD_TARGETS,
    FORWARD_TARGETS,
    fmha_backward,
    fmha_forward,
)
from heron.hlo.shape_inference import ShapeInferenceError, infer_shape
from heron.hlo.shapes import ArrayShape, TupleShape

__all__ = ["TARGETS", "equivalent_computation", "rewrite_xla_library_calls"]

CONV_FORWARD = "__cudnn$convForward"
CONV_BIAS_ACTIVATION = "__cudnn$convBiasActivationForward"
CONV_BACKWARD_FILTER = "__cudnn$convBackwardFilter"
CONV_BACKWARD_INPUT = "__cudnn$convBackwardInput"
TRIANGULAR_SOLVE = "__cublas$triangularSolve"
GEMMS = ("__cublas$gemm", "__cublas$lt$matmul")
TOP_K = "__gpu$TopK"
#: cuDNN's activation modes heron's convolution epilogue has.
ACTIVATIONS = {"kNone": "", "kRelu": "relu"}
#: cuBLAS's ``transpose_a`` words as HLO's ``triangular-solve`` spells them.
TRANSPOSES = {"NO_TRANSPOSE": "NO_TRANSPOSE", "TRANSPOSE": "TRANSPOSE", "ADJOINT": "ADJOINT"}


@hlo_pass(
    "xla-library-calls",
    "XLA's cuDNN convolutions, cuBLAS GEMMs and triangular solves, TopK as heron computes them",
)
def rewrite_xla_library_calls(module: Module) -> bool:
    """Rewrite every XLA library call of ``module`` heron computes; True if any was."""
    names = module_names(module)
    changed = False
    for computation in non_fusion_computations(module):
        calls = [inst for inst in computation.instructions if _target(inst) in _KNOWN]
        if not calls:
            continue
        inserter = Inserter(computation, names)
        for call in calls:
            readers = _element_readers(computation, inserter, call)
            if readers is None:
                continue
            target = _target(call)
            if target in _MODULE_REWRITES:
                values = _MODULE_REWRITES[target](inserter, call, module)
            else:
                values = _REWRITES[target](inserter, call)
            if values is None:
                continue
            _checked(call, values)
            for reader in readers:
                index = reader.attr("index")
                inserter.replace(reader, values[index])
                inserter.uses.forget(reader)
            inserter.uses.forget(call)
            doomed = {id(call), *(id(reader) for reader in readers)}
            computation.instructions = [i for i in computation.instructions if id(i) not in doomed]
            # edges to the call or its readers now name what computes the results
            edges = call.attributes.get("control-predecessors")
            if edges is not None:
                values[0].attributes["control-predecessors"] = edges
            renamed = {call.name: values[0].name}
            renamed |= {reader.name: values[reader.attr("index")].name for reader in readers}
            rename_control_predecessors(computation.instructions, renamed)
            changed = True
    return changed


def equivalent_computation(call: Instruction) -> Computation | None:
    """A computation of ``call``'s operands giving its tuple (the scratch element zeros),
    computed as this pass rewrites it; None where the pass leaves ``call`` alone. How the
    reference evaluator gives XLA's library calls their values."""
    if _target(call) not in _KNOWN or not isinstance(call.shape, TupleShape):
        return None
    computation = Computation(f"{call.name}.equivalent", is_entry=True)
    parameters = [
        computation.add(
            Instruction(f"{call.name}.operand.{k}", "parameter", op.shape, parameter_number=k)
        )
        for k, op in enumerate(call.operands)
    ]
    clone = computation.add(call.clone(parameters))
    *results, scratch = call.shape.elements
    elements = [
        computation.add(
            Instruction(f"{call.name}.{k}", "get-tuple-element", shape, [clone], {"index": k})
        )
        for k, shape in enumerate(results)
    ]
    assert isinstance(scratch, ArrayShape)
    zero = computation.add(
        Instruction(
            f"{call.name}.zero",
            "constant",
            ArrayShape(scratch.element_type, ()),
            literal=np.zeros((), scratch.element_type.numpy_dtype),
        )
    )
    scratch_value = computation.add(
        Instruction(f"{call.name}.scratch", "broadcast", scratch, [zero], {"dimensions": ()})
    )
    computation.root = computation.add(
        Instruction(f"{call.name}.tuple", "tuple", call.shape, [*elements, scratch_value])
    )
    if not rewrite_xla_library_calls(Module(computation.name, [computation])):
        return None
    return computation


def _target(inst: Instruction) -> str:
    if inst.opcode != "custom-call":
        return ""
    target = inst.attributes.get("custom_call_target")
    return target.text if isinstance(target, QuotedString) else ""


def _element_readers(
    computation: Computation, inserter: Inserter, call: Instruction
) -> list[Instruction] | None:
    """The ``get-tuple-element`` readers of ``call``'s results but its last (the scratch);
    None when anything else reads it. A reader of the scratch that nothing reads (jax's
    lowering leaves one) is dropped here."""
    if not isinstance(call.shape, TupleShape) or computation.root is call:
        return None
    readers = inserter.uses.users(call)
    results = len(call.shape.elements) - 1
    unread_scratch = [
        reader
        for reader in readers
        if reader.opcode == "get-tuple-element"
        and reader.attr("index") == results
        and reader is not computation.root
        and not inserter.uses.users(reader)
        and CONTROL not in reader.attributes
        and not _controls(computation, reader)
    ]
    readers = [reader for reader in readers if reader not in unread_scratch]
    for reader in readers:
        if reader.opcode != "get-tuple-element" or not 0 <= reader.attr("index") < results:
            return None
    if unread_scratch:
        for reader in unread_scratch:
            inserter.uses.forget(reader)
        doomed = {id(reader) for reader in unread_scratch}
        computation.instructions = [i for i in computation.instructions if id(i) not in doomed]
    return readers


def _controls(computation: Computation, inst: Instruction) -> bool:
    """Whether some instruction of ``computation`` names ``inst`` as a control predecessor."""
    for other in computation.instructions:
        refs = other.attributes.get(CONTROL)
        if isinstance(refs, InstructionRefs) and inst.name in refs.names:
            return True
    return False


def _refusal(call: Instruction, why: str) -> UnsupportedError:
    return UnsupportedError(
        f"custom-call '{call.name}' (custom_call_target '{_target(call)}'): {why}", call.location
    )


def _config(call: Instruction) -> dict:
    """``backend_config`` as JSON (``{}`` when it is none); refused when it is not a
    JSON object (its defaults would be guesses)."""
    value = call.attributes.get("backend_config")
    text = value.text if isinstance(value, (QuotedString, RawAttribute)) else ""
    try:
        parsed = json.loads(text or "{}")
    except json.JSONDecodeError as error:
        raise _refusal(call, f"backend_config is not JSON ({error})") from None
    if not isinstance(parsed, dict):
        raise _refusal(call, "backend_config is not a JSON object")
    return parsed


def _checked(call: Instruction, values: list[Instruction]) -> list[Instruction]:
    """``values``, each of the shape the call's result element says: a call whose
    attributes describe something else (a dimension out of range) is refused, naming it."""
    for value, expected in zip(values, call.shape.elements, strict=False):
        try:
            inferred = infer_shape(value)
        except ShapeInferenceError as error:
            raise _refusal(
                call, f"its attributes describe no valid {value.opcode}: {error}"
            ) from None
        if inferred is not None and not inferred.same_type_and_dims(expected):
            raise _refusal(
                call, f"its {value.opcode} gives {inferred}, its result element is {expected}"
            )
    return values


def _convolution(inserter: Inserter, call: Instruction) -> list[Instruction] | None:
    config = _config(call).get("cudnn_conv_backend_config", {})
    for name, kind in (("window", Window), ("dim_labels", ConvDimensionNumbers)):
        if not isinstance(call.attributes.get(name), kind):
            raise _refusal(call, f"a convolution call without {name}")
    activation = ACTIVATIONS.get(str(config.get("activation_mode", "kNone")))
    operands = list(call.operands)
    if activation is None:
        return None
    if _target(call) == CONV_FORWARD and (len(operands) != 2 or activation):
        return None
    result_scale = float(config.get("conv_result_scale", 1))
    side_scale = float(config.get("side_input_scale", 0))
    if len(operands) not in (2, 3, 4):
        return None
    if result_scale != 1 or (len(operands) == 4 and side_scale not in (0, 1)):
        return _scaled_convolution(inserter, call, activation, result_scale, side_scale)
    if len(operands) == 4 and side_scale == 0:
        operands = operands[:3]  # a side input scaled by 0 adds nothing
    result = call.shape.elements[0]
    value = inserter.add(
        "custom-call",
        result,
        operands,
        {
            "custom_call_target": QuotedString(CONVOLUTION),
            "backend_config": QuotedString(convolution_config(call, activation)),
        },
        like=call,
        suffix="heron",
    )
    return [value]


def _scaled_convolution(
    inserter: Inserter, call: Instruction, activation: str, result_scale: float, side_scale: float
) -> list[Instruction]:
    """cuDNN's whole epilogue, ``activation(result_scale * conv(x, w) + side_scale * side +
    bias)``, where heron's convolution call has no place for a scale (XLA folds an SGD
    update, ``w - lr * dw``, into the weight gradient's call so): the plain convolution
    call, then the epilogue as HLO (:class:`Epilogue`: in f32 for narrower floats, as
    cuDNN computes it)."""
    result = call.shape.elements[0]
    assert isinstance(result, ArrayShape)
    x, w, *rest = call.operands
    numbers = call.attributes["dim_labels"]
    assert isinstance(numbers, ConvDimensionNumbers)
    conv = inserter.add(
        "custom-call",
        result,
        [x, w],
        {
            "custom_call_target": QuotedString(CONVOLUTION),
            "backend_config": QuotedString(convolution_config(call, "")),
        },
        like=call,
        suffix="heron",
    )
    epilogue = Epilogue(inserter, call, result)
    total = epilogue.scaled(epilogue.widened(conv, "wide"), result_scale, "scaled")
    if len(rest) == 2 and side_scale != 0:
        side = epilogue.scaled(epilogue.widened(rest[1], "side_wide"), side_scale, "side")
        total = epilogue.plus(total, side, "with_side")
    if rest:
        total = epilogue.plus_vector(total, rest[0], numbers.output_feature)
    return [epilogue.narrowed(epilogue.activated(total, activation))]


def _gradient_call(call: Instruction) -> tuple[Window, ConvDimensionNumbers, int] | None:
    """A cuDNN gradient call's forward convolution (its window, dimension labels and
    feature groups), or None where the call is not one heron states: two operands, no
    scale of the result, no batch groups."""
    config = _config(call).get("cudnn_conv_backend_config", {})
    window, numbers = call.attributes.get("window"), call.attributes.get("dim_labels")
    groups = call.attributes.get("feature_group_count", 1)
    if (
        not isinstance(window, Window)
        or not isinstance(numbers, ConvDimensionNumbers)
        or len(call.operands) != 2
        or float(config.get("conv_result_scale", 1)) != 1
        or not isinstance(groups, int)
        or groups < 1
        or call.attributes.get("batch_group_count", 1) != 1
    ):
        return None
    return window, numbers, groups


def _gradient_convolution(
    inserter: Inserter,
    call: Instruction,
    operands: list[Instruction],
    dims: list[WindowDim],
    labels: ConvDimensionNumbers,
    grouping: tuple[str, int],
    of: str,
) -> list[Instruction]:
    """The convolution a gradient call stands for: ``operands`` over ``dims`` with
    ``labels``, its groups (``grouping``: the attribute that counts them, and how many)
    stated where there are several; the call's first result."""
    attributes: dict[str, object] = {"window": Window(tuple(dims)), "dim_labels": labels}
    name, groups = grouping
    if groups != 1:
        attributes[name] = groups
    result = call.shape.elements[0]
    value = inserter.add(
        "convolution", result, operands, attributes, like=call, suffix=f"{of}_gradient"
    )
    return [value]


def _backward_filter(inserter: Inserter, call: Instruction) -> list[Instruction] | None:
    """The weight gradient of the forward convolution the call's ``window``,
    ``dim_labels`` and ``feature_group_count`` describe, from its input ``x`` and
    output gradient ``dy``, as the convolution XLA's own ``ConvolutionVisitor`` would
    have matched: ``x`` read with its features as the batch, ``dy`` as the kernel (its
    batch the contracted features), the forward stride as the kernel's dilation, the
    forward dilation as the stride, and the forward's feature groups as batch groups,
    so that the result has the kernel's spatial extent. Where the forward window never
    reached the input's last elements (a stride that does not divide it), ``x`` is
    sliced to the elements it read. Inputs without base dilation only."""
    described = _gradient_call(call)
    if described is None:
        return None
    window, numbers, groups = described
    x, dy = call.operands
    result = call.shape.elements[0]
    dims: list[WindowDim] = []
    unread: dict[int, int] = {}  # x's spatial dimension -> elements past the last window
    for d, forward in enumerate(window.dims):
        if forward.base_dilation != 1 or forward.window_reversal or forward.pad_low < 0:
            return None
        n = x.array_shape.dims[numbers.input_spatial[d]]
        m = dy.array_shape.dims[numbers.output_spatial[d]]
        k = result.dims[numbers.kernel_spatial[d]]
        stride, dilation = forward.stride, forward.window_dilation
        pad_high = (k - 1) * dilation + (m - 1) * stride + 1 - n - forward.pad_low
        if pad_high < 0:
            if -pad_high > n:
                return None
            unread[numbers.input_spatial[d]] = -pad_high
            pad_high = 0
        dims.append(WindowDim(m, dilation, forward.pad_low, pad_high, stride))
    if unread:
        x = _leading(inserter, call, x, unread)
    gradient = ConvDimensionNumbers(
        input_batch=numbers.input_feature,
        input_feature=numbers.input_batch,
        input_spatial=numbers.input_spatial,
        kernel_input_feature=numbers.output_batch,
        kernel_output_feature=numbers.output_feature,
        kernel_spatial=numbers.output_spatial,
        output_batch=numbers.kernel_input_feature,
        output_feature=numbers.kernel_output_feature,
        output_spatial=numbers.kernel_spatial,
    )
    grouping = ("batch_group_count", groups)
    return _gradient_convolution(inserter, call, [x, dy], dims, gradient, grouping, "filter")


def _backward_input(inserter: Inserter, call: Instruction) -> list[Instruction] | None:
    """The input gradient of the forward convolution the call's ``window``,
    ``dim_labels`` and ``feature_group_count`` describe, from the output gradient
    ``dy`` and the kernel ``w``: ``dy`` dilated by the forward stride and padded so
    that every input position meets the taps that read it (low ``(K - 1) d - pad_low``,
    high ``n + pad_low - 1 - (m - 1) stride``: negative crops), convolved with ``w``
    reversed, its input and output features exchanged. Grouped, ``w``'s output
    features are regrouped so that each group's input features are the gradient's
    kernel's outputs (:func:`_regrouped_kernel`). Inputs without base dilation only."""
    described = _gradient_call(call)
    if described is None:
        return None
    window, numbers, groups = described
    dy, w = call.operands
    result = call.shape.elements[0]
    dims: list[WindowDim] = []
    for d, forward in enumerate(window.dims):
        if forward.base_dilation != 1 or forward.window_reversal:
            return None
        n = result.dims[numbers.input_spatial[d]]
        m = dy.array_shape.dims[numbers.output_spatial[d]]
        taps = (forward.size - 1) * forward.window_dilation
        dims.append(
            WindowDim(
                forward.size,
                pad_low=taps - forward.pad_low,
                pad_high=n + forward.pad_low - 1 - (m - 1) * forward.stride,
                window_dilation=forward.window_dilation,
                base_dilation=forward.stride,
                window_reversal=True,
            )
        )
    if groups == 1:
        kernel = w
        kernel_input, kernel_output = numbers.kernel_output_feature, numbers.kernel_input_feature
        kernel_spatial = numbers.kernel_spatial
    else:
        kernel = _regrouped_kernel(inserter, call, w, numbers, groups)
        if kernel is None:
            return None
        kernel_input, kernel_output = 0, 1
        kernel_spatial = tuple(range(2, 2 + len(numbers.kernel_spatial)))
    gradient = ConvDimensionNumbers(
        input_batch=numbers.output_batch,
        input_feature=numbers.output_feature,
        input_spatial=numbers.output_spatial,
        kernel_input_feature=kernel_input,
        kernel_output_feature=kernel_output,
        kernel_spatial=kernel_spatial,
        output_batch=numbers.input_batch,
        output_feature=numbers.input_feature,
        output_spatial=numbers.input_spatial,
    )
    grouping = ("feature_group_count", groups)
    return _gradient_convolution(inserter, call, [dy, kernel], dims, gradient, grouping, "input")


def _regrouped_kernel(
    inserter: Inserter,
    call: Instruction,
    w: Instruction,
    numbers: ConvDimensionNumbers,
    groups: int,
) -> Instruction | None:
    """A grouped forward kernel ``w`` (``G * Og`` output features, ``Cg`` input features
    a group) as the input gradient's kernel ``[Og, G * Cg, spatial...]``: group ``g``'s
    output feature ``j`` becomes input feature ``j`` of the gradient's group ``g``, whose
    outputs are that group's ``Cg`` features (reshape, transpose, reshape)."""
    shape = w.array_shape
    out_at, in_at = numbers.kernel_output_feature, numbers.kernel_input_feature
    outputs, inputs = shape.dims[out_at], shape.dims[in_at]
    if outputs % groups:
        return None
    per_group = outputs // groups
    split_dims = shape.dims[:out_at] + (groups, per_group) + shape.dims[out_at + 1 :]

    def after_split(d: int) -> int:
        return d if d < out_at else d + 1

    spatial = [after_split(d) for d in numbers.kernel_spatial]
    order = (out_at + 1, out_at, after_split(in_at), *spatial)
    element = shape.element_type
    split = inserter.add(
        "reshape", ArrayShape.row_major(element, split_dims), [w], like=call, suffix="groups"
    )
    moved_dims = tuple(split_dims[d] for d in order)
    moved = inserter.add(
        "transpose",
        ArrayShape.row_major(element, moved_dims),
        [split],
        {"dimensions": order},
        like=call,
        suffix="regrouped",
    )
    kernel_dims = (per_group, groups * inputs, *moved_dims[3:])
    return inserter.add(
        "reshape", ArrayShape.row_major(element, kernel_dims), [moved], like=call, suffix="kernel"
    )


def _leading(
    inserter: Inserter, call: Instruction, x: Instruction, unread: dict[int, int]
) -> Instruction:
    """``x`` without the last ``unread[d]`` elements of each dimension ``d`` named."""
    shape = x.array_shape
    limits = tuple(size - unread.get(d, 0) for d, size in enumerate(shape.dims))
    slices = tuple(SliceRange(0, limit, 1) for limit in limits)
    sliced = attrs.evolve(shape, dims=limits)
    return inserter.add("slice", sliced, [x], {"slice": slices}, like=call, suffix="read")


#: cuBLAS(Lt) epilogues heron states: whether a bias vector is added, and the activation.
GEMM_EPILOGUES = {
    "DEFAULT": (False, ""),
    "RELU": (False, "relu"),
    "GELU": (False, "gelu"),
    "BIAS": (True, ""),
    "BIAS_RELU": (True, "relu"),
    "BIAS_GELU": (True, "gelu"),
}


def _gemm(inserter: Inserter, call: Instruction) -> list[Instruction] | None:
    """A cuBLAS GEMM, ``activation(alpha * (a @ b) + beta * c + bias)``: the ``dot`` its
    dimension numbers describe, and where the call scales, adds or activates, that
    epilogue after it (:class:`Epilogue`; the dot then gives the compute type, f32 for
    16-bit floats, and the result is rounded once). Operands: ``a``, ``b``, then ``c``
    where ``beta`` is not 0, then the bias (a vector along the result's last dimension)
    where the epilogue has one. fp8 scales and auxiliary outputs are not stated."""
    config = _config(call).get("gemm_backend_config", {})
    numbers = config.get("dot_dimension_numbers", {})
    form = GEMM_EPILOGUES.get(str(config.get("epilogue", "DEFAULT")))
    if form is None or not isinstance(numbers, dict) or len(call.shape.elements) != 2:
        return None
    with_bias, activation = form
    alpha = complex(float(config.get("alpha_real", 1)), float(config.get("alpha_imag", 0)))
    beta = float(config.get("beta", 0))
    if len(call.operands) != 2 + (beta != 0) + with_bias:
        return None
    result = call.shape.elements[0]
    assert isinstance(result, ArrayShape)
    element = result.element_type
    plain = alpha == 1 and beta == 0 and not with_bias and not activation
    if not plain and not (element.is_floating or element.is_complex):
        return None  # an integer GEMM with scales: cuBLAS's rounding of them is its own
    if alpha.imag and not element.is_complex:
        return None
    attributes = {
        name: tuple(int(d) for d in numbers.get(key, ()))
        for name, key in (
            ("lhs_batch_dims", "lhs_batch_dimensions"),
            ("rhs_batch_dims", "rhs_batch_dimensions"),
            ("lhs_contracting_dims", "lhs_contracting_dimensions"),
            ("rhs_contracting_dims", "rhs_contracting_dimensions"),
        )
    }
    if plain:
        return [inserter.add("dot", result, call.operands[:2], attributes, like=call, suffix="dot")]
    epilogue = Epilogue(inserter, call, result)
    total = inserter.add(
        "dot", epilogue.wide, call.operands[:2], attributes, like=call, suffix="dot"
    )
    total = epilogue.scaled(total, alpha, "scaled")
    rest = list(call.operands[2:])
    if beta != 0:
        c = epilogue.scaled(epilogue.widened(rest.pop(0), "c_wide"), beta, "c")
        total = epilogue.plus(total, c, "with_c")
    if with_bias:
        (bias,) = rest
        if bias.array_shape.dims != (result.dims[-1],):
            return None
        total = epilogue.plus_vector(total, bias, result.rank - 1)
    return [epilogue.narrowed(epilogue.activated(total, activation))]


def _triangular_solve(inserter: Inserter, call: Instruction) -> list[Instruction] | None:
    config = _config(call)
    transpose = TRANSPOSES.get(str(config.get("transpose_a", "NO_TRANSPOSE")))
    if transpose is None or len(call.operands) != 2:
        return None
    attributes = {
        "left_side": bool(config.get("left_side", False)),
        "lower": bool(config.get("lower", False)),
        "unit_diagonal": bool(config.get("unit_diagonal", False)),
        "transpose_a": transpose,
    }
    value = inserter.add(
        "triangular-solve",
        call.shape.elements[0],
        call.operands,
        attributes,
        like=call,
        suffix="solve",
    )
    return [value]


def _top_k(inserter: Inserter, call: Instruction) -> list[Instruction] | None:
    config = call.attributes.get("backend_config")
    text = config.text if isinstance(config, (QuotedString, RawAttribute)) else ""
    order = re.search(r'order\s*=\s*"(\w+)"', text)
    if (order is not None and order.group(1) != "TOTAL") or len(call.operands) != 1:
        return None
    values, indices = call.shape.elements[:2]
    pair = TupleShape((values, indices))
    topk = inserter.add(
        "topk", pair, call.operands, {"k": values.dims[-1], "largest": True}, like=call, suffix="k"
    )
    return [
        inserter.add("get-tuple-element", shape, [topk], {"index": k}, like=call, suffix=f"k.{k}")
        for k, shape in enumerate((values, indices))
    ]


def _attention(inserter: Inserter, call: Instruction, module: Module) -> list[Instruction]:
    """A cuDNN fused attention's forward call (:mod:`.xla_attention_calls`)."""
    return fmha_forward(inserter, call, _config(call), lambda why: _refusal(call, why), module)


def _attention_backward(inserter: Inserter, call: Instruction, module: Module) -> list[Instruction]:
    """A cuDNN fused attention's backward call (:mod:`.xla_attention_calls`)."""
    return fmha_backward(inserter, call, _config(call), lambda why: _refusal(call, why), module)


#: The XLA library targets this pass knows (it may still leave a call of one alone).
TARGETS = frozenset(
    {
        CONV_FORWARD,
        CONV_BIAS_ACTIVATION,
        CONV_BACKWARD_FILTER,
        CONV_BACKWARD_INPUT,
        TRIANGULAR_SOLVE,
        TOP_K,
        *GEMMS,
        *FORWARD_TARGETS,
        *BACKWARD_TARGETS,
    }
)

_REWRITES = {
    CONV_FORWARD: _convolution,
    CONV_BIAS_ACTIVATION: _convolution,
    CONV_BACKWARD_FILTER: _backward_filter,
    CONV_BACKWARD_INPUT: _backward_input,
    TRIANGULAR_SOLVE: _triangular_solve,
    TOP_K: _top_k,
    **dict.fromkeys(GEMMS, _gemm),
}

#: The rewrites that may add computations to the module (attention with masks as HLO).
_MODULE_REWRITES = {
    **dict.fromkeys(FORWARD_TARGETS, _attention),
    **dict.fromkeys(BACKWARD_TARGETS, _attention_backward),
}

_KNOWN = frozenset(_REWRITES) | frozenset(_MODULE_REWRITES)
