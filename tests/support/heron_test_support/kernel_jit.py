"""Run a ``lower-tensors``-stage loop kernel on the host CPU, every thread of its grid.

Why: until a GPU (or the interpreter device) runs heron's kernels, nothing else
checks that what the whole pipeline makes of a fusion computes the right values.
The ``lower-tensors`` stage is the last backend-neutral one (docs/pipeline.md):
a ``gpu.module`` whose ``gpu.func ... kernel`` takes one static memref per
buffer. :func:`run_lowered_kernel` turns that kernel into a host
``func.func`` that loops over every block id and thread id (an ``scf.for``
nest, block z/y/x outermost, thread z/y/x innermost) with the kernel body
cloned inside, JIT-compiles it with :func:`heron_test_support.host_jit.jit`
and runs it on numpy arrays converted to the buffers' memory representation.

Memory representation (docs/pipeline.md, "memory after lower-tensors"): each
buffer holds its array in the physical order of the HLO layout (the shape's
``minor_to_major``, most major dimension first); ``pred`` is one byte, 0 or
1; the fp8 family travels as its bits in ``uint8``; sub-byte types (s4, u4,
s2, u2, f4e2m1fn) are packed, element k in bits ``(k*w) % 8`` of byte
``k*w // 8``, low bits first; complex is numpy complex.

Threads run one after the other. That is only right for loop kernels, whose
threads do not talk to each other: a kernel with ``gpu.barrier``,
``gpu.shuffle`` or workgroup memory is refused with an ``UnsupportedError``.
Output buffers are filled with a ``poison`` byte before the run, so a caller
can find elements the kernel never wrote (run twice with two poison bytes and
compare, see :func:`run_lowered_kernel`).

This is a test aid: it needs llvmlite (the ``[compile]`` extras).
"""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Sequence

import attrs
import numpy as np
from mlir import ir
from mlir.dialects import arith, func, scf

from heron.emitters import ir_utils
from heron.emitters.pipeline.manager import run_upstream
from heron.hlo.element_types import ElementType
from heron.hlo.errors import UnsupportedError
from heron.hlo.memory_layout import (
    from_memory,
    memory_size,
    to_memory,
)
from heron.hlo.memory_layout import (
    memory_dtype as _memory_dtype,
)
from heron.hlo.memory_layout import (
    poisoned as _poisoned,
)
from heron.hlo.shapes import ArrayShape
from heron_test_support.host_jit import jit

__all__ = [
    "HOST_FUNCTION",
    "HostKernel",
    "compile_lowered_kernel",
    "from_memory",
    "host_module",
    "memory_size",
    "run_lowered_kernel",
    "share_pure_calls",
    "to_memory",
]

#: The symbol of the host function that runs the whole grid.
HOST_FUNCTION = "heron_host_grid"

_DIMENSIONS = ("x", "y", "z")
#: GPU ops that make a kernel's threads depend on each other: not a loop kernel.
_COOPERATIVE = frozenset(
    {"gpu.barrier", "gpu.shuffle", "gpu.subgroup_reduce", "gpu.all_reduce", "gpu.lane_id"}
)
#: Element counts above this are refused (the host would need the memory).
MAX_HOST_ELEMENTS = 1 << 28


def _element_of(values: np.ndarray) -> ElementType:
    for element in ElementType:
        if not element.is_token and np.dtype(element.numpy_dtype) == values.dtype:
            return element
    raise UnsupportedError(f"kernel_jit: no HLO element type for numpy dtype {values.dtype}")


# -- the host function ---------------------------------------------------------------


def _kernel_of(lowered: ir.Module) -> tuple[ir.Operation, list[ir.Operation]]:
    """The gpu.func kernel and the other ops of the (single) gpu.module."""
    modules = [op.operation for op in lowered.body.operations if op.operation.name == "gpu.module"]
    if len(modules) != 1:
        raise UnsupportedError(
            f"kernel_jit: expected one gpu.module (the lower-tensors stage), found {len(modules)}"
        )
    ops = ir_utils.block_ops(modules[0].regions[0].blocks[0])
    kernels = [op for op in ops if op.name == "gpu.func" and "gpu.kernel" in op.attributes]
    if len(kernels) != 1:
        raise UnsupportedError(f"kernel_jit: expected one gpu.func kernel, found {len(kernels)}")
    return kernels[0], [op for op in ops if op.name != "gpu.func"]


def _dimension(op: ir.Operation) -> int:
    text = str(op.attributes["dimension"])  # "#gpu<dim x>"
    return _DIMENSIONS.index(text.rstrip(">").split()[-1])


def _check_loop_kernel(kernel: ir.Operation, name: str) -> None:
    inputs = ir.FunctionType(ir.TypeAttr(kernel.attributes["function_type"]).value).inputs
    body = kernel.regions[0].blocks
    if len(body) != 1:
        raise UnsupportedError(f"kernel_jit: kernel @{name} has {len(body)} blocks, expected 1")
    if len(body[0].arguments) != len(inputs):
        raise UnsupportedError(
            f"kernel_jit: kernel @{name} uses workgroup or private memory; this harness runs"
            " loop kernels only (threads run one after the other)"
        )
    for op in ir_utils.walk_ops(kernel):
        if op.name in _COOPERATIVE:
            raise UnsupportedError(
                f"kernel_jit: kernel @{name} uses {op.name}; this harness runs loop kernels"
                " only (threads run one after the other, so they cannot cooperate)"
            )
        for value in (*op.operands, *op.results):
            if isinstance(value.type, ir.MemRefType) and "workgroup" in str(value.type):
                raise UnsupportedError(
                    f"kernel_jit: kernel @{name} uses workgroup memory ({value.type}); this"
                    " harness runs loop kernels only"
                )


def host_module(
    lowered: ir.Module, grid: Sequence[int], block: Sequence[int]
) -> tuple[ir.Module, list[ir.MemRefType]]:
    """The kernel of ``lowered`` as ``func.func @heron_host_grid(buffers...)`` over the grid.

    Returns the host module (in ``lowered``'s context; ``lowered`` is not
    changed) and the buffer types. Must be called inside that context.
    """
    grid = _three(grid, "grid")
    block = _three(block, "block")
    kernel, others = _kernel_of(lowered)
    name = ir.StringAttr(kernel.attributes["sym_name"]).value
    _check_loop_kernel(kernel, name)
    _check_known_sizes(kernel, name, grid, block)
    body = kernel.regions[0].blocks[0]
    buffer_types = [a.type for a in body.arguments]
    for t in buffer_types:
        if not isinstance(t, ir.MemRefType) or not ir.ShapedType(t).has_static_shape:
            raise UnsupportedError(
                f"kernel_jit: kernel @{name} argument {t} is not a static memref"
            )
    host = ir.Module.create()
    with ir.InsertionPoint(host.body):
        for op in others:
            if op.name not in ("memref.global", "func.func"):
                raise UnsupportedError(f"kernel_jit: unexpected {op.name} in the gpu.module")
            for inner in ir_utils.walk_ops(op):
                if inner.name.startswith("gpu."):
                    raise UnsupportedError(
                        f"kernel_jit: {inner.name} in a function the kernel @{name} calls;"
                        " this harness runs loop kernels only"
                    )
            op.clone()
        function = func.FuncOp(HOST_FUNCTION, ir.FunctionType.get(buffer_types, []))
    entry = function.add_entry_block()
    mapping: dict[ir.Value, ir.Value] = dict(zip(body.arguments, entry.arguments, strict=True))
    with ir.InsertionPoint(entry):
        with contextlib.ExitStack() as loops:
            ids = _loop_nest(loops, grid, block)  # block z, y, x, thread z, y, x
            block_ids, thread_ids = ids[2::-1], ids[:2:-1]
            _clone_body(body, name, mapping, block_ids, thread_ids, grid, block)
        func.ReturnOp([])
    host.operation.verify()
    return host, buffer_types


def _three(sizes: Sequence[int], what: str) -> tuple[int, int, int]:
    sizes = tuple(int(s) for s in sizes)
    if not 1 <= len(sizes) <= 3 or min(sizes) < 1:
        raise UnsupportedError(f"kernel_jit: {what} {sizes} must be 1 to 3 positive sizes")
    return (*sizes, *(1,) * (3 - len(sizes)))  # type: ignore[return-value]


def _check_known_sizes(kernel: ir.Operation, name: str, grid, block) -> None:
    for attribute, sizes in (("known_grid_size", grid), ("known_block_size", block)):
        if attribute in kernel.attributes:
            known = tuple(int(v) for v in ir.DenseI32ArrayAttr(kernel.attributes[attribute]))
            if known != tuple(sizes):
                raise UnsupportedError(
                    f"kernel_jit: kernel @{name} has {attribute} {known}, launched with {sizes}"
                )


def _loop_nest(loops: contextlib.ExitStack, grid, block) -> list[ir.Value]:
    """Six nested scf.for (block z, y, x, thread z, y, x), entered on ``loops``.

    The insertion point moves into the innermost body; closing ``loops``
    terminates every body with its ``scf.yield``, innermost first.
    """
    index = ir.IndexType.get()
    zero = arith.ConstantOp(index, 0).result
    one = arith.ConstantOp(index, 1).result
    ivs = []
    for size in (*reversed(grid), *reversed(block)):
        loop = scf.ForOp(zero, arith.ConstantOp(index, size).result, one)
        loops.enter_context(ir.InsertionPoint(loop.body))
        loops.callback(scf.YieldOp, [])  # runs before this insertion point is left
        ivs.append(loop.induction_variable)
    return ivs


def _clone_body(body: ir.Block, name: str, mapping, block_ids, thread_ids, grid, block) -> None:
    """The kernel's ops at the insertion point: launch ids mapped, gpu.return dropped."""
    for op in ir_utils.block_ops(body):
        if op.name == "gpu.return":
            if len(op.operands):
                raise UnsupportedError(f"kernel_jit: kernel @{name} returns values")
            continue
        replacement = _launch_value(op, block_ids, thread_ids, grid, block)
        if replacement is not None:
            mapping[op.results[0]] = replacement
            continue
        if op.name.startswith("gpu."):
            raise UnsupportedError(
                f"kernel_jit: kernel @{name} uses {op.name}, which this harness does not run"
            )
        new = ir_utils.clone_with_mapping(op, mapping)
        mapping.update(zip(op.results, new.results, strict=True))


def _launch_value(op, block_ids, thread_ids, grid, block) -> ir.Value | None:
    """What ``gpu.block_id``/``thread_id``/``block_dim``/``grid_dim`` become on the host."""
    index = ir.IndexType.get()
    if op.name == "gpu.block_id":
        return block_ids[_dimension(op)]
    if op.name == "gpu.thread_id":
        return thread_ids[_dimension(op)]
    if op.name == "gpu.block_dim":
        return arith.ConstantOp(index, block[_dimension(op)]).result
    if op.name == "gpu.grid_dim":
        return arith.ConstantOp(index, grid[_dimension(op)]).result
    return None


#: Ops that write memory: a function holding one (or calling one that does) is not pure.
_WRITES = frozenset(
    {
        "memref.store",
        "memref.atomic_rmw",
        "memref.generic_atomic_rmw",
        "vector.store",
        "vector.transfer_write",
    }
)


def _pure_functions(module: ir.Module) -> set[str]:
    """The ``func.func`` symbols of ``module`` that write no memory, calls included."""
    functions = {
        ir.StringAttr(op.attributes["sym_name"]).value: op
        for op in ir_utils.block_ops(module.body)
        if op.name == "func.func"
    }
    writes: dict[str, bool] = {}

    def writes_memory(name: str, active: frozenset[str]) -> bool:
        if name not in writes:
            if name not in functions or name in active:
                return True  # a declaration or recursion: assume the worst
            ops = ir_utils.walk_ops(functions[name])
            writes[name] = any(op.name in _WRITES for op in ops) or any(
                writes_memory(_callee(op), active | {name}) for op in ops if op.name == "func.call"
            )
        return writes[name]

    return {name for name in functions if not writes_memory(name, frozenset())}


def _callee(call: ir.Operation) -> str:
    return ir.FlatSymbolRefAttr(call.attributes["callee"]).value


def share_pure_calls(module: ir.Module) -> int:
    """Replace each ``func.call`` of a pure function by an identical dominating one; the count.

    The surviving functions of a lower-tensors module are the callees of
    ``pure_call``s; one function may call the same callee with the same
    operands many times, so without sharing the calls the work per thread
    grows exponentially with the nesting (``mof_reshapes.hlo``: six million
    calls per thread). The device backends get the sharing from LLVM O3
    (readonly calls are CSE'd, then inlined); the host JIT does not optimize
    the IR, so it is done here, as the GPU compiler would.
    """
    pure = _pure_functions(module)
    shared = 0

    def visit_region(region: ir.Region, seen: dict) -> None:
        nonlocal shared
        for block in region.blocks:
            scope = dict(seen)  # calls in outer blocks dominate this one
            for op in ir_utils.block_ops(block):
                if op.name == "func.call" and _callee(op) in pure:
                    key = (_callee(op), tuple(op.operands))
                    earlier = scope.get(key)
                    if earlier is not None:
                        for old, new in zip(op.results, earlier.results, strict=True):
                            old.replace_all_uses_with(new)
                        op.erase()
                        shared += 1
                        continue
                    scope[key] = op
                for nested in op.regions:
                    visit_region(nested, scope)

    for op in ir_utils.block_ops(module.body):
        if op.name == "func.func":
            for region in op.regions:
                visit_region(region, {})
    return shared


def _prepare_for_host(module: ir.Module) -> None:
    """Share pure calls, then vector ops -> LLVM, before host_jit's own lowering runs."""
    share_pure_calls(module)
    run_upstream(module, "builtin.module(convert-vector-to-scf,convert-vector-to-llvm)")


# -- running ---------------------------------------------------------------------------


@attrs.frozen
class HostKernel:
    """A lower-tensors kernel JIT-compiled for the host: call it on numpy inputs, many times."""

    input_shapes: tuple[ArrayShape, ...]
    output_shapes: tuple[ArrayShape, ...]
    address: int = attrs.field(repr=False)

    def __call__(self, inputs: Sequence[np.ndarray], poison: int = 0xA5) -> list[np.ndarray]:
        """Run every thread once on ``inputs`` (logical arrays); the outputs, logical.

        Output buffers start filled with the byte ``poison`` (see
        :func:`run_lowered_kernel`).
        """
        if len(inputs) != len(self.input_shapes):
            raise UnsupportedError(
                f"kernel_jit: the kernel takes {len(self.input_shapes)} inputs, given {len(inputs)}"
            )
        buffers = [to_memory(x, s) for x, s in zip(inputs, self.input_shapes, strict=True)]
        outputs = [_poisoned(s, poison) for s in self.output_shapes]
        signature = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * (len(buffers) + len(outputs)))
        signature(self.address)(*(b.ctypes.data for b in (*buffers, *outputs)))
        return [from_memory(b, s) for b, s in zip(outputs, self.output_shapes, strict=True)]


def compile_lowered_kernel(
    lowered: ir.Module,
    input_shapes: Sequence[ArrayShape],
    output_shapes: Sequence[ArrayShape],
    grid: Sequence[int],
    block: Sequence[int],
) -> HostKernel:
    """JIT the kernel of ``lowered`` (lower-tensors stage) over the launch ``grid`` x ``block``.

    ``input_shapes``/``output_shapes`` are the buffers' HLO shapes (element
    type and layout), checked against the kernel's memref arguments.
    ``grid``/``block`` are the launch sizes (x, y, z; missing ones are 1) and
    must match the kernel's ``known_grid_size``/``known_block_size``.
    ``lowered`` is not changed. Raises ``UnsupportedError`` for a kernel that
    is not a loop kernel (barriers, shuffles, workgroup memory) or buffers
    that do not fit.
    """
    shapes = [*input_shapes, *output_shapes]
    for shape in shapes:
        if shape.num_elements > MAX_HOST_ELEMENTS:
            raise UnsupportedError(
                f"kernel_jit: buffer {shape} has {shape.num_elements} elements, more than the"
                f" host harness allows ({MAX_HOST_ELEMENTS})"
            )
    with lowered.context, ir.Location.unknown():
        host, types = host_module(lowered, grid, block)
        if len(types) != len(shapes):
            raise UnsupportedError(
                f"kernel_jit: the kernel takes {len(types)} buffers, given"
                f" {len(input_shapes)} inputs and {len(output_shapes)} outputs"
            )
        for k, (t, shape) in enumerate(zip(types, shapes, strict=True)):
            length = ir.MemRefType(t).shape[0]
            width = _bits_of(ir.ShapedType(t).element_type)
            dtype = _memory_dtype(shape.element_type)
            if length != memory_size(shape) or width != dtype.itemsize * 8:
                raise UnsupportedError(
                    f"kernel_jit: buffer {k} ({shape}) is {memory_size(shape)} x {dtype} in"
                    f" memory, the kernel takes {t}"
                )
        address = jit(host, HOST_FUNCTION, _prepare_for_host)
    return HostKernel(tuple(input_shapes), tuple(output_shapes), address)


def run_lowered_kernel(
    lowered: ir.Module,
    inputs: Sequence[np.ndarray],
    output_shapes: Sequence[ArrayShape],
    grid: Sequence[int],
    block: Sequence[int],
    *,
    input_shapes: Sequence[ArrayShape] | None = None,
    poison: int = 0xA5,
) -> list[np.ndarray]:
    """Run the kernel of ``lowered`` (lower-tensors stage) for every thread; the outputs.

    ``inputs`` are logical numpy arrays, one per input buffer; their HLO
    shapes (element type and layout) are ``input_shapes``, by default the
    element type of each array's dtype in row-major order. ``output_shapes``
    give the output buffers' shapes. ``grid``/``block``: see
    :func:`compile_lowered_kernel`. Output buffers start filled with the byte
    ``poison``: an element the kernel never writes comes back as those bits
    (or, for pred, as a ``ValueError``), so running with two different poison
    bytes and comparing finds it. To run one kernel on several inputs, compile
    it once with :func:`compile_lowered_kernel`.
    """
    inputs = [np.asarray(x) for x in inputs]
    if input_shapes is None:
        input_shapes = [ArrayShape(_element_of(x), tuple(x.shape)) for x in inputs]
    kernel = compile_lowered_kernel(lowered, input_shapes, output_shapes, grid, block)
    return kernel(inputs, poison)


def _bits_of(element: ir.Type) -> int:
    if isinstance(element, ir.ComplexType):
        return 2 * _bits_of(element.element_type)
    if isinstance(element, ir.IntegerType):
        return element.width
    return ir.FloatType(element).width
