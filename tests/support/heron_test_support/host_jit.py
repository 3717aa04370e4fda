"""Run scalar MLIR on the host CPU, element by element, to test what emitters produce.

Elemental lowerings and math approximations are scalar code: their semantics
can be checked on the host long before any GPU (or the interpreter device)
runs a kernel. :func:`run_elementwise` wraps a builder callback in a function
that loops over ``n`` elements, loads the arguments from flat buffers, calls
the callback on the scalars and stores its results; the function is lowered
with upstream MLIR passes, translated to LLVM IR and JIT-compiled by llvmlite
for the host, then called on numpy arrays.

Buffers carry raw bits: every element type travels as an unsigned integer of
its byte width (``pred`` as i8 0/1, sub-byte types one element per byte, fp8
as i8), and is bitcast or truncated to the scalar type inside. That keeps the
harness independent of how LLVM lowers exotic float types in memory.

This is a test aid: it needs llvmlite (the ``[compile]`` extras of the
runtime packages install it).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import re
from collections.abc import Callable, Sequence

import numpy as np
from mlir import ir, passmanager
from mlir.dialects import arith, func, memref, scf
from mlir.dialects import llvm as llvm_dialect

from heron.emitters.dialect import make_context
from heron.hlo.element_types import ElementType

ScalarBuilder = Callable[[list[ir.Value]], Sequence[ir.Value]]

HOST_LOWERING = (
    "builtin.module(convert-complex-to-standard,arith-expand{include-bf16=true},"
    "convert-scf-to-cf,"
    "convert-math-to-llvm,convert-math-to-libm,finalize-memref-to-llvm,convert-arith-to-llvm,"
    "convert-complex-to-llvm,convert-func-to-llvm{use-bare-ptr-memref-call-conv=1},"
    "convert-cf-to-llvm,reconcile-unrealized-casts)"
)


def storage_dtype(element: ElementType) -> np.dtype:
    """The numpy dtype one element's bits travel in through the harness buffers."""
    if element.is_complex:
        return np.dtype(np.uint64 if element is ElementType.C64 else np.complex128)
    return np.dtype(f"uint{max(8, element.bit_width)}")


def to_storage(values: np.ndarray, element: ElementType) -> np.ndarray:
    """numpy values of ``element`` -> the raw-bit buffer the harness passes."""
    values = np.ascontiguousarray(np.asarray(values, dtype=element.numpy_dtype)).reshape(-1)
    if element.is_complex:
        return values.view(storage_dtype(element)) if element is ElementType.C64 else values
    if element.is_sub_byte:
        return values.view(np.uint8) & ((1 << element.bit_width) - 1)
    if element is ElementType.PRED:
        return values.astype(np.uint8)
    return values.view(storage_dtype(element))


def from_storage(bits: np.ndarray, element: ElementType) -> np.ndarray:
    """The harness's raw-bit buffer -> numpy values of ``element``."""
    if element.is_complex:
        return bits.view(element.numpy_dtype)
    if element is ElementType.PRED:
        return bits.astype(bool)
    if element.is_sub_byte:
        width = element.bit_width
        raw = bits.astype(np.int16) & ((1 << width) - 1)
        if element.is_signed_integral:
            raw = np.where(raw >= 1 << (width - 1), raw - (1 << width), raw)
        if element.is_floating:
            return raw.astype(np.uint8).view(element.numpy_dtype)
        return raw.astype(element.numpy_dtype)
    return bits.view(element.numpy_dtype)


def _memory_type(element: ElementType) -> ir.Type:
    if element is ElementType.C64:
        return ir.IntegerType.get_signless(64)
    if element is ElementType.C128:
        return ir.ComplexType.get(ir.F64Type.get())
    return ir.IntegerType.get_signless(max(8, element.bit_width))


def _to_scalar(raw: ir.Value, element: ElementType, scalar: ir.Type) -> ir.Value:
    if element is ElementType.C64:
        lo = arith.TruncIOp(ir.IntegerType.get_signless(32), raw).result
        shift = arith.ConstantOp(raw.type, 32).result
        hi = arith.TruncIOp(ir.IntegerType.get_signless(32), arith.ShRUIOp(raw, shift)).result
        f32 = ir.F32Type.get()
        from mlir.dialects import complex as complex_dialect

        return complex_dialect.CreateOp(
            scalar, arith.BitcastOp(f32, lo).result, arith.BitcastOp(f32, hi).result
        ).result
    if raw.type == scalar:
        return raw
    if isinstance(scalar, ir.IntegerType):
        return arith.TruncIOp(scalar, raw).result
    if isinstance(scalar, ir.FloatType) and scalar.width < 8:
        narrow = arith.TruncIOp(ir.IntegerType.get_signless(scalar.width), raw)
        return arith.BitcastOp(scalar, narrow.result).result
    return arith.BitcastOp(scalar, raw).result


def _from_scalar(value: ir.Value, element: ElementType, memory: ir.Type) -> ir.Value:
    if element is ElementType.C64:
        from mlir.dialects import complex as complex_dialect

        i32, i64 = ir.IntegerType.get_signless(32), memory
        re = arith.BitcastOp(i32, complex_dialect.ReOp(value).result).result
        im = arith.BitcastOp(i32, complex_dialect.ImOp(value).result).result
        lo = arith.ExtUIOp(i64, re).result
        hi = arith.ShLIOp(arith.ExtUIOp(i64, im).result, arith.ConstantOp(i64, 32).result)
        return arith.OrIOp(lo, hi.result).result
    if value.type == memory:
        return value
    if isinstance(value.type, ir.FloatType):
        width = value.type.width
        bits = arith.BitcastOp(ir.IntegerType.get_signless(width), value).result
        return bits if width >= 8 else arith.ExtUIOp(memory, bits).result
    return arith.ExtUIOp(memory, value).result


def build_elementwise_function(
    name: str,
    arg_elements: Sequence[ElementType],
    arg_scalar_types: Sequence[ir.Type],
    result_elements: Sequence[ElementType],
    body: ScalarBuilder,
    count: int,
) -> ir.Module:
    """The module holding ``@name(inputs..., outputs..., n)`` (see the module docstring).

    Buffers are ``memref<count x bits>`` (static: the bare-pointer calling
    convention needs static shapes); ``n`` elements are processed.

    Must be called inside an MLIR context and location.
    """
    module = ir.Module.create()
    memory = [_memory_type(e) for e in (*arg_elements, *result_elements)]
    buffers = [ir.MemRefType.get([max(count, 1)], t) for t in memory]
    index = ir.IndexType.get()
    with ir.InsertionPoint(module.body):
        function = func.FuncOp(name, ir.FunctionType.get([*buffers, index], []))
        block = function.add_entry_block()
    args = list(block.arguments)
    n_in = len(arg_elements)
    with ir.InsertionPoint(block):
        zero = arith.ConstantOp(index, 0).result
        one = arith.ConstantOp(index, 1).result
        loop = scf.ForOp(zero, args[-1], one)
        with ir.InsertionPoint(loop.body):
            i = loop.induction_variable
            scalars = [
                _to_scalar(memref.LoadOp(args[k], [i]).result, arg_elements[k], arg_scalar_types[k])
                for k in range(n_in)
            ]
            results = list(body(scalars))
            if len(results) != len(result_elements):
                raise ValueError(
                    f"the body returned {len(results)} values, expected {len(result_elements)}"
                )
            for k, value in enumerate(results):
                stored = _from_scalar(value, result_elements[k], memory[n_in + k])
                memref.StoreOp(stored, args[n_in + k], [i])
            scf.YieldOp([])
        func.ReturnOp([])
    return module


#: Scalar math ops that convert-math-to-llvm expands inaccurately (expm1 as exp(x) - 1),
#: mapped to the libm routines (f32 name, f64 name) the host calls instead.
_LIBM_ROUTINES = {"math.expm1": ("expm1f", "expm1"), "math.log1p": ("log1pf", "log1p")}


def _call_libm_for_accuracy(module: ir.Module) -> None:
    """Replace scalar f32/f64 ``math.expm1``/``math.log1p`` by calls of libm's routines."""
    declared: set[str] = set()
    for op in _all_ops(module):
        routines = _LIBM_ROUTINES.get(op.name)
        if routines is None:
            continue
        value_type = op.results[0].type
        if value_type not in (ir.F32Type.get(), ir.F64Type.get()):
            continue
        name = routines[0] if value_type == ir.F32Type.get() else routines[1]
        if name not in declared:
            with ir.InsertionPoint.at_block_begin(module.body):
                declaration = func.FuncOp(name, ir.FunctionType.get([value_type], [value_type]))
                declaration.attributes["sym_visibility"] = ir.StringAttr.get("private")
            declared.add(name)
        with ir.InsertionPoint(op), op.location:
            call = func.CallOp([value_type], ir.FlatSymbolRefAttr.get(name), [op.operands[0]])
        op.results[0].replace_all_uses_with(call.result)
        op.erase()


def _all_ops(module: ir.Module) -> list[ir.Operation]:
    found: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        found.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return found[:-1]  # the module itself comes last (post-order)


@functools.cache
def _llvm():
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    libm = ctypes.util.find_library("m")
    if libm:  # llvm.tanh and friends become libm calls on the host
        llvm.load_library_permanently(libm)
    return llvm


_ENGINES: list = []  # keep JIT engines (and their code) alive while functions may run


#: Instructions that move a value without computing on it.
_MOVES = re.compile(r"=\s*(bitcast|phi|select|load|insertvalue|extractvalue)\b|^\s*store\b")


def _bfloat_as_bits(text: str) -> str:
    """The LLVM IR with ``bfloat`` values carried as ``i16`` where they are only moved.

    ``arith-expand`` computes every bf16 operation on integers; what is left of
    ``bfloat`` is bitcasts to and from ``i16`` and the phis, selects, loads and stores
    between them. x86 code generation of those for a host without AVX512-BF16 (an
    AMD EPYC, znver3) crashed the process at run time (LLVM 20 through llvmlite
    0.50); carried as the ``i16`` bits they are, nothing changes but the register.
    """
    lines = [line for line in text.splitlines() if "bfloat" in line]
    if not lines or not all(_MOVES.search(line) for line in lines):
        return text
    return re.sub(r"\bbfloat\b", "i16", text)


def jit(module: ir.Module, name: str, pre_lowering: Callable[[ir.Module], None] | None = None):
    """Lower ``module`` to LLVM, JIT it for the host, return a ctypes-callable ``name``."""
    if pre_lowering is not None:
        pre_lowering(module)
    from heron_test_support.host_constants import lower_tensor_constants
    from heron_test_support.naive_indexing import lower_apply_indexing_naively

    lower_apply_indexing_naively(module)
    lower_tensor_constants(module)
    _call_libm_for_accuracy(module)
    passmanager.PassManager.parse(HOST_LOWERING).run(module.operation)
    leftovers = sorted(
        {op.name for op in _all_ops(module) if not op.name.startswith(("llvm.", "builtin."))}
    )
    if leftovers:  # translating them would crash the process instead of raising
        raise ValueError(f"ops left after lowering to LLVM: {', '.join(leftovers)}\n{module}")
    text = _bfloat_as_bits(llvm_dialect.translate_module_to_llvmir(module.operation))
    if re.search(r"fptrunc (<\d+ x )?double[^\n]* to (<\d+ x )?half", text):
        # x86 needs the compiler-rt routine __truncdfhf2, which is not in the process
        raise ValueError("the host JIT cannot truncate f64 to f16 (no __truncdfhf2 on the host)")
    llvm = _llvm()
    target = llvm.Target.from_default_triple()
    machine = target.create_target_machine(
        cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(), opt=2
    )
    parsed = llvm.parse_assembly(text)
    parsed.verify()
    for function in parsed.functions:
        if function.is_declaration and not function.name.startswith("llvm."):
            if not llvm.address_of_symbol(function.name):  # calling it would crash
                raise ValueError(f"the host JIT cannot resolve {function.name!r}")
    engine = llvm.create_mcjit_compiler(parsed, machine)
    engine.finalize_object()
    _ENGINES.append(engine)
    address = engine.get_function_address(name)
    return address


def run_elementwise(
    body: ScalarBuilder,
    arg_elements: Sequence[ElementType],
    result_elements: Sequence[ElementType],
    inputs: Sequence[np.ndarray],
    *,
    arg_scalar_types: Sequence[Callable[[], ir.Type]] | None = None,
    pre_lowering: Callable[[ir.Module], None] | None = None,
) -> list[np.ndarray]:
    """Apply ``body`` to every element of ``inputs`` on the host; one array per result.

    ``arg_scalar_types`` gives, per argument, the MLIR type ``body`` receives
    (default: :func:`heron.emitters.mlir_types.scalar_type` of the element
    type). ``pre_lowering`` runs on the module first (e.g. a heron pass).
    """
    from heron.emitters.mlir_types import scalar_type

    count = int(np.asarray(inputs[0]).size) if inputs else 1
    buffers = [to_storage(np.asarray(x), e) for x, e in zip(inputs, arg_elements, strict=True)]
    outputs = [np.zeros(count, storage_dtype(e)) for e in result_elements]
    context = make_context()
    with context, ir.Location.unknown():
        if arg_scalar_types is None:
            types = [scalar_type(e) for e in arg_elements]
        else:
            types = [make() for make in arg_scalar_types]
        module = build_elementwise_function(
            "heron_host_kernel", arg_elements, types, result_elements, body, count
        )
        module.operation.verify()
        address = jit(module, "heron_host_kernel", pre_lowering)
    signature = ctypes.CFUNCTYPE(
        None, *([ctypes.c_void_p] * (len(buffers) + len(outputs))), ctypes.c_int64
    )
    kernel = signature(address)
    kernel(*(b.ctypes.data for b in buffers), *(o.ctypes.data for o in outputs), count)
    shape = np.asarray(inputs[0]).shape if inputs else ()
    pairs = zip(outputs, result_elements, strict=True)
    return [from_storage(o, e).reshape(shape) for o, e in pairs]
