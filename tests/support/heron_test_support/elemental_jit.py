"""Run a whole HLO computation through the elemental emitter on the host CPU.

The elemental lowerings (``heron.emitters.elemental``) compute one element of
an instruction at given indices. This harness checks them in isolation from
the hero emitters and the GPU pipeline: it builds a host function that loops
over every element of the computation's result (an ``scf.for`` nest), asks
``emit_instruction`` for the root's element at the loop indices, and stores
it. Operands resolve recursively; parameters are loads from flat input
buffers (logical row-major order, whatever the HLO layout says); a called
computation (a reducer, a map body) is emitted inline on its scalar
arguments. The function is JIT-compiled by :mod:`.host_jit` and run on numpy
arrays, so a test compares the result with the reference evaluator.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import numpy as np
from mlir import ir
from mlir.dialects import arith, func, memref, scf

from heron.emitters.dialect import make_context
from heron.hlo.element_types import ElementType
from heron.hlo.ir import Computation, Instruction
from heron.hlo.shapes import ArrayShape, TupleShape
from heron_test_support import host_jit


def _leaves(shape) -> list[ArrayShape]:
    return list(shape.leaves()) if isinstance(shape, TupleShape) else [shape]


def _linear_index(indices: Sequence[ir.Value], dims: Sequence[int]) -> ir.Value:
    index = ir.IndexType.get()
    linear = arith.ConstantOp(index, 0).result
    for value, size in zip(indices, dims, strict=True):
        scaled = arith.MulIOp(linear, arith.ConstantOp(index, size).result).result
        linear = arith.AddIOp(scaled, value).result
    return linear


def _enclosing_blocks(block: ir.Block) -> list[ir.Block]:
    """``block`` and every block that encloses it (whose earlier values dominate it)."""
    blocks = []
    while True:
        blocks.append(block)
        owner = block.owner
        if owner is None or owner.operation.parent is None:
            return blocks
        block = owner.operation.block


class _HostEmission:
    """Resolves operands for ``emit_instruction`` inside the host function."""

    def __init__(self, buffers: dict[int, ir.Value], name: str):
        from heron.emitters.elemental import ElementalContext

        self.buffers = buffers
        self.scopes: list[dict] = [{}]
        self.bound: list[dict[int, ir.Value] | None] = [None]
        self.ctx = ElementalContext(resolve=self.resolve, call=self.call, fusion_name=name)

    def resolve(self, inst: Instruction, indices: Sequence[ir.Value]) -> list[ir.Value]:
        from heron.emitters.elemental import emit_instruction
        from heron.emitters.mlir_types import scalar_type

        bound = self.bound[-1]
        if inst.opcode == "parameter":
            if bound is not None:
                return [bound[inst.parameter_number]]
            shape = inst.array_shape
            buffer = self.buffers[inst.parameter_number]
            raw = memref.LoadOp(buffer, [_linear_index(indices, shape.dims)]).result
            element = shape.element_type
            return [host_jit._to_scalar(raw, element, scalar_type(element))]
        # A value emitted inside a region (an scf.if branch of pad or
        # concatenate) may only be reused where its block encloses the
        # insertion point; elsewhere it is emitted again.
        key = (id(inst), tuple(indices))
        memo = self.scopes[-1]
        here = _enclosing_blocks(ir.InsertionPoint.current.block)
        entry = memo.get(key)
        if entry is None or entry[1] not in here:
            entry = (emit_instruction(inst, indices, self.ctx), here[0])
            memo[key] = entry
        return entry[0]

    def call(self, computation: Computation, scalars: Sequence[ir.Value]) -> list[ir.Value]:
        """Emit ``computation`` inline with its parameters bound to ``scalars``."""
        from heron.emitters.elemental import emit_instruction

        self.scopes.append({})
        self.bound.append(dict(enumerate(scalars)))
        try:
            root = computation.root_instruction
            if root.opcode == "tuple":
                values = []
                for operand in root.operands:
                    values += self.resolve(operand, [])
                return values
            if root.opcode == "parameter":
                return self.resolve(root, [])
            return emit_instruction(root, [], self.ctx)
        finally:
            self.scopes.pop()
            self.bound.pop()


def run_computation(computation: Computation, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The computation's result on ``inputs`` (one array per leaf of the root's shape)."""
    params = computation.parameters
    if len(inputs) != len(params):
        raise ValueError(f"{computation.name} takes {len(params)} inputs, got {len(inputs)}")
    param_shapes = [p.array_shape for p in params]
    outputs = _leaves(computation.root_instruction.shape)
    dims = outputs[0].dims
    if any(o.dims != dims for o in outputs):
        raise ValueError("the harness needs every output leaf to have the same dimensions")
    in_elements = [s.element_type for s in param_shapes]
    out_elements = [o.element_type for o in outputs]
    count = int(np.prod(dims, dtype=np.int64))
    buffers = [
        host_jit.to_storage(np.asarray(x).reshape(s.dims), e)
        for x, s, e in zip(inputs, param_shapes, in_elements, strict=True)
    ]
    results = [np.zeros(max(count, 1), host_jit.storage_dtype(e)) for e in out_elements]
    context = make_context()
    with context, ir.Location.unknown():
        module = ir.Module.create()
        memory = [host_jit._memory_type(e) for e in (*in_elements, *out_elements)]
        sizes = [max(b.size, 1) for b in buffers] + [max(count, 1)] * len(outputs)
        types = [ir.MemRefType.get([n], t) for n, t in zip(sizes, memory, strict=True)]
        with ir.InsertionPoint(module.body):
            function = func.FuncOp("heron_host_kernel", ir.FunctionType.get(types, []))
            block = function.add_entry_block()
        args = list(block.arguments)
        emission = _HostEmission(dict(enumerate(args[: len(params)])), computation.name)
        index = ir.IndexType.get()
        with ir.InsertionPoint(block):
            _emit_nest(emission, computation, dims, args[len(params) :], out_elements, memory)
            func.ReturnOp([])
        module.operation.verify()
        address = host_jit.jit(module, "heron_host_kernel")
        del index
    import ctypes

    signature = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * (len(buffers) + len(results))))
    kernel = signature(address)
    keep = [b if b.size else np.zeros(1, b.dtype) for b in buffers]
    kernel(*(b.ctypes.data for b in keep), *(r.ctypes.data for r in results))
    return [
        host_jit.from_storage(r[:count], e).reshape(dims)
        for r, e in zip(results, out_elements, strict=True)
    ]


def _emit_nest(emission, computation, dims, outs, out_elements, memory) -> None:
    """The loop nest over the output; insertion points are always left, even on errors."""
    from heron.emitters.elemental import emit_instruction

    index = ir.IndexType.get()
    induction: list[ir.Value] = []
    with contextlib.ExitStack() as stack:
        for size in dims:
            lower = arith.ConstantOp(index, 0).result
            upper = arith.ConstantOp(index, size).result
            step = arith.ConstantOp(index, 1).result
            loop = scf.ForOp(lower, upper, step)
            stack.enter_context(ir.InsertionPoint(loop.body))
            stack.callback(lambda: scf.YieldOp([]))
            induction.append(loop.induction_variable)
        root = computation.root_instruction
        if root.opcode == "tuple":
            values = []
            for operand in root.operands:
                values += emission.resolve(operand, induction)
        elif root.opcode == "parameter":
            values = emission.resolve(root, induction)
        else:
            values = emit_instruction(root, induction, emission.ctx)
        linear = _linear_index(induction, dims)
        n_in = len(memory) - len(outs)
        for k, value in enumerate(values):
            stored = host_jit._from_scalar(value, out_elements[k], memory[n_in + k])
            memref.StoreOp(stored, outs[k], [linear])


def run_hlo(text: str, inputs: Sequence[np.ndarray], computation: str | None = None):
    """Parse HLO ``text`` and run ``computation`` (default: the last one, the corpus form)."""
    from heron.hlo import parse_module

    module = parse_module(text)
    if computation is None:
        name = module.fusion_under_test
        target = module.computation(name) if name is not None else module.entry
    else:
        target = module.computation(computation)
    return run_computation(target, inputs)


__all__ = ["ElementType", "run_computation", "run_hlo"]
