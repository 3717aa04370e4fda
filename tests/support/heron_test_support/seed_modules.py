"""The seeds' GELU at the emitted stage, built once for every pass test that starts from it.

xla-gpu-emitters.md walks one fusion (a bf16[6,512,4096] GELU) through the
whole pipeline; the tests of inline, lower-loops, flatten-tensors,
simplify-indexing, narrow-index-types and the dialect builders all start from
its emitted form: ``@main`` runs a ``heron_gpu.loop`` over the loop emitter's
thread map (:data:`GELU_MAP`) whose body calls a private ``@gelu`` through
``heron_gpu.pure_call`` and inserts its result into the output tensor. The tests differ only
in what ``@gelu`` computes and in small details of the entry function, so
those are parameters here rather than copies there.

Build inside a context from :func:`heron.emitters.dialect.make_context` with a
location set, as for every heron_gpu builder.
"""

from __future__ import annotations

from typing import Literal

from mlir import ir
from mlir.dialects import arith, func, gpu, math, tensor

from heron.emitters.dialect import loop_op, pure_call_op

#: The loop emitter's map for the seeds' GELU: 128 threads x 24576 blocks, 4 elements each.
GELU_MAP = (
    "(th_x, bl_x)[vector_index] -> (bl_x floordiv 4096, (bl_x floordiv 8) mod 512, "
    "(bl_x mod 8) * 512 + th_x * 4 + vector_index), "
    "domain: th_x in [0, 127], bl_x in [0, 24575], vector_index in [0, 3]"
)

#: The GELU's tensor shape (bf16 elements).
GELU_SHAPE = (6, 512, 4096)

#: What ``@gelu`` computes from the element ``x`` it extracts:
#: ``"cube"`` is ``x * (x * x)`` in bf16 (a stand-in whose index math is all that matters),
#: ``"tanh"`` the real GELU in f32 (``0.5 * x * (1 + tanh(0.79788456 * (x + 0.044715 x^3)))``),
#: ``"half_tanh"`` ``x * (0.5 * tanh(x))`` in bf16 (a body using the math dialect).
GeluBody = Literal["cube", "tanh", "half_tanh"]


def _gelu_body(body: GeluBody, element: ir.Value) -> ir.Value:
    """The bf16 result of ``@gelu`` for the extracted bf16 ``element``."""
    bf16 = ir.BF16Type.get()
    if body == "cube":
        return arith.mulf(element, arith.mulf(element, element))
    if body == "half_tanh":
        half = arith.constant(bf16, 0.5)
        return arith.mulf(element, arith.mulf(half, math.tanh(element)))
    f32 = ir.F32Type.get()
    e = arith.extf(f32, element)
    c = [arith.constant(f32, v) for v in (0.5, 1.0, 0.7978845608, 0.044715)]
    cube = arith.mulf(arith.mulf(e, e), e)
    inner = arith.mulf(arith.addf(e, arith.mulf(cube, c[3])), c[2])
    result = arith.mulf(e, arith.mulf(arith.addf(math.tanh(inner), c[1]), c[0]))
    return arith.truncf(bf16, result)


def gelu_emitted_module(
    body: GeluBody = "cube", *, bounded_ids: bool = True, callee_first: bool = False
) -> ir.Module:
    """The seeds' GELU as the loop emitter leaves it (before any pass).

    ``body`` picks what ``@gelu`` computes (see :data:`GeluBody`);
    ``bounded_ids`` gives ``gpu.thread_id``/``gpu.block_id`` their
    ``upper_bound`` (the launch size, which lets lower-loops drop the domain
    check); ``callee_first`` puts ``@gelu`` before ``@main`` in the module
    (the emitters' order) instead of after it.
    """
    bf16 = ir.BF16Type.get()
    index = ir.IndexType.get()
    t = ir.RankedTensorType.get(list(GELU_SHAPE), bf16)
    module = ir.Module.create()
    with ir.InsertionPoint(module.body):
        if callee_first:
            gelu = func.FuncOp("gelu", ir.FunctionType.get([t, index, index, index], [bf16]))
        main = func.FuncOp("main", ir.FunctionType.get([t, t], [t]))
        if not callee_first:
            gelu = func.FuncOp("gelu", ir.FunctionType.get([t, index, index, index], [bf16]))
        gelu.sym_visibility = ir.StringAttr.get("private")
    with ir.InsertionPoint(gelu.add_entry_block()):
        x, i, j, k = gelu.arguments
        func.ReturnOp([_gelu_body(body, tensor.extract(x, [i, j, k]))])
    with ir.InsertionPoint(main.add_entry_block()):
        inp, out = main.arguments
        bounds = {"upper_bound": 128}, {"upper_bound": 24576}
        if not bounded_ids:
            bounds = {}, {}
        tid = gpu.thread_id(gpu.Dimension.x, **bounds[0])
        bid = gpu.block_id(gpu.Dimension.x, **bounds[1])

        def loop_body(symbols, idx, iters):
            value = pure_call_op(gelu, [inp, *idx], [bf16]).results[0]
            return [tensor.insert(value, iters[0], idx)]

        loop = loop_op(GELU_MAP, [tid, bid], [out], loop_body)
        func.ReturnOp([loop.results[0]])
    return module
