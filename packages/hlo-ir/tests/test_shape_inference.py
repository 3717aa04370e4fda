"""Shape inference: a table of ops with the shapes XLA gives them, and the errors it raises.

IR is made with heron.hlo.builder, which calls infer_shape for every instruction,
so each case below checks the inferred shape of the last instruction it adds.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
import pytest

from heron.hlo.attributes import (
    ComputationRef,
    ConvDimensionNumbers,
    RawAttribute,
    Window,
    WindowDim,
)
from heron.hlo.builder import ComputationBuilder, ModuleBuilder
from heron.hlo.element_types import ElementType
from heron.hlo.ir import Computation, Instruction
from heron.hlo.opcodes import OPCODES
from heron.hlo.shape_inference import (
    _RULES,
    ShapeInferenceError,
    describe_instruction,
    infer_shape,
)
from heron.hlo.shapes import ArrayShape, Shape, TupleShape, array_shape, scalar_shape

# -- helpers ------------------------------------------------------------------


def shp(text: str) -> Shape:
    """``f32[2,3]`` / ``(f32[2], s32[])`` / ``token[]`` -> a Shape (test-local, no layouts)."""
    text = text.strip()
    if text.startswith("("):
        inner = text[1:-1].strip()
        parts, depth, start = [], 0, 0
        for i, ch in enumerate(inner):
            depth += ch in "(["
            depth -= ch in ")]"
            if ch == "," and depth == 0:
                parts.append(inner[start:i])
                start = i + 1
        if inner:
            parts.append(inner[start:])
        return TupleShape(tuple(shp(p) for p in parts))
    m = re.fullmatch(r"(\w+)\[([\d,]*)\]", text)
    assert m, text
    dims = tuple(int(d) for d in m.group(2).split(",") if d)
    return ArrayShape(ElementType.parse(m.group(1)), dims)


def conv_labels(text: str) -> ConvDimensionNumbers:
    """``b01f_01io->b01f`` -> ConvDimensionNumbers (spatial dims ordered by index)."""
    lhs, rest = text.split("_")
    kernel, out = rest.split("->")

    def spatial(labels: str) -> tuple[int, ...]:
        digits = sorted((c, i) for i, c in enumerate(labels) if c.isdigit())
        return tuple(i for _, i in digits)

    return ConvDimensionNumbers(
        input_batch=lhs.index("b"),
        input_feature=lhs.index("f"),
        input_spatial=spatial(lhs),
        kernel_input_feature=kernel.index("i"),
        kernel_output_feature=kernel.index("o"),
        kernel_spatial=spatial(kernel),
        output_batch=out.index("b"),
        output_feature=out.index("f"),
        output_spatial=spatial(out),
    )


def binary_fn(opcode: str, et: str, *, tuple_of: int = 1) -> Computation:
    """A reducer: 2N scalar parameters -> N scalars (a tuple when N > 1)."""
    b = ComputationBuilder(f"{opcode}_{et}")
    accs = [b.parameter(scalar_shape(et)) for _ in range(tuple_of)]
    xs = [b.parameter(scalar_shape(et)) for _ in range(tuple_of)]
    outs = [b.op(opcode, [a, x]) for a, x in zip(accs, xs)]
    if tuple_of > 1:
        b.tuple(outs)
    return b.build()


def comparator(*types: str) -> Computation:
    b = ComputationBuilder("less")
    params = [b.parameter(scalar_shape(t)) for t in types for _ in range(2)]
    b.compare(params[0], params[1], "LT")
    return b.build()


def last(build: Callable[[ComputationBuilder], object]) -> Instruction:
    b = ComputationBuilder("c")
    result = build(b)
    return result if isinstance(result, Instruction) else b.instructions[-1]


def P(b: ComputationBuilder, text: str) -> Instruction:
    return b.parameter(shp(text))


# -- the table ------------------------------------------------------------------

add_f32 = binary_fn("add", "f32")
add_s8 = binary_fn("add", "s8")
max_f32 = binary_fn("maximum", "f32")
CASES: list[tuple[str, Callable[[ComputationBuilder], object], str]] = [
    # elementwise
    ("add", lambda b: b.add(P(b, "f32[4,5]"), P(b, "f32[4,5]")), "f32[4,5]"),
    ("add pred", lambda b: b.add(P(b, "pred[3]"), P(b, "pred[3]")), "pred[3]"),
    ("compare", lambda b: b.compare(P(b, "s32[3]"), P(b, "s32[3]"), "LT"), "pred[3]"),
    ("and s8", lambda b: b.and_(P(b, "s8[3]"), P(b, "s8[3]")), "s8[3]"),
    ("xor pred", lambda b: b.xor(P(b, "pred[]"), P(b, "pred[]")), "pred[]"),
    ("shift", lambda b: b.op("shift-left", [P(b, "u32[2]"), P(b, "u32[2]")]), "u32[2]"),
    ("atan2", lambda b: b.op("atan2", [P(b, "f64[2]"), P(b, "f64[2]")]), "f64[2]"),
    ("complex f32", lambda b: b.op("complex", [P(b, "f32[2]"), P(b, "f32[2]")]), "c64[2]"),
    ("complex f64", lambda b: b.op("complex", [P(b, "f64[]"), P(b, "f64[]")]), "c128[]"),
    ("abs complex", lambda b: b.abs(P(b, "c64[3]")), "f32[3]"),
    ("abs s32", lambda b: b.abs(P(b, "s32[3]")), "s32[3]"),
    ("real c128", lambda b: b.unary("real", P(b, "c128[2]")), "f64[2]"),
    ("imag c64", lambda b: b.unary("imag", P(b, "c64[2,2]")), "f32[2,2]"),
    ("real of real", lambda b: b.unary("real", P(b, "bf16[2]")), "bf16[2]"),
    ("is-finite", lambda b: b.unary("is-finite", P(b, "bf16[4]")), "pred[4]"),
    ("sine complex", lambda b: b.unary("sine", P(b, "c64[4]")), "c64[4]"),
    ("popcnt", lambda b: b.unary("popcnt", P(b, "u8[4]")), "u8[4]"),
    ("clz", lambda b: b.unary("count-leading-zeros", P(b, "s64[4]")), "s64[4]"),
    ("not pred", lambda b: b.not_(P(b, "pred[4]")), "pred[4]"),
    ("not int", lambda b: b.not_(P(b, "s4[4]")), "s4[4]"),
    ("negate", lambda b: b.negate(P(b, "s16[4]")), "s16[4]"),
    ("sign", lambda b: b.unary("sign", P(b, "f16[4]")), "f16[4]"),
    ("convert", lambda b: b.convert(P(b, "f32[2,3]"), "s8"), "s8[2,3]"),
    ("convert pred", lambda b: b.convert(P(b, "pred[7]"), "f8e4m3fn"), "f8e4m3fn[7]"),
    ("bitcast-convert same", lambda b: b.bitcast_convert(P(b, "f32[2]"), "s32"), "s32[2]"),
    ("bitcast-convert narrow", lambda b: b.bitcast_convert(P(b, "f32[2,3]"), "s8"), "s8[2,3,4]"),
    ("bitcast-convert wide", lambda b: b.bitcast_convert(P(b, "s8[2,4]"), "f32"), "f32[2]"),
    ("bitcast-convert to scalar", lambda b: b.bitcast_convert(P(b, "u16[2]"), "u32"), "u32[]"),
    (
        "reduce-precision",
        lambda b: b.op(
            "reduce-precision", [P(b, "f32[3]")], {"exponent_bits": 5, "mantissa_bits": 10}
        ),
        "f32[3]",
    ),
    (
        "stochastic-convert",
        lambda b: b.op(
            "stochastic-convert", [P(b, "f32[3]"), P(b, "u32[3]")], shape=scalar_shape("bf16")
        ),
        "bf16[3]",
    ),
    (
        "select scalar pred",
        lambda b: b.select(P(b, "pred[]"), P(b, "f32[2,3]"), P(b, "f32[2,3]")),
        "f32[2,3]",
    ),
    (
        "select array pred",
        lambda b: b.select(P(b, "pred[2,3]"), P(b, "s32[2,3]"), P(b, "s32[2,3]")),
        "s32[2,3]",
    ),
    (
        "clamp scalar bounds",
        lambda b: b.clamp(P(b, "f32[]"), P(b, "f32[5]"), P(b, "f32[]")),
        "f32[5]",
    ),
    ("clamp array bounds", lambda b: b.clamp(P(b, "s8[5]"), P(b, "s8[5]"), P(b, "s8[5]")), "s8[5]"),
    # data movement
    ("broadcast", lambda b: b.broadcast(P(b, "f32[3]"), (2, 3), (1,)), "f32[2,3]"),
    ("broadcast scalar", lambda b: b.broadcast(P(b, "s4[]"), (3, 31)), "s4[3,31]"),
    (
        "broadcast into several dims",
        lambda b: b.broadcast(P(b, "s32[10,20,30]"), (2, 10, 3, 20, 5, 30, 7), (1, 3, 5)),
        "s32[2,10,3,20,5,30,7]",
    ),
    ("reshape", lambda b: b.reshape(P(b, "f32[2,6]"), (3, 4)), "f32[3,4]"),
    ("reshape to scalar", lambda b: b.reshape(P(b, "f32[1,1]"), ()), "f32[]"),
    ("bitcast retype", lambda b: b.bitcast(P(b, "f16[20]"), shp("s16[4,5]")), "s16[4,5]"),
    ("transpose", lambda b: b.transpose(P(b, "f32[2,3,5]"), (2, 0, 1)), "f32[5,2,3]"),
    ("copy tuple", lambda b: b.copy(P(b, "(f32[2], s32[])")), "(f32[2], s32[])"),
    ("reverse", lambda b: b.reverse(P(b, "f32[2,3]"), (0, 1)), "f32[2,3]"),
    ("slice", lambda b: b.slice(P(b, "f32[6]"), [1], [6]), "f32[5]"),
    (
        "slice strided, non-divisible",
        lambda b: b.slice(P(b, "f32[10,7]"), [1, 0], [10, 7], [4, 2]),
        "f32[3,4]",
    ),
    ("slice empty", lambda b: b.slice(P(b, "f32[10]"), [4], [4]), "f32[0]"),
    (
        "dynamic-slice",
        lambda b: b.dynamic_slice(P(b, "f32[8,9]"), [P(b, "s32[]"), P(b, "s32[]")], (2, 3)),
        "f32[2,3]",
    ),
    (
        "dynamic-slice, one index vector (old form)",
        lambda b: b.dynamic_slice(P(b, "f32[8,9]"), [P(b, "s32[2]")], (2, 3)),
        "f32[2,3]",
    ),
    (
        "dynamic-update-slice",
        lambda b: b.dynamic_update_slice(
            P(b, "s4[8,9]"), P(b, "s4[2,9]"), [P(b, "u32[]"), P(b, "u32[]")]
        ),
        "s4[8,9]",
    ),
    (
        # a scalar has no dimension to start at (fuzz finding mutation-s20261203-540: the
        # empty list of start indices was an IndexError, not a shape)
        "dynamic-update-slice of a scalar",
        lambda b: b.dynamic_update_slice(P(b, "f32[]"), P(b, "f32[]"), []),
        "f32[]",
    ),
    (
        "dynamic-slice of a scalar",
        lambda b: b.dynamic_slice(P(b, "bf16[]"), [], ()),
        "bf16[]",
    ),
    (
        "pad negative and interior",
        lambda b: b.pad(P(b, "f32[5,6]"), P(b, "f32[]"), [(-1, 2), (2, -3, 1)]),
        "f32[6,10]",
    ),
    ("pad to nothing", lambda b: b.pad(P(b, "f32[3]"), P(b, "f32[]"), [(-2, -1)]), "f32[0]"),
    (
        "concatenate",
        lambda b: b.concatenate([P(b, "f32[2,3]"), P(b, "f32[4,3]"), P(b, "f32[1,3]")], 0),
        "f32[7,3]",
    ),
    ("iota", lambda b: b.iota(shp("s32[24,1]"), 0), "s32[24,1]"),
    (
        "tuple",
        lambda b: b.tuple([P(b, "f32[2]"), P(b, "(s32[], pred[])")]),
        "(f32[2], (s32[], pred[]))",
    ),
    ("get-tuple-element", lambda b: b.get_tuple_element(P(b, "(f32[2], s8[3])"), 1), "s8[3]"),
    # gather: common/loop/gather_start_index_map.hlo
    (
        "gather (corpus gather_start_index_map)",
        lambda b: b.op(
            "gather",
            [P(b, "f32[30,20]"), P(b, "s32[10,2]")],
            {
                "offset_dims": (1, 2),
                "collapsed_slice_dims": (),
                "start_index_map": (1, 0),
                "index_vector_dim": 1,
                "slice_sizes": (4, 8),
            },
        ),
        "f32[10,4,8]",
    ),
    (
        "gather collapsed, implicit index vector",
        lambda b: b.op(
            "gather",
            [P(b, "f32[5,7]"), P(b, "s64[3,2]")],
            {
                "offset_dims": (2,),
                "collapsed_slice_dims": (0,),
                "start_index_map": (0,),
                "index_vector_dim": 2,
                "slice_sizes": (1, 7),
            },
        ),
        "f32[3,2,7]",
    ),
    (
        "gather with batching dims",
        lambda b: b.op(
            "gather",
            [P(b, "f32[4,10,5]"), P(b, "s32[4,3,1]")],
            {
                "offset_dims": (2,),
                "collapsed_slice_dims": (1,),
                "start_index_map": (1,),
                "index_vector_dim": 2,
                "slice_sizes": (1, 1, 5),
                "operand_batching_dims": (0,),
                "start_indices_batching_dims": (0,),
            },
        ),
        "f32[4,3,5]",
    ),
    # scatter: gpu/scatter/add.hlo, scatter_s8.hlo, variadic_scatter_argmax.hlo
    (
        "scatter (corpus add)",
        lambda b: b.op(
            "scatter",
            [P(b, "f32[10,5]"), P(b, "s32[24,1]"), P(b, "f32[24,2,3]")],
            {
                "update_window_dims": (1, 2),
                "inserted_window_dims": (),
                "scatter_dims_to_operand_dims": (0,),
                "index_vector_dim": 1,
                "unique_indices": False,
                "to_apply": ComputationRef("add", add_f32),
            },
        ),
        "f32[10,5]",
    ),
    (
        "scatter (corpus scatter_s8)",
        lambda b: b.op(
            "scatter",
            [
                P(b, "s8[16,528,1,256]"),
                P(b, "s32[96,2]"),
                b.bitcast(P(b, "s8[16,6,256]"), shp("s8[96,1,1,1,256]")),
            ],
            {
                "update_window_dims": (1, 2, 3, 4),
                "inserted_window_dims": (),
                "scatter_dims_to_operand_dims": (0, 1),
                "index_vector_dim": 1,
                "to_apply": ComputationRef("reducer", add_s8),
            },
        ),
        "s8[16,528,1,256]",
    ),
    (
        "scatter variadic (corpus variadic_scatter_argmax)",
        lambda b: b.op(
            "scatter",
            [
                P(b, "f32[50,5]"),
                P(b, "s32[50,5]"),
                b.iota(shp("s32[24,1]"), 0),
                P(b, "f32[24,1,3]"),
                P(b, "s32[24,1,3]"),
            ],
            {
                "update_window_dims": (1, 2),
                "inserted_window_dims": (),
                "scatter_dims_to_operand_dims": (0,),
                "index_vector_dim": 1,
                "unique_indices": True,
                "to_apply": ComputationRef("argmax", _argmax_combiner()),
            },
        ),
        "(f32[50,5], s32[50,5])",
    ),
    (
        "scatter inserted dims",
        lambda b: b.op(
            "scatter",
            [P(b, "f32[10,5]"), P(b, "s32[7]"), P(b, "f32[7,5]")],
            {
                "update_window_dims": (1,),
                "inserted_window_dims": (0,),
                "scatter_dims_to_operand_dims": (0,),
                "index_vector_dim": 1,
                "to_apply": ComputationRef("add", add_f32),
            },
        ),
        "f32[10,5]",
    ),
    # reductions
    (
        "reduce",
        lambda b: b.reduce([P(b, "f32[3,4,5]")], [P(b, "f32[]")], (0, 2), add_f32),
        "f32[4]",
    ),
    (
        "reduce all",
        lambda b: b.reduce([P(b, "f32[3,4]")], [P(b, "f32[]")], (0, 1), add_f32),
        "f32[]",
    ),
    (
        "reduce variadic (corpus variadic_reduce)",
        lambda b: b.reduce(
            [P(b, "f32[3,4,5]"), P(b, "f32[3,4,5]")],
            [P(b, "f32[]"), P(b, "f32[]")],
            (0, 2),
            _add_mul(),
        ),
        "(f32[4], f32[4])",
    ),
    (
        "reduce-window",
        lambda b: b.reduce_window(
            [P(b, "f32[4,6]")],
            [P(b, "f32[]")],
            Window((WindowDim(2, stride=2), WindowDim(3, stride=3))),
            max_f32,
        ),
        "f32[2,2]",
    ),
    (
        "reduce-window padded and dilated",
        lambda b: b.reduce_window(
            [P(b, "f32[5]")],
            [P(b, "f32[]")],
            Window((WindowDim(3, stride=2, pad_low=1, pad_high=1, base_dilation=2),)),
            max_f32,
        ),
        "f32[5]",
    ),
    (
        "select-and-scatter",
        lambda b: b.op(
            "select-and-scatter",
            [P(b, "f32[4,6]"), P(b, "f32[2,2]"), P(b, "f32[]")],
            {
                "window": Window((WindowDim(2, stride=2), WindowDim(3, stride=3))),
                "select": ComputationRef("ge", _ge_f32()),
                "scatter": ComputationRef("add", add_f32),
            },
        ),
        "f32[4,6]",
    ),
    ("sort", lambda b: b.sort([P(b, "f32[3,4]")], 1, comparator("f32")), "f32[3,4]"),
    (
        "sort key/value",
        lambda b: b.sort([P(b, "f32[8]"), P(b, "s32[8]")], 0, comparator("f32", "s32")),
        "(f32[8], s32[8])",
    ),
    ("map", lambda b: b.map([P(b, "f32[3,4]"), P(b, "f32[3,4]")], max_f32_map()), "f32[3,4]"),
    (
        "topk",
        lambda b: b.op("topk", [P(b, "f32[3,10]")], {"k": 4, "largest": True}),
        "(f32[3,4], s32[3,4])",
    ),
    # linear algebra
    ("dot matmul", lambda b: b.dot(P(b, "f32[2,3]"), P(b, "f32[3,5]"), (1,), (0,)), "f32[2,5]"),
    (
        "dot with batch dims",
        lambda b: b.dot(P(b, "f32[8,2,3]"), P(b, "f32[8,3,5]"), (2,), (1,), (0,), (0,)),
        "f32[8,2,5]",
    ),
    (
        "dot batch dims not leading",
        lambda b: b.dot(P(b, "f32[2,7,3]"), P(b, "f32[3,7,5]"), (2,), (0,), (1,), (1,)),
        "f32[7,2,5]",
    ),
    ("dot vector", lambda b: b.dot(P(b, "f32[3]"), P(b, "f32[3]"), (0,), (0,)), "f32[]"),
    ("dot outer", lambda b: b.dot(P(b, "f32[3]"), P(b, "f32[4]"), (), ()), "f32[3,4]"),
    (
        "dot s8 -> s32",
        lambda b: b.dot(P(b, "s8[2,3]"), P(b, "s8[3,5]"), (1,), (0,), preferred_element_type="s32"),
        "s32[2,5]",
    ),
    (
        "dot fp8 (corpus dot_fp8)",
        lambda b: b.dot(P(b, "f8e4m3fn[23,42]"), P(b, "f8e4m3fn[42,1]"), (1,), (0,)),
        "f8e4m3fn[23,1]",
    ),
    (
        "convolution b01f_01io->b01f, feature groups",
        lambda b: b.op(
            "convolution",
            [P(b, "f32[1,5,5,8]"), P(b, "f32[3,3,4,16]")],
            {
                "window": Window(
                    (WindowDim(3, pad_low=1, pad_high=1), WindowDim(3, pad_low=1, pad_high=1))
                ),
                "dim_labels": conv_labels("b01f_01io->b01f"),
                "feature_group_count": 2,
            },
        ),
        "f32[1,5,5,16]",
    ),
    (
        "convolution strided, dilated, other labels",
        lambda b: b.op(
            "convolution",
            [P(b, "f32[2,3,9,11]"), P(b, "f32[4,3,3,2]")],
            {
                "window": Window((WindowDim(3, stride=2), WindowDim(2, window_dilation=3))),
                "dim_labels": conv_labels("bf01_oi01->bf01"),
            },
        ),
        "f32[2,4,4,8]",
    ),
    (
        "convolution batch groups",
        lambda b: b.op(
            "convolution",
            [P(b, "f32[4,6,3]"), P(b, "f32[2,3,8]")],
            {
                "window": Window((WindowDim(2),)),
                "dim_labels": conv_labels("b0f_0io->b0f"),
                "batch_group_count": 2,
            },
        ),
        "f32[2,5,8]",
    ),
    ("cholesky", lambda b: b.op("cholesky", [P(b, "f32[2,4,4]")], {"lower": True}), "f32[2,4,4]"),
    (
        "triangular-solve",
        lambda b: b.op(
            "triangular-solve",
            [P(b, "f32[4,4]"), P(b, "f32[4,7]")],
            {"left_side": True, "lower": True, "transpose_a": "NO_TRANSPOSE"},
        ),
        "f32[4,7]",
    ),
    (
        "fft rfft",
        lambda b: b.op("fft", [P(b, "f32[4,8]")], {"fft_type": "RFFT", "fft_length": (8,)}),
        "c64[4,5]",
    ),
    (
        "fft irfft",
        lambda b: b.op("fft", [P(b, "c128[4,5]")], {"fft_type": "IRFFT", "fft_length": (8,)}),
        "f64[4,8]",
    ),
    (
        "batch-norm-training",
        lambda b: b.op(
            "batch-norm-training",
            [P(b, "f32[2,3,4]"), P(b, "f32[3]"), P(b, "f32[3]")],
            {"epsilon": 0.001, "feature_index": 1},
        ),
        "(f32[2,3,4], f32[3], f32[3])",
    ),
    # calls, control flow and odds and ends
    ("call", lambda b: b.call([P(b, "f32[]"), P(b, "f32[]")], add_f32), "f32[]"),
    ("fusion", lambda b: b.fusion([P(b, "f32[]"), P(b, "f32[]")], add_f32), "f32[]"),
    ("while", lambda b: b.while_(P(b, "(s32[], f32[4])"), *_loop()), "(s32[], f32[4])"),
    (
        "conditional pred",
        lambda b: b.op(
            "conditional",
            [P(b, "pred[]"), P(b, "f32[3]"), P(b, "s32[2]")],
            {
                "true_computation": ComputationRef("t", _branch("f32[3]", "f32[]")),
                "false_computation": ComputationRef("f", _branch("s32[2]", "f32[]")),
            },
        ),
        "f32[]",
    ),
    (
        "conditional indexed",
        lambda b: b.op(
            "conditional",
            [P(b, "s32[]"), P(b, "f32[3]"), P(b, "f32[3]"), P(b, "s32[2]")],
            {
                "branch_computations": tuple(
                    ComputationRef(f"b{i}", _branch(t, "f32[]"))
                    for i, t in enumerate(["f32[3]", "f32[3]", "s32[2]"])
                )
            },
        ),
        "f32[]",
    ),
    ("after-all", lambda b: b.op("after-all", [P(b, "token[]"), P(b, "token[]")]), "token[]"),
    ("after-all none", lambda b: b.op("after-all", []), "token[]"),
    ("opt-barrier", lambda b: b.op("opt-barrier", [P(b, "(f32[2], s32[])")]), "(f32[2], s32[])"),
    (
        "get-dimension-size",
        lambda b: b.op("get-dimension-size", [P(b, "f32[2,9]")], {"dimensions": (1,)}),
        "s32[]",
    ),
    ("partition-id", lambda b: b.op("partition-id", []), "u32[]"),
    (
        "rng",
        lambda b: b.op(
            "rng",
            [P(b, "f32[]"), P(b, "f32[]")],
            {"distribution": "rng_normal"},
            shape=shp("f32[3,3]"),
        ),
        "f32[3,3]",
    ),
    (
        "rng-bit-generator",
        lambda b: b.op(
            "rng-bit-generator",
            [P(b, "u64[2]")],
            {"algorithm": "rng_default"},
            shape=shp("(u64[2], u32[8])"),
        ),
        "(u64[2], u32[8])",
    ),
    ("constant", lambda b: b.constant(np.arange(6, dtype=np.int32).reshape(2, 3)), "s32[2,3]"),
]


def _argmax_combiner() -> Computation:
    b = ComputationBuilder("argmax_combiner")
    score, agent = b.parameter(scalar_shape("f32")), b.parameter(scalar_shape("s32"))
    new_score, new_agent = b.parameter(scalar_shape("f32")), b.parameter(scalar_shape("s32"))
    higher = b.compare(new_score, score, "GT")
    b.tuple([b.select(higher, new_score, score), b.select(higher, new_agent, agent)])
    return b.build()


def _add_mul() -> Computation:
    b = ComputationBuilder("add_mul")
    l0, l1 = b.parameter(scalar_shape("f32")), b.parameter(scalar_shape("f32"))
    r0, r1 = b.parameter(scalar_shape("f32")), b.parameter(scalar_shape("f32"))
    b.tuple([b.add(l0, r0), b.multiply(l1, r1)])
    return b.build()


def _ge_f32() -> Computation:
    b = ComputationBuilder("ge")
    x, y = b.parameter(scalar_shape("f32")), b.parameter(scalar_shape("f32"))
    b.compare(x, y, "GE")
    return b.build()


def max_f32_map() -> Computation:
    b = ComputationBuilder("max")
    b.maximum(b.parameter(scalar_shape("f32")), b.parameter(scalar_shape("f32")))
    return b.build()


def _loop() -> tuple[Computation, Computation]:
    state = shp("(s32[], f32[4])")
    c = ComputationBuilder("cond")
    i = c.get_tuple_element(c.parameter(state), 0)
    c.compare(i, c.constant(np.int32(10)), "LT")
    body = ComputationBuilder("body")
    p = body.parameter(state)
    i = body.get_tuple_element(p, 0)
    x = body.get_tuple_element(p, 1)
    body.tuple([body.add(i, body.constant(np.int32(1))), body.exp(x)])
    return c.build(), body.build()


def _branch(param: str, result: str) -> Computation:
    b = ComputationBuilder("branch")
    b.parameter(shp(param))
    b.constant(np.zeros(shp(result).dims, dtype=shp(result).element_type.numpy_dtype))
    return b.build()


@pytest.mark.parametrize(
    "build, expected", [(c[1], c[2]) for c in CASES], ids=[c[0] for c in CASES]
)
def test_inferred_shape(build, expected):
    inst = last(build)
    assert inst.shape == shp(expected), f"{inst.shape} != {expected}"
    # infer_shape agrees with what the builder stored, and is layout-free.
    assert infer_shape(inst).same_type_and_dims(shp(expected))


def test_every_opcode_has_a_rule():
    assert set(_RULES) == set(OPCODES)


@pytest.mark.parametrize(
    "opcode", ["custom-call", "all-to-all", "async-start", "infeed", "send", "collective-permute"]
)
def test_cannot_infer_returns_none(opcode):
    # collective-permute: with the one attribute XLA's parser requires of it.
    attributes = {"source_target_pairs": RawAttribute("{{0,0}}")}
    inst = Instruction("x", opcode, shp("f32[2]"), [], attributes)
    assert infer_shape(inst) is None


def test_custom_call_through_builder_needs_shape():
    b = ComputationBuilder("c")
    x = P(b, "f32[2]")
    with pytest.raises(ValueError, match="cannot be inferred"):
        b.op("custom-call", [x], {"custom_call_target": "foo"})
    cc = b.op("custom-call", [x], {"custom_call_target": "foo"}, shape=shp("(f32[2], u8[4])"))
    assert cc.shape == shp("(f32[2], u8[4])")


def test_dot_declared_element_type_is_taken_but_not_narrowed():
    b = ComputationBuilder("c")
    lhs, rhs = P(b, "bf16[2,3]"), P(b, "bf16[3,4]")
    assert b.dot(lhs, rhs, (1,), (0,), preferred_element_type="f32").shape == shp("f32[2,4]")
    with pytest.raises(ShapeInferenceError, match="narrower than the operand type s32"):
        b.dot(P(b, "s32[2,3]"), P(b, "s32[3,4]"), (1,), (0,), preferred_element_type="s8")


# -- errors ------------------------------------------------------------------

ERRORS: list[tuple[str, Callable[[ComputationBuilder], object], str]] = [
    (
        "binary dims differ",
        lambda b: b.add(P(b, "f32[4]"), P(b, "f32[5]")),
        r"operands have different dimensions: f32\[4\] and f32\[5\]",
    ),
    ("binary scalar + array", lambda b: b.add(P(b, "f32[]"), P(b, "f32[5]")), "explicit broadcast"),
    (
        "binary types differ",
        lambda b: b.add(P(b, "f32[4]"), P(b, "bf16[4]")),
        "must have the same element type",
    ),
    ("shift float", lambda b: b.op("shift-left", [P(b, "f32[2]"), P(b, "f32[2]")]), "integer"),
    ("atan2 int", lambda b: b.op("atan2", [P(b, "s32[2]"), P(b, "s32[2]")]), "floating"),
    ("subtract pred", lambda b: b.subtract(P(b, "pred[2]"), P(b, "pred[2]")), "not pred"),
    ("and float", lambda b: b.and_(P(b, "f32[2]"), P(b, "f32[2]")), "pred or an integer"),
    ("sine int", lambda b: b.unary("sine", P(b, "s32[2]")), "floating-point or complex"),
    ("floor complex", lambda b: b.unary("floor", P(b, "c64[2]")), "floating-point type"),
    ("popcnt float", lambda b: b.unary("popcnt", P(b, "f32[2]")), "integer type"),
    ("negate pred", lambda b: b.negate(P(b, "pred[2]")), "operand type pred"),
    ("abs unsigned", lambda b: b.abs(P(b, "u8[2]")), "operand type u8"),
    ("complex of bf16", lambda b: b.op("complex", [P(b, "bf16[2]"), P(b, "bf16[2]")]), "f32 or"),
    ("elementwise on tuple", lambda b: b.negate(P(b, "(f32[2])")), "must be an array"),
    ("elementwise on token", lambda b: b.negate(P(b, "token[]")), "must be an array"),
    (
        "select pred type",
        lambda b: b.select(P(b, "s32[2]"), P(b, "f32[2]"), P(b, "f32[2]")),
        "element type pred",
    ),
    (
        "select pred dims",
        lambda b: b.select(P(b, "pred[3]"), P(b, "f32[2]"), P(b, "f32[2]")),
        "must be a scalar or have the dimensions",
    ),
    ("clamp bound dims", lambda b: b.clamp(P(b, "f32[2]"), P(b, "f32[5]"), P(b, "f32[]")), "min"),
    (
        "bitcast-convert bad minor dim",
        lambda b: b.bitcast_convert(P(b, "s8[2,3]"), "f32"),
        "minor dimension of size 4",
    ),
    ("bitcast-convert complex", lambda b: b.bitcast_convert(P(b, "c64[2]"), "s64"), "complex"),
    (
        "broadcast size mismatch",
        lambda b: b.broadcast(P(b, "f32[3]"), (3, 2), (1,)),
        r"operand dimension 0 \(size 3\) maps to result dimension 1 of size 2",
    ),
    ("broadcast out of range", lambda b: b.broadcast(P(b, "f32[3]"), (3,), (1,)), "out of range"),
    ("broadcast rank", lambda b: b.broadcast(P(b, "f32[3]"), (3, 3), ()), "must map each"),
    ("reshape count", lambda b: b.reshape(P(b, "f32[2,6]"), (5, 2)), "12 elements"),
    ("bitcast bytes", lambda b: b.bitcast(P(b, "f32[4]"), shp("f16[4]")), "size in bytes"),
    ("transpose perm", lambda b: b.transpose(P(b, "f32[2,3]"), (0, 0)), "not a permutation"),
    ("reverse dim", lambda b: b.reverse(P(b, "f32[2,3]"), (2,)), "out of range for rank 2"),
    ("slice limit", lambda b: b.slice(P(b, "f32[6]"), [0], [7]), r"\[0:7\] is not within"),
    ("slice stride", lambda b: b.slice(P(b, "f32[6]"), [0], [6], [0]), "stride 0"),
    ("slice rank", lambda b: b.slice(P(b, "f32[6,2]"), [0], [6]), "1 range"),
    (
        "dynamic-slice index count",
        lambda b: b.dynamic_slice(P(b, "f32[8,9]"), [P(b, "s32[]")], (2, 3)),
        "needs 2 start index",
    ),
    (
        "dynamic-slice float index",
        lambda b: b.dynamic_slice(P(b, "f32[8]"), [P(b, "f32[]")], (2,)),
        "integer scalars",
    ),
    (
        "dynamic-slice mixed index types",
        lambda b: b.dynamic_slice(P(b, "f32[8,8]"), [P(b, "s32[]"), P(b, "s64[]")], (2, 2)),
        "same element type",
    ),
    (
        "dynamic-slice size",
        lambda b: b.dynamic_slice(P(b, "f32[8]"), [P(b, "s32[]")], (9,)),
        r"dynamic_slice_sizes\[0\]=9",
    ),
    (
        "dynamic-update-slice too big",
        lambda b: b.dynamic_update_slice(P(b, "f32[2]"), P(b, "f32[3]"), [P(b, "s32[]")]),
        "does not fit",
    ),
    (
        "pad negative result",
        lambda b: b.pad(P(b, "f32[3]"), P(b, "f32[]"), [(-3, -1)]),
        "negative size",
    ),
    (
        "pad negative interior",
        lambda b: b.pad(P(b, "f32[3]"), P(b, "f32[]"), [(0, 0, -1)]),
        "interior padding -1",
    ),
    (
        "pad value not scalar",
        lambda b: b.pad(P(b, "f32[3]"), P(b, "f32[1]"), [(0, 0)]),
        "must be a scalar",
    ),
    (
        "concatenate other dims",
        lambda b: b.concatenate([P(b, "f32[2,3]"), P(b, "f32[2,4]")], 0),
        "differ outside dimension 0",
    ),
    (
        "concatenate dim range",
        lambda b: b.concatenate([P(b, "f32[2]"), P(b, "f32[2]")], 1),
        "out of range",
    ),
    ("iota scalar", lambda b: b.iota(shp("s32[]"), 0), "rank >= 1"),
    ("iota dim", lambda b: b.iota(shp("s32[4]"), 1), "iota_dimension"),
    ("iota pred", lambda b: b.iota(shp("pred[4]"), 0), "element type pred"),
    ("gte index", lambda b: b.get_tuple_element(P(b, "(f32[2])"), 1), "index=1 is out of range"),
    ("gte not tuple", lambda b: b.get_tuple_element(P(b, "f32[2]"), 0), "must be a tuple"),
    (
        "gather index map length",
        lambda b: b.op(
            "gather",
            [P(b, "f32[30,20]"), P(b, "s32[10,2]")],
            {
                "offset_dims": (1, 2),
                "start_index_map": (1,),
                "index_vector_dim": 1,
                "slice_sizes": (4, 8),
            },
        ),
        "start_index_map",
    ),
    (
        "gather collapsed size",
        lambda b: b.op(
            "gather",
            [P(b, "f32[30,20]"), P(b, "s32[10,1]")],
            {
                "offset_dims": (1,),
                "collapsed_slice_dims": (0,),
                "start_index_map": (0,),
                "index_vector_dim": 1,
                "slice_sizes": (2, 20),
            },
        ),
        "collapsed or batching dimension needs size <= 1",
    ),
    (
        "scatter update window too big",
        lambda b: b.op(
            "scatter",
            [P(b, "f32[10,5]"), P(b, "s32[24,1]"), P(b, "f32[24,2,6]")],
            {
                "update_window_dims": (1, 2),
                "scatter_dims_to_operand_dims": (0,),
                "index_vector_dim": 1,
                "to_apply": ComputationRef("add", add_f32),
            },
        ),
        "larger than the operand",
    ),
    (
        "scatter update scatter dims",
        lambda b: b.op(
            "scatter",
            [P(b, "f32[10,5]"), P(b, "s32[24,1]"), P(b, "f32[23,2,3]")],
            {
                "update_window_dims": (1, 2),
                "scatter_dims_to_operand_dims": (0,),
                "index_vector_dim": 1,
                "to_apply": ComputationRef("add", add_f32),
            },
        ),
        "must match the indices",
    ),
    (
        "scatter even operand count",
        lambda b: b.op(
            "scatter",
            [P(b, "f32[10,5]"), P(b, "s32[24,1]")],
            {"to_apply": ComputationRef("add", add_f32)},
        ),
        "odd count",
    ),
    (
        "reduce odd operand count",
        lambda b: b.op("reduce", [P(b, "f32[3]")], {"dimensions": (0,), "to_apply": _ref(add_f32)}),
        "even count",
    ),
    (
        "reduce dim range",
        lambda b: b.reduce([P(b, "f32[3,4]")], [P(b, "f32[]")], (2,), add_f32),
        "out of range for rank 2",
    ),
    (
        "reduce duplicate dim",
        lambda b: b.reduce([P(b, "f32[3,4]")], [P(b, "f32[]")], (1, 1), add_f32),
        "repeats a dimension",
    ),
    (
        "reduce init type",
        lambda b: b.reduce([P(b, "f32[3,4]")], [P(b, "s32[]")], (1,), add_f32),
        "init value 0 is s32",
    ),
    (
        "reduce to_apply arity",
        lambda b: b.reduce(
            [P(b, "f32[3]"), P(b, "f32[3]")], [P(b, "f32[]"), P(b, "f32[]")], (0,), add_f32
        ),
        "must take 4 scalar parameters",
    ),
    (
        "reduce without to_apply",
        lambda b: b.op("reduce", [P(b, "f32[3]"), P(b, "f32[]")], {"dimensions": (0,)}),
        "needs attribute to_apply",
    ),
    (
        "reduce-window window rank",
        lambda b: b.reduce_window([P(b, "f32[4,6]")], [P(b, "f32[]")], [2], max_f32),
        "window has 1 dimension",
    ),
    (
        "sort comparator",
        lambda b: b.sort([P(b, "f32[8]"), P(b, "s32[8]")], 0, comparator("f32")),
        "must take 4 scalar parameters",
    ),
    (
        "dot contracting sizes",
        lambda b: b.dot(P(b, "f32[2,3]"), P(b, "f32[4,5]"), (1,), (0,)),
        "contracting dimension 1 of lhs",
    ),
    (
        "dot dim range",
        lambda b: b.dot(P(b, "f32[2,3]"), P(b, "f32[3,5]"), (2,), (0,)),
        "out of range",
    ),
    (
        "convolution feature groups",
        lambda b: b.op(
            "convolution",
            [P(b, "f32[1,5,5,8]"), P(b, "f32[3,3,4,16]")],
            {
                "window": Window((WindowDim(3), WindowDim(3))),
                "dim_labels": conv_labels("b01f_01io->b01f"),
            },
        ),
        "feature_group_count",
    ),
    (
        "convolution window vs kernel",
        lambda b: b.op(
            "convolution",
            [P(b, "f32[1,5,5,8]"), P(b, "f32[3,3,8,16]")],
            {
                "window": Window((WindowDim(2), WindowDim(3))),
                "dim_labels": conv_labels("b01f_01io->b01f"),
            },
        ),
        "window sizes",
    ),
    (
        "call arity",
        lambda b: b.call([P(b, "f32[]")], add_f32),
        "takes 2 parameters but is given 1 operand",
    ),
    (
        "call parameter shape",
        lambda b: b.call([P(b, "f32[]"), P(b, "s32[]")], add_f32),
        "parameter 1 is f32",
    ),
    ("while state", lambda b: b.while_(P(b, "(s32[], f32[3])"), *_loop()), "parameter 0"),
    ("after-all operand", lambda b: b.op("after-all", [P(b, "f32[]")]), "must be a token"),
    ("topk k", lambda b: b.op("topk", [P(b, "f32[3,10]")], {"k": 11}), "k=11"),
    ("attribute type", lambda b: b.op("transpose", [P(b, "f32[2]")], {"dimensions": 0}), "list"),
    (
        "fixed arity",
        lambda b: b.op("negate", [P(b, "f32[2]"), P(b, "f32[2]")]),
        "expects 1 operand",
    ),
]


def _ref(comp: Computation) -> ComputationRef:
    return ComputationRef(comp.name, comp)


@pytest.mark.parametrize(
    "build, pattern", [(c[1], c[2]) for c in ERRORS], ids=[c[0] for c in ERRORS]
)
def test_inference_error(build, pattern):
    with pytest.raises(ShapeInferenceError, match=pattern):
        last(build)


def test_error_names_computation_instruction_and_location():
    mb = ModuleBuilder("m")
    b = mb.computation("fusion")
    x, y = P(b, "f32[4]"), P(b, "f32[5]")
    with pytest.raises(ShapeInferenceError) as info:
        b.add(x, y)
    error = info.value
    assert error.where == "computation 'fusion', instruction 'add.1' (add)"
    assert str(error).startswith("error: computation 'fusion', instruction 'add.1' (add): ")


def test_describe_instruction_without_parent():
    inst = Instruction("neg", "negate", array_shape("f32", (2,)))
    assert describe_instruction(inst) == "instruction 'neg' (negate)"


def test_constant_value_must_match_shape():
    inst = Instruction("c", "constant", shp("f32[2]"), literal=np.zeros(3, np.float32))
    with pytest.raises(ShapeInferenceError, match="does not have the declared shape"):
        infer_shape(inst)
    inst.literal = np.zeros(2, np.float64)
    with pytest.raises(ShapeInferenceError, match="does not have the declared shape"):
        infer_shape(inst)
    inst.literal = np.zeros(2, np.float32)
    assert infer_shape(inst) == shp("f32[2]")
