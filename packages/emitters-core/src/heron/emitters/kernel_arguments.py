"""Kernel arguments: which buffers may alias and which are read-only, from the kernel ABI to LLVM.

The kernel ABI (``heron.emitters.emitter_base``: fusion parameter leaves, then
outputs) and the buffer assignment say everything LLVM needs to know about the
kernel's pointers, as XLA's buffer assignment does for its kernels:

- distinct buffers never overlap: every argument is ``noalias``, except an
  in-place output (``FusionEmitter.output_aliases``: dynamic-update-slice,
  scatter) and the parameter whose buffer it is, which may be one buffer,
  and except a *shared* argument (``SHARED_ATTR``): one whose slice the buffer
  assignment made overlap another argument's outside those pairs;
- a parameter the kernel never writes is ``readonly`` (an aliased or shared
  parameter is not: the kernel writes its buffer through another argument);
- every buffer is aligned to ``BUFFER_ALIGNMENT`` bytes (the guarantee the
  vector accesses of lower-tensors already rely on) and ``dereferenceable``
  for its whole size (the memref's bytes: a zero-element array's one-element
  placeholder included, which the runtimes allocate).

``noalias`` and ``readonly`` together are what lets NVPTX load through the
read-only data cache (``ld.global.nc``), which is not coherent with the
kernel's own stores: a buffer written during the kernel must not be read
through it, and two ``noalias`` pointers into one written buffer are undefined
behaviour for LLVM. They state what heron's launchers do
(``heron.compiler.device_kernels``): every argument is an allocation of its
own, of at least the memref's bytes, and an in-place output starts as a copy
of its parameter or is the parameter's buffer itself. A buffer assignment that
hands a kernel overlapping slices of one allocation declares them here: thunk
emission (``heron.compiler.thunk_emission``) finds the arguments whose slice
overlaps a written argument's (a while body's new state element over the old
one, an update of a donated parameter written into the parameter's buffer),
and the kernel is compiled for them (``compile_fusion(..., shared=...)``),
as XLA computes noalias from the slices. Kernels whose arguments do not
overlap carry no mark and compile exactly as without this rule.

The facts travel as data. The emitter marks each in-place output argument of
the entry ``func.func`` with ``heron.in_place_of = <parameter argument index>``
(``mark_in_place``), and emission for a buffer assignment marks each shared
argument with the unit attribute ``heron.shares_buffer`` (``mark_shared``);
the passes keep argument attributes; lower-tensors reads them back
(``in_place_pairs``, ``shared_arguments``) and gives the ``gpu.func`` the LLVM
dialect's argument attributes (``llvm_argument_attributes``), which
``convert-gpu-to-nvvm``/``convert-gpu-to-rocdl`` copy to the ``llvm.func``'s
pointers and the translation to LLVM IR prints (``ptr noalias readonly align 16
dereferenceable(N)``). lower-tensors then holds the lowered kernel to them
(``check_argument_attributes``): a store or atomic reaching a ``readonly``
argument, or an aliased pair or shared argument with ``noalias`` or
``readonly``, is an error, not a miscompile. The interpreter runs the
lower-tensors module and ignores them.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from mlir import ir

from heron.emitters import ir_utils
from heron.hlo.errors import UnsupportedError

__all__ = [
    "BUFFER_ALIGNMENT",
    "IN_PLACE_ATTR",
    "KERNEL_ATTR",
    "LLVM_ALIGN",
    "LLVM_DEREFERENCEABLE",
    "LLVM_NOALIAS",
    "LLVM_READONLY",
    "SHAPE_GENERIC_ATTR",
    "SHARED_ATTR",
    "argument_attributes",
    "check_argument_attributes",
    "in_place_pairs",
    "llvm_argument_attributes",
    "mark_in_place",
    "mark_shared",
    "read_only_arguments",
    "set_llvm_argument_attributes",
    "shared_arguments",
    "written_arguments",
]

#: On the emitted entry ``func.func``: this function is the kernel (the others are callees).
KERNEL_ATTR = "heron.kernel"
#: On an output argument of the emitted entry: the index of the argument whose buffer it is.
IN_PLACE_ATTR = "heron.in_place_of"
#: On an argument of the emitted entry (a unit attribute): the buffer assignment hands the
#: kernel a slice overlapping another argument's, outside the in-place pairs.
SHARED_ATTR = "heron.shares_buffer"
#: On the emitted entry and the ``gpu.func`` it becomes (a unit attribute): a kernel built
#: once for any size (``FusionEmitter.shape_generic``): its memref types are upper bounds,
#: so its arguments get no ``llvm.dereferenceable``, it declares no grid size, and a device
#: binds each argument by its buffer's size. Dropped before the LLVM translation.
SHAPE_GENERIC_ATTR = "heron.shape_generic"
LLVM_NOALIAS = "llvm.noalias"
LLVM_READONLY = "llvm.readonly"
LLVM_ALIGN = "llvm.align"
LLVM_DEREFERENCEABLE = "llvm.dereferenceable"
#: Alignment of every kernel buffer (XLA's guarantee for entry parameters; lower-tensors'
#: ``MAX_VECTOR_ALIGNMENT``).
BUFFER_ALIGNMENT = 16

# Ops that only read a memref operand, and ops whose results are views of it.
_READS = frozenset(
    {
        "memref.load",
        "memref.dim",
        "memref.extract_strided_metadata",
        "memref.extract_aligned_pointer_as_index",
        "vector.load",
        "vector.maskedload",
        "vector.transfer_read",
        "vector.gather",
        "gpu.subgroup_mma_load_matrix",
    }
)
_VIEWS = frozenset(
    {
        "arith.bitcast",
        "memref.cast",
        "memref.reinterpret_cast",
        "memref.subview",
        "memref.view",
        "memref.collapse_shape",
        "memref.expand_shape",
        "memref.memory_space_cast",
        "builtin.unrealized_conversion_cast",
    }
)


def _i64(value: int) -> ir.IntegerAttr:
    return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), value)


def _arg_attrs(function: ir.Operation, count: int) -> list[dict[str, ir.Attribute]]:
    """The argument attribute dictionaries of ``function`` (``count`` arguments), as dicts."""
    result: list[dict[str, ir.Attribute]] = [{} for _ in range(count)]
    if "arg_attrs" not in function.attributes:
        return result
    for k, entry in enumerate(ir.ArrayAttr(function.attributes["arg_attrs"])):
        if k < count:
            dictionary = ir.DictAttr(entry)
            result[k] = {dictionary[i].name: dictionary[i].attr for i in range(len(dictionary))}
    return result


def _set_arg_attrs(function: ir.Operation, attrs: Sequence[Mapping[str, ir.Attribute]]) -> None:
    function.attributes["arg_attrs"] = ir.ArrayAttr.get([ir.DictAttr.get(dict(a)) for a in attrs])


def _function_type(function: ir.Operation) -> ir.FunctionType:
    return ir.FunctionType(ir.TypeAttr(function.attributes["function_type"]).value)


def mark_in_place(function: ir.Operation, aliases: Mapping[int, int]) -> None:
    """Mark the entry's in-place outputs: output ``k`` (among the outputs) is parameter ``p``.

    ``function`` is the emitted entry ``func.func`` (parameters, then one
    argument per output); ``aliases`` is ``FusionEmitter.output_aliases()``.
    """
    ftype = _function_type(function)
    n_args, n_outputs = len(ftype.inputs), len(ftype.results)
    n_params = n_args - n_outputs
    attrs = _arg_attrs(function, n_args)
    for output, param in aliases.items():
        if not (0 <= output < n_outputs and 0 <= param < n_params):
            raise UnsupportedError(
                f"output {output} cannot alias parameter {param}: the kernel has"
                f" {n_params} parameters and {n_outputs} outputs"
            )
        attrs[n_params + output][IN_PLACE_ATTR] = _i64(param)
    if aliases:
        _set_arg_attrs(function, attrs)


def mark_shared(function: ir.Operation, shared: Collection[int]) -> None:
    """Mark the entry's arguments ``shared`` (argument indices) ``SHARED_ATTR``.

    ``function`` is the emitted entry ``func.func``. Nothing is changed when
    ``shared`` is empty: a kernel whose arguments do not overlap is the module
    the emitter made, byte for byte.
    """
    n_args = len(_function_type(function).inputs)
    bad = sorted(k for k in shared if not 0 <= k < n_args)
    if bad:
        raise UnsupportedError(
            f"kernel arguments {bad} cannot share a buffer: the kernel has {n_args} arguments"
        )
    if not shared:
        return
    attrs = _arg_attrs(function, n_args)
    for k in shared:
        attrs[k][SHARED_ATTR] = ir.UnitAttr.get()
    _set_arg_attrs(function, attrs)


def shared_arguments(function: ir.Operation) -> set[int]:
    """Indices of the arguments of ``function`` marked ``SHARED_ATTR`` (``mark_shared``)."""
    count = len(_function_type(function).inputs)
    return {k for k, attrs in enumerate(_arg_attrs(function, count)) if SHARED_ATTR in attrs}


def in_place_pairs(function: ir.Operation) -> dict[int, int]:
    """Argument index of each in-place output -> argument index of its parameter."""
    count = len(_function_type(function).inputs)
    return {
        k: ir.IntegerAttr(attrs[IN_PLACE_ATTR]).value
        for k, attrs in enumerate(_arg_attrs(function, count))
        if IN_PLACE_ATTR in attrs
    }


def read_only_arguments(function: ir.Operation) -> set[int]:
    """Indices of the arguments of emitted entry ``function`` whose buffer it never writes.

    Parameters outside in-place pairs and not shared (``argument_attributes``'
    ``readonly``): their elements hold the same value for the whole kernel, so a pass
    may read one earlier than the kernel does.
    """
    ftype = _function_type(function)
    n_args = len(ftype.inputs)
    outputs = range(n_args - len(ftype.results), n_args)
    flags = argument_attributes(
        n_args, outputs, in_place_pairs(function), shared_arguments(function)
    )
    return {k for k, (_, readonly) in enumerate(flags) if readonly}


def _byte_size(memref_type: ir.Type) -> int | None:
    """Bytes of a static memref of integers, floats or complex numbers (None otherwise)."""
    memref = ir.MemRefType(memref_type)
    if not memref.has_static_shape:
        return None
    element = memref.element_type
    parts = 1
    if isinstance(element, ir.ComplexType):
        element, parts = ir.ComplexType(element).element_type, 2
    if isinstance(element, ir.IntegerType):
        bits = ir.IntegerType(element).width
    elif isinstance(element, ir.FloatType):
        bits = ir.FloatType(element).width
    else:
        return None
    count = 1
    for size in memref.shape:
        count *= size
    return count * parts * -(-bits // 8)


def argument_attributes(
    n_args: int,
    outputs: Collection[int],
    pairs: Mapping[int, int],
    shared: Collection[int] = (),
) -> list[tuple[bool, bool]]:
    """``(noalias, readonly)`` for each of ``n_args`` kernel arguments.

    ``outputs`` are the indices of the output arguments, ``pairs`` the in-place
    pairs (``in_place_pairs``), ``shared`` the arguments whose buffer overlaps
    another's (``shared_arguments``): an argument of a pair or a shared one is
    neither, any other argument is ``noalias``, and ``readonly`` unless it is an
    output.
    """
    aliased = {k for pair in pairs.items() for k in pair} | set(shared)
    return [(k not in aliased, k not in outputs and k not in aliased) for k in range(n_args)]


def llvm_argument_attributes(
    memref_types: Sequence[ir.Type],
    outputs: Collection[int],
    pairs: Mapping[int, int],
    shared: Collection[int] = (),
    shape_generic: bool = False,
) -> list[dict[str, ir.Attribute]]:
    """The LLVM argument attributes of a kernel taking ``memref_types``.

    ``outputs``, ``pairs`` and ``shared`` as for ``argument_attributes``. A
    non-memref argument gets none. See the module docstring. A ``shape_generic``
    kernel's memref sizes are upper bounds, not sizes: no ``dereferenceable``.
    """
    result = []
    flags = argument_attributes(len(memref_types), outputs, pairs, shared)
    for memref_type, (noalias, readonly) in zip(memref_types, flags, strict=True):
        attrs: dict[str, ir.Attribute] = {}
        if isinstance(memref_type, ir.MemRefType):
            if noalias:
                attrs[LLVM_NOALIAS] = ir.UnitAttr.get()
            if readonly:
                attrs[LLVM_READONLY] = ir.UnitAttr.get()
            attrs[LLVM_ALIGN] = _i64(BUFFER_ALIGNMENT)
            size = 0 if shape_generic else _byte_size(memref_type)
            if size:
                attrs[LLVM_DEREFERENCEABLE] = _i64(size)
        result.append(attrs)
    return result


def set_llvm_argument_attributes(
    kernel: ir.Operation,
    outputs: Collection[int],
    pairs: Mapping[int, int],
    shared: Collection[int] = (),
) -> None:
    """Give ``kernel`` (a ``gpu.func``) the attributes of ``llvm_argument_attributes``.

    The in-place and shared marks (``IN_PLACE_ATTR``, ``SHARED_ATTR``) stay beside
    them, for the checks and readers of the lower-tensors stage (the conversions to
    NVVM and ROCDL drop them).
    """
    inputs = list(_function_type(kernel).inputs)
    generic = SHAPE_GENERIC_ATTR in kernel.attributes
    attrs = llvm_argument_attributes(inputs, outputs, pairs, shared, generic)
    for k, param in pairs.items():
        attrs[k][IN_PLACE_ATTR] = _i64(param)
    for k in shared:
        attrs[k][SHARED_ATTR] = ir.UnitAttr.get()
    _set_arg_attrs(kernel, attrs)


def _symbol(op: ir.Operation) -> str:
    return ir.StringAttr(op.attributes["sym_name"]).value


def written_arguments(gpu_module: ir.Operation, kernel: ir.Operation) -> dict[int, list[str]]:
    """Kernel argument index -> the ops that may write its buffer, in the lowered module.

    Follows each memref argument through views (bitcasts, casts, subviews) and
    calls of the gpu.module's functions; a use that is not a known read or view
    counts as a write (stores, atomics, anything unknown).
    """
    functions = {
        _symbol(op): op
        for op in ir_utils.block_ops(gpu_module.regions[0].blocks[0])
        if op.name == "func.func" and len(op.regions[0].blocks) > 0
    }
    n_args = len(_function_type(kernel).inputs)
    arguments = list(kernel.regions[0].blocks[0].arguments)[:n_args]
    written: dict[int, list[str]] = {}
    for k, argument in enumerate(arguments):
        if not isinstance(argument.type, ir.MemRefType):
            continue
        seen: set[ir.Value] = set()
        work = [argument]
        writes: list[str] = []
        while work:
            value = work.pop()
            if value in seen:
                continue
            seen.add(value)
            for use in value.uses:
                owner = use.owner.operation if hasattr(use.owner, "operation") else use.owner
                name = owner.name
                if name in _READS:
                    continue
                if name in _VIEWS:
                    work.extend(owner.results)
                    continue
                if name == "func.call":
                    callee = functions.get(ir.FlatSymbolRefAttr(owner.attributes["callee"]).value)
                    if callee is not None:
                        work.append(callee.regions[0].blocks[0].arguments[use.operand_number])
                        continue
                writes.append(name)
        if writes:
            written[k] = writes
    return written


def check_argument_attributes(gpu_module: ir.Operation, kernel: ir.Operation, where: str) -> None:
    """Refuse a kernel whose argument attributes its lowered code contradicts.

    A ``readonly`` argument must never be written (``written_arguments``), and
    the two arguments of an in-place pair, and a shared argument (``SHARED_ATTR``),
    are neither ``noalias`` nor ``readonly``.
    """
    n_args = len(_function_type(kernel).inputs)
    attrs = _arg_attrs(kernel, n_args)
    for k, ops in written_arguments(gpu_module, kernel).items():
        if LLVM_READONLY in attrs[k]:
            raise UnsupportedError(
                f"{where}: kernel argument {k} is marked readonly but the kernel writes it"
                f" ({', '.join(sorted(set(ops)))})"
            )
    for k, attr in enumerate(attrs):
        if IN_PLACE_ATTR in attr:
            for j in (k, ir.IntegerAttr(attr[IN_PLACE_ATTR]).value):
                if LLVM_NOALIAS in attrs[j] or LLVM_READONLY in attrs[j]:
                    raise UnsupportedError(
                        f"{where}: kernel argument {j} shares its buffer with another"
                        " argument but is marked noalias or readonly"
                    )
        if SHARED_ATTR in attr and (LLVM_NOALIAS in attr or LLVM_READONLY in attr):
            raise UnsupportedError(
                f"{where}: kernel argument {k} overlaps another argument's buffer (the buffer"
                " assignment's slices) but is marked noalias or readonly"
            )
