"""lower-tensors: tensors -> memref loads and stores in a ``gpu.module`` kernel.

The emitters work on tensors in destination-passing style: an output is only
``tensor.insert``-ed into and returned, so every tensor value is one buffer
seen at one moment. That is what makes this lowering a renaming rather than a
bufferization: each tensor value becomes the memref it aliases (the kernel's
argument, a shared-memory attribution or a constant global), extracts and
inserts become loads and stores, and tensor iter_args and results of
``scf.for``/``scf.if`` disappear. The result is the last backend-neutral stage
of docs/pipeline.md, which both backends (``heron.runtime.cuda``,
``heron.runtime.rocm``) and the interpreter device take:

- ``module attributes {gpu.container_module}`` holding one
  ``gpu.module @<entry>_module``;
- the entry as ``gpu.func @<entry>(memref..) kernel`` with ``known_block_size``
  and ``known_grid_size`` from its ``heron.block_size``/``heron.grid_size``,
  and LLVM argument attributes from the kernel ABI (``noalias``, ``readonly``,
  ``align``, ``dereferenceable``: ``heron.emitters.kernel_arguments``), which
  the lowered kernel is checked against; the entry's ``heron.min_blocks_per_core``,
  where an emitter set one, kept as is (``gpu_lowering`` hands it to the backend);
- surviving private functions as ``func.func`` in the gpu.module (tensor
  arguments become memrefs, scalars are unchanged).

Memory types (docs/pipeline.md's table): ``pred`` is one ``i8`` per element,
fp8 is ``i8`` (the ``arith.bitcast`` that follows an fp8 extract, or precedes
an fp8 insert, disappears: the value is already the integer bits), and
sub-byte types (``i4``, ``i2``, ``f4E2M1FN``) are packed into bytes, low bits
first; storing one is two ``memref.atomic_rmw`` (``andi`` to clear its bits,
``ori`` to set them) on the containing byte, because two threads may write
neighbours within one byte, except where one thread provably inserts every
element of a byte (``heron.emitters.pipeline.packed_stores``): that byte is
one plain store, of the elements combined, at the group's last insert. Shared
memory (``allocate_shared``) is the exception: there sub-byte elements are
widened to one ``i8`` each (a plain store, ``trunci`` after a load), as the
emitters already count them in their shared-memory budgets; a packed shared
byte would be read by the read-modify-write before any thread had written it.
"""

from __future__ import annotations

import math

import numpy as np
from mlir import ir
from mlir.dialects import arith, func, gpu, memref, nvgpu, scf, vector

from heron.emitters import atomics, callbacks, ir_utils, kernel_arguments
from heron.emitters.pipeline import packed_stores
from heron.emitters.pipeline.gpu_lowering import MIN_BLOCKS_PER_CORE_ATTR
from heron.emitters.pipeline.manager import Pass, PipelineOptions, run_upstream
from heron.hlo.errors import UnsupportedError

KERNEL_ATTR = kernel_arguments.KERNEL_ATTR
BLOCK_SIZE_ATTR = "heron.block_size"
GRID_SIZE_ATTR = "heron.grid_size"
WORKGROUP_ATTRIBUTIONS = "workgroup_attributions"
#: The workgroup attributions' argument attributes (their ``llvm.align``).
WORKGROUP_ATTRIB_ATTRS = "workgroup_attrib_attrs"
#: LLVM function attributes a function carries to its ``llvm.func`` (``alwaysinline``).
PASSTHROUGH = "passthrough"
#: Largest alignment promised for a vector access (XLA's buffer alignment guarantee).
MAX_VECTOR_ALIGNMENT = 16

# Atomic bodies ``cur <op> x`` that map to one ``memref.atomic_rmw`` kind.
# -- types ------------------------------------------------------------------------------


def _is_small_float(t: ir.Type) -> bool:
    """fp8 and f4 types: held as integer bits in registers, as bytes in memory."""
    return isinstance(t, ir.FloatType) and ir.FloatType(t).width <= 8


def is_packed(element: ir.Type) -> bool:
    """Sub-byte elements (i2, i4, f4E2M1FN): several per byte in memory."""
    if isinstance(element, ir.IntegerType | ir.FloatType):
        width = ir_utils.bit_width(element)
        return 1 < width < 8
    return False


def register_type(element: ir.Type) -> ir.Type:
    """The type a loaded element has in the lowered code (fp8/f4 -> integer bits)."""
    if _is_small_float(element):
        return ir.IntegerType.get_signless(ir_utils.bit_width(element))
    return element


def memory_type(element: ir.Type) -> ir.Type:
    """The element type of the memref a tensor of ``element`` becomes."""
    i8 = ir.IntegerType.get_signless(8)
    if isinstance(element, ir.IntegerType) and ir.IntegerType(element).width < 8:
        return i8
    if _is_small_float(element):
        return i8
    return element


def memref_type(
    tensor_type: ir.Type, memory_space: ir.Attribute | None = None, *, widened: bool = False
) -> ir.MemRefType:
    """``memref<N x memory type>`` for a 1-D static tensor (packed bytes for sub-byte types).

    ``widened``: sub-byte elements one per byte instead (shared memory, see
    ``_Lowering.workgroup_buffer``).
    """
    tensor = ir.RankedTensorType(tensor_type)
    element = tensor.element_type
    size = tensor.shape[0]
    if is_packed(element) and not widened:
        size = -(-size * ir_utils.bit_width(element) // 8)
    return ir.MemRefType.get([size], memory_type(element), memory_space=memory_space)


def _is_tensor(t: ir.Type) -> bool:
    return isinstance(t, ir.RankedTensorType | ir.UnrankedTensorType)


# -- constants --------------------------------------------------------------------------


def _fold(result_type: ir.Type, build) -> ir.Attribute:
    """The attribute of a constant that ``canonicalize`` folds ``build()`` to."""
    module = ir.Module.create()
    with ir.InsertionPoint(module.body):
        function = func.FuncOp("fold", ir.FunctionType.get([], [result_type]))
    with ir.InsertionPoint(function.add_entry_block()):
        func.ReturnOp([build()])
    run_upstream(module, "builtin.module(func.func(canonicalize))")
    returned = ir_utils.block_ops(function.regions[0].blocks[0])[-1].operands[0]
    if not isinstance(returned, ir.OpResult) or returned.owner.name != "arith.constant":
        raise UnsupportedError(f"cannot fold a constant of type {result_type} to memory bits")
    return returned.owner.attributes["value"]


def _integer_values(attr: ir.Attribute, element: ir.Type) -> np.ndarray:
    """The elements of a dense tensor constant as unsigned integers of their bit width.

    The bits are obtained by letting MLIR fold ``arith.bitcast`` (floats) and
    ``arith.extui`` (integers narrower than a byte) on the constant, since the
    bindings cannot read fp8, i1 or i4 elements directly.
    """
    tensor = ir.RankedTensorType(attr.type)
    width = ir_utils.bit_width(element)
    wide = ir.IntegerType.get_signless(max(8, width))
    wide_tensor = ir.RankedTensorType.get(tensor.shape, wide)

    def build() -> ir.Value:
        value = arith.ConstantOp(tensor, attr).result
        if isinstance(element, ir.FloatType):
            bits = ir.RankedTensorType.get(tensor.shape, ir.IntegerType.get_signless(width))
            value = arith.BitcastOp(bits, value).result
        if width < 8:
            value = arith.ExtUIOp(wide_tensor, value).result
        return value

    dense = ir.DenseIntElementsAttr(_fold(wide_tensor, build))
    count = tensor.shape[0]
    if dense.is_splat:
        values = [int(dense.get_splat_value().value)] * count
    else:
        values = [int(dense[i]) for i in range(count)]
    return np.array([v & ((1 << width) - 1) for v in values], dtype=np.uint64)


def memory_constant(attr: ir.Attribute) -> ir.Attribute:
    """A dense tensor constant as the initial value of its memref.global (memory layout)."""
    tensor = ir.RankedTensorType(attr.type)
    element = tensor.element_type
    mem = memref_type(tensor)
    if memory_type(element) == element and not is_packed(element):
        return attr
    values = _integer_values(attr, element)
    if is_packed(element):
        width = ir_utils.bit_width(element)
        per_byte = 8 // width
        padded = np.zeros(mem.shape[0] * per_byte, dtype=np.uint64)
        padded[: len(values)] = values
        shifts = (np.arange(per_byte, dtype=np.uint64) * width)[None, :]
        values = (padded.reshape(-1, per_byte) << shifts).sum(axis=1)
    data = values.astype(np.uint8)
    return ir.DenseElementsAttr.get(data, type=ir.IntegerType.get_signless(8), shape=[mem.shape[0]])


# -- the lowering -----------------------------------------------------------------------


class _Lowering:
    """Lowers one module's functions into a gpu.module; holds the value mapping."""

    def __init__(self, module: ir.Module, entry: ir.Operation) -> None:
        self.module = module
        self.entry = entry
        self.fusion = ir.StringAttr(entry.attributes["sym_name"]).value
        self.values: dict[ir.Value, ir.Value] = {}
        self.kernel: ir.Operation | None = None
        self.gpu_module: ir.Operation | None = None
        self._globals: dict[str, str] = {}
        # packed inserts that write whole bytes together, and the values gathered so far
        self.byte_groups: dict[ir.Value, packed_stores.ByteGroup] = {}
        self.pending_bytes: dict[packed_stores.ByteGroup, dict[int, ir.Value]] = {}

    # -- errors and values --------------------------------------------------------------
    def unsupported(self, op: ir.Operation, why: str) -> UnsupportedError:
        types = ", ".join(str(v.type) for v in [*op.operands, *op.results])
        return UnsupportedError(
            f"lower-tensors: {op.name} in fusion {self.fusion!r} ({types}): {why}"
        )

    def get(self, value: ir.Value) -> ir.Value:
        found = self.values.get(value)
        if found is None:
            if _is_tensor(value.type):
                raise UnsupportedError(
                    f"lower-tensors: tensor {value.type} in fusion {self.fusion!r} has no buffer"
                )
            return value
        return found

    # -- module structure ---------------------------------------------------------------
    def run(self) -> None:
        body = self.module.body
        functions = [op for op in ir_utils.block_ops(body) if op.name == "func.func"]
        with ir.InsertionPoint(body):
            self.gpu_module = gpu.GPUModuleOp(f"{self.fusion}_module").operation
        gpu_body = self.gpu_module.regions[0].blocks.append()
        lowered: list[tuple[ir.Operation, ir.Operation]] = []
        with ir.InsertionPoint(gpu_body):
            for function in functions:
                if function == self.entry or len(function.regions[0].blocks) == 0:
                    continue
                lowered.append((function, self._declare_function(function)))
            self.kernel = self._declare_kernel()
        for old, new in lowered:
            self._lower_function_body(old, new, kernel=False)
        returned = self._lower_function_body(self.entry, self.kernel, kernel=True)
        self._set_argument_attributes(returned)
        for function in functions:
            function.erase()
        self.module.operation.attributes["gpu.container_module"] = ir.UnitAttr.get()

    def _set_argument_attributes(self, returned: list[ir.Value]) -> None:
        """The kernel's LLVM argument attributes (``heron.emitters.kernel_arguments``).

        The outputs are the entry's last arguments, one per result, and any
        argument whose buffer a result is (destination passing: a returned
        tensor is the buffer it was inserted into); the in-place pairs are the
        entry's ``heron.in_place_of`` marks, the arguments sharing a buffer with
        another its ``heron.shares_buffer`` marks. The lowered kernel is then
        checked against the attributes.
        """
        assert self.kernel is not None and self.gpu_module is not None
        arguments = list(self.kernel.regions[0].blocks[0].arguments)
        kernel_type = ir.TypeAttr(self.kernel.attributes["function_type"]).value
        n_args = len(ir.FunctionType(kernel_type).inputs)
        outputs = set(range(n_args - len(returned), n_args))
        for value in returned:
            outputs.update(k for k in range(n_args) if arguments[k] == value)
        kernel_arguments.set_llvm_argument_attributes(
            self.kernel,
            outputs,
            kernel_arguments.in_place_pairs(self.entry),
            kernel_arguments.shared_arguments(self.entry),
        )
        kernel_arguments.check_argument_attributes(
            self.gpu_module, self.kernel, f"lower-tensors: fusion {self.fusion!r}"
        )

    def _signature(self, function: ir.Operation) -> tuple[list[ir.Type], list[ir.Type]]:
        ftype = ir.FunctionType(ir.TypeAttr(function.attributes["function_type"]).value)
        for t in ftype.inputs:
            if _is_tensor(t) and ir.RankedTensorType(t).rank != 1:
                name = ir.StringAttr(function.attributes["sym_name"]).value
                raise UnsupportedError(
                    f"lower-tensors: argument {t} of @{name} in fusion {self.fusion!r}"
                    " is not 1-D (run flatten-tensors first)"
                )
        inputs = [memref_type(t) if _is_tensor(t) else t for t in ftype.inputs]
        return inputs, list(ftype.results)

    def _declare_function(self, function: ir.Operation) -> ir.Operation:
        inputs, results = self._signature(function)
        name = ir.StringAttr(function.attributes["sym_name"]).value
        if any(_is_tensor(t) for t in results):
            raise UnsupportedError(
                f"lower-tensors: function @{name} in fusion {self.fusion!r} returns a tensor"
                f" ({', '.join(map(str, results))}); only the entry may"
            )
        new = func.FuncOp(name, ir.FunctionType.get(inputs, results)).operation
        new.attributes["sym_visibility"] = ir.StringAttr.get("private")
        if PASSTHROUGH in function.attributes:  # LLVM function attributes (the inline pass's)
            new.attributes[PASSTHROUGH] = function.attributes[PASSTHROUGH]
        new.regions[0].blocks.append(*inputs)
        return new

    def _declare_kernel(self) -> ir.Operation:
        inputs, _ = self._signature(self.entry)
        generic = kernel_arguments.SHAPE_GENERIC_ATTR in self.entry.attributes
        kernel = gpu.GPUFuncOp(
            ir.TypeAttr.get(ir.FunctionType.get(inputs, [])),
            sym_name=self.fusion,
            kernel=True,
            known_block_size=self._launch_attr(BLOCK_SIZE_ATTR),
            known_grid_size=None if generic else self._launch_attr(GRID_SIZE_ATTR),
        ).operation
        if generic:
            kernel.attributes[kernel_arguments.SHAPE_GENERIC_ATTR] = ir.UnitAttr.get()
        if MIN_BLOCKS_PER_CORE_ATTR in self.entry.attributes:
            blocks = self.entry.attributes[MIN_BLOCKS_PER_CORE_ATTR]
            kernel.attributes[MIN_BLOCKS_PER_CORE_ATTR] = blocks
        kernel.regions[0].blocks.append(*inputs)
        return kernel

    def _launch_attr(self, name: str) -> list[int]:
        if name not in self.entry.attributes:
            raise UnsupportedError(
                f"lower-tensors: the entry of fusion {self.fusion!r} has no {name} attribute"
            )
        values = list(ir.DenseI64ArrayAttr(self.entry.attributes[name]))
        return [*values, *[1] * (3 - len(values))]

    def _lower_function_body(
        self, old: ir.Operation, new: ir.Operation, *, kernel: bool
    ) -> list[ir.Value]:
        old_block = old.regions[0].blocks[0]
        new_block = new.regions[0].blocks[0]
        for old_arg, new_arg in zip(old_block.arguments, new_block.arguments, strict=False):
            self.values[old_arg] = new_arg
        if len(old.regions[0].blocks) != 1:
            raise UnsupportedError(
                f"lower-tensors: function in fusion {self.fusion!r} has several blocks"
            )
        with ir.InsertionPoint(new_block):
            terminator = self.lower_block(old_block)
            if kernel:
                gpu.ReturnOp([])
                # the buffers of the outputs (for the argument attributes), where known
                return [self.values.get(v, v) for v in terminator.operands]
            returned = [self.get(v) for v in terminator.operands]
            func.ReturnOp(returned)
        return returned

    # -- blocks and ops ------------------------------------------------------------------
    def lower_block(self, block: ir.Block) -> ir.Operation:
        """Lower ``block``'s ops at the current insertion point; returns its terminator."""
        ops = ir_utils.block_ops(block)
        self.byte_groups.update(packed_stores.plan(block, is_packed, ir_utils.bit_width))
        for op in ops[:-1]:
            self.lower_op(op)
        return ops[-1]

    def lower_op(self, op: ir.Operation) -> None:
        handler = _HANDLERS.get(op.name)
        if handler is not None:
            handler(self, op)
            return
        if op.name in _LOWERED_BEFORE:
            raise self.unsupported(op, "lower-heron-gpu-to-scf lowers it: run that pass first")
        if op.name.startswith("heron_gpu."):
            raise self.unsupported(op, "this heron_gpu op has no lowering to memrefs")
        self.clone(op)

    def clone(self, op: ir.Operation) -> None:
        """Copy an op that touches no tensors, with its operands remapped."""
        touches_tensors = False
        # most ops have no regions: no walk (its setup costs more than the check)
        for nested in ir_utils.walk_ops(op) if len(op.regions) else (op,):
            if nested.name.startswith(("tensor.", "heron_gpu.")) or any(
                _is_tensor(v.type) for v in [*nested.operands, *nested.results]
            ):
                touches_tensors = True
        if touches_tensors:
            raise self.unsupported(op, "an op on tensors with no lowering to memrefs")
        for result in op.results:
            if _is_small_float(result.type):
                raise self.unsupported(op, "fp8/f4 values must only be bitcast to integers")
        new = ir_utils.clone_with_mapping(op, self.values)
        for old_result, new_result in zip(op.results, new.results, strict=True):
            self.values[old_result] = new_result

    # -- element access -----------------------------------------------------------------
    def load(self, buffer: ir.Value, element: ir.Type, index: ir.Value) -> ir.Value:
        """One element of ``buffer`` (in memory layout) as its register type."""
        if is_packed(element) and _is_workgroup(buffer):  # widened: one element a byte
            loaded = memref.LoadOp(buffer, [index]).result
            return arith.trunci(ir.IntegerType.get_signless(ir_utils.bit_width(element)), loaded)
        if is_packed(element):
            width = ir_utils.bit_width(element)
            byte, shift = _packed_position(index, width)
            loaded = memref.LoadOp(buffer, [byte]).result
            shifted = arith.shrui(loaded, shift)
            return arith.trunci(ir.IntegerType.get_signless(width), shifted)
        loaded = memref.LoadOp(buffer, [index]).result
        if isinstance(element, ir.IntegerType) and ir.IntegerType(element).width == 1:
            zero = ir_utils.int_constant(0, 8)
            return arith.cmpi(arith.CmpIPredicate.ne, loaded, zero)
        return loaded

    def store(self, value: ir.Value, buffer: ir.Value, element: ir.Type, index: ir.Value) -> None:
        """Store ``value`` (register type) as one element of ``buffer``."""
        i8 = ir.IntegerType.get_signless(8)
        if is_packed(element) and _is_workgroup(buffer):  # widened: a plain byte store
            memref.StoreOp(arith.extui(i8, value), buffer, [index])
            return
        if is_packed(element):
            width = ir_utils.bit_width(element)
            byte, shift = _packed_position(index, width)
            bits = arith.extui(i8, value)
            ones = ir_utils.int_constant((1 << width) - 1, 8)
            clear = arith.xori(arith.shli(ones, shift), ir_utils.int_constant(-1, 8))
            memref.AtomicRMWOp(arith.AtomicRMWKind.andi, clear, buffer, [byte])
            memref.AtomicRMWOp(arith.AtomicRMWKind.ori, arith.shli(bits, shift), buffer, [byte])
            return
        if isinstance(element, ir.IntegerType) and ir.IntegerType(element).width == 1:
            value = arith.extui(i8, value)
        memref.StoreOp(value, buffer, [index])

    # -- global constants ---------------------------------------------------------------
    def global_constant(self, op: ir.Operation) -> ir.Value:
        """A ``memref.get_global`` of the constant global holding tensor constant ``op``."""
        tensor = ir.RankedTensorType(op.results[0].type)
        if tensor.rank != 1:
            raise self.unsupported(op, "constant tensors must be 1-D (run flatten-tensors first)")
        element = tensor.element_type
        plain = memory_type(element) == element and not is_packed(element)
        # The bindings cannot hand out some dense attributes (complex elements), so plain
        # constants travel as text; the others are converted through their integer bits.
        text = (
            _constant_text(op) if plain else _untyped(str(memory_constant(op.attributes["value"])))
        )
        mem = memref_type(tensor)
        name = self._globals.get(text)
        if name is None:
            name = f"{self.fusion}_constant_{len(self._globals)}"
            definition = ir.Operation.parse(
                f'memref.global "private" constant @{name} : {mem} = {text}'
                f" {{alignment = {MAX_VECTOR_ALIGNMENT} : i64}}"
            )
            assert self.gpu_module is not None
            ir.InsertionPoint.at_block_begin(self.gpu_module.regions[0].blocks[0]).insert(
                definition
            )
            self._globals[text] = name
        return memref.GetGlobalOp(mem, name).result

    # -- shared memory ------------------------------------------------------------------
    def workgroup_buffer(self, op: ir.Operation, tensor_type: ir.Type) -> ir.Value:
        """A shared-memory buffer (a workgroup attribution of the kernel).

        Sub-byte elements are stored widened, one a byte: threads then write
        neighbouring elements without a read-modify-write of a shared byte
        (which would read shared memory before anything wrote it, and race).
        Every buffer is ``MAX_VECTOR_ALIGNMENT``-aligned (``llvm.align`` on the
        attribution, the global's alignment after the gpu conversion): the
        element type's alignment (``.align 2`` for f16) is less than what
        ``ldmatrix`` rows and 16-byte vector accesses need, and the vector
        accesses lowered here promise it.
        """
        if self.kernel is None or not self._in_kernel(op):
            raise self.unsupported(op, "shared memory can only be allocated in the kernel")
        space = ir.Attribute.parse("#gpu.address_space<workgroup>")
        block = self.kernel.regions[0].blocks[0]
        arg = block.add_argument(
            memref_type(tensor_type, space, widened=True), ir.Location.unknown()
        )
        count = 0
        if WORKGROUP_ATTRIBUTIONS in self.kernel.attributes:
            count = ir.IntegerAttr(self.kernel.attributes[WORKGROUP_ATTRIBUTIONS]).value
        i64 = ir.IntegerType.get_signless(64)
        self.kernel.attributes[WORKGROUP_ATTRIBUTIONS] = ir.IntegerAttr.get(i64, count + 1)
        aligned = ir.DictAttr.get({"llvm.align": ir.IntegerAttr.get(i64, MAX_VECTOR_ALIGNMENT)})
        previous = []
        if WORKGROUP_ATTRIB_ATTRS in self.kernel.attributes:
            previous = list(ir.ArrayAttr(self.kernel.attributes[WORKGROUP_ATTRIB_ATTRS]))
        self.kernel.attributes[WORKGROUP_ATTRIB_ATTRS] = ir.ArrayAttr.get([*previous, aligned])
        return arg

    def _in_kernel(self, op: ir.Operation) -> bool:
        current = op
        while current is not None and current.name != "func.func":
            parent = current.parent
            current = None if parent is None else parent.operation
        return current is not None and current == self.entry


def _is_workgroup(buffer: ir.Value) -> bool:
    """Whether ``buffer`` is a shared-memory (workgroup) memref."""
    space = ir.MemRefType(buffer.type).memory_space
    return space is not None and "workgroup" in str(space)


def _packed_position(index: ir.Value, width: int) -> tuple[ir.Value, ir.Value]:
    """(byte index, bit offset as i8) of packed element ``index`` of ``width`` bits."""
    per_byte = 8 // width
    byte = arith.shrui(index, ir_utils.index_constant(int(math.log2(per_byte))))
    within = arith.andi(index, ir_utils.index_constant(per_byte - 1))
    bit = arith.muli(within, ir_utils.index_constant(width))
    i8 = ir.IntegerType.get_signless(8)
    return byte, arith.index_cast(i8, bit)


def _constant_text(op: ir.Operation) -> str:
    """The value of ``arith.constant`` as attribute text without its type (``dense<...>``)."""
    return _untyped(str(op.attributes["value"]))  # complex too: heron.emitters.callbacks


def _untyped(text: str) -> str:
    """Attribute text with its trailing ``: type`` removed."""
    return text[: text.rindex(" : ")]


def _element(value: ir.Value) -> ir.Type:
    return ir.RankedTensorType(value.type).element_type


# -- handlers ---------------------------------------------------------------------------


def _extract(lw: _Lowering, op: ir.Operation) -> None:
    tensor, *indices = op.operands
    if len(indices) != 1:
        raise lw.unsupported(op, "tensors must be 1-D (run flatten-tensors first)")
    loaded = lw.load(lw.get(tensor), _element(tensor), lw.get(indices[0]))
    lw.values[op.results[0]] = loaded


def _insert(lw: _Lowering, op: ir.Operation) -> None:
    value, tensor, *indices = op.operands
    if len(indices) != 1:
        raise lw.unsupported(op, "tensors must be 1-D (run flatten-tensors first)")
    buffer = lw.get(tensor)
    group = lw.byte_groups.get(op.results[0])
    if group is not None and not _is_workgroup(buffer):
        _insert_into_byte(lw, op, group, buffer)
        lw.values[op.results[0]] = buffer
        return
    lw.store(lw.get(value), buffer, _element(tensor), lw.get(indices[0]))
    lw.values[op.results[0]] = buffer


def _insert_into_byte(
    lw: _Lowering, op: ir.Operation, group: packed_stores.ByteGroup, buffer: ir.Value
) -> None:
    """Gather one insert of a whole-byte group; the group's last insert stores the byte."""
    results = [insert.results[0] for insert in group.inserts]
    position = group.offsets[results.index(op.results[0])]
    gathered = lw.pending_bytes.setdefault(group, {})
    gathered[position] = lw.get(op.operands[0])
    if op.results[0] != results[-1]:
        return
    del lw.pending_bytes[group]
    i8 = ir.IntegerType.get_signless(8)
    width = 8 // group.per_byte
    byte: ir.Value | None = None
    for position, element in sorted(gathered.items()):
        bits = arith.extui(i8, element)
        if position:
            bits = arith.shli(bits, ir_utils.int_constant(position * width, 8))
        byte = bits if byte is None else arith.ori(byte, bits)
    index = lw.get(group.base.operands[2])
    shift = ir_utils.index_constant(group.per_byte.bit_length() - 1)
    memref.StoreOp(byte, buffer, [arith.shrui(index, shift)])


def _vector_alignment(vector_type: ir.Type) -> int:
    vec = ir.VectorType(vector_type)
    size = vec.shape[0] * ir_utils.bit_width(vec.element_type) // 8
    return min(MAX_VECTOR_ALIGNMENT, 1 << (max(size, 1).bit_length() - 1))


def _check_transfer(lw: _Lowering, op: ir.Operation, tensor: ir.Value, vec_type: ir.Type) -> None:
    element = _element(tensor)
    if memory_type(element) != element or is_packed(element) or _is_small_float(element):
        raise lw.unsupported(op, "vector access to an element type stored differently")
    in_bounds = op.attributes["in_bounds"] if "in_bounds" in op.attributes else None
    if in_bounds is None or not all(ir.BoolAttr(a).value for a in ir.ArrayAttr(in_bounds)):
        raise lw.unsupported(op, "only in-bounds transfers are supported")
    if ir.VectorType(vec_type).rank != 1:
        raise lw.unsupported(op, "only 1-D vectors are supported")


def _transfer_read(lw: _Lowering, op: ir.Operation) -> None:
    tensor = op.operands[0]
    indices = list(op.operands)[1:-1]
    result_type = op.results[0].type
    _check_transfer(lw, op, tensor, result_type)
    if len(indices) != 1:
        raise lw.unsupported(op, "masked or multi-dimensional transfers are not supported")
    loaded = vector.LoadOp(
        result_type,
        lw.get(tensor),
        [lw.get(indices[0])],
        alignment=_vector_alignment(result_type),
    ).result
    lw.values[op.results[0]] = loaded


def _transfer_write(lw: _Lowering, op: ir.Operation) -> None:
    value, tensor, *indices = op.operands
    _check_transfer(lw, op, tensor, value.type)
    if len(indices) != 1:
        raise lw.unsupported(op, "masked or multi-dimensional transfers are not supported")
    buffer = lw.get(tensor)
    vector.StoreOp(
        lw.get(value), buffer, [lw.get(indices[0])], alignment=_vector_alignment(value.type)
    )
    lw.values[op.results[0]] = buffer


def _constant(lw: _Lowering, op: ir.Operation) -> None:
    result_type = op.results[0].type
    if _is_tensor(result_type):
        lw.values[op.results[0]] = lw.global_constant(op)
        return
    attr = op.attributes["value"]
    if _is_small_float(result_type):
        bits = ir.IntegerType.get_signless(ir_utils.bit_width(result_type))
        folded = _fold(
            bits, lambda: arith.BitcastOp(bits, arith.ConstantOp(result_type, attr).result).result
        )
        lw.values[op.results[0]] = arith.ConstantOp(bits, folded).result
        return
    lw.clone(op)


def _bitcast(lw: _Lowering, op: ir.Operation) -> None:
    source = lw.get(op.operands[0])
    target = op.results[0].type
    if _is_small_float(target) or _is_small_float(op.operands[0].type):
        # fp8/f4 values are their integer bits after this pass: the cast disappears.
        if source.type != register_type(target):
            raise lw.unsupported(op, f"cannot reinterpret {source.type} as {target}")
        lw.values[op.results[0]] = source
        return
    lw.clone(op)


def _for(lw: _Lowering, op: ir.Operation) -> None:
    operands = list(op.operands)
    inits = operands[3:]
    keep = [i for i, v in enumerate(inits) if not _is_tensor(v.type)]
    new = scf.ForOp(
        lw.get(operands[0]),
        lw.get(operands[1]),
        lw.get(operands[2]),
        [lw.get(inits[i]) for i in keep],
    ).operation
    old_body = op.regions[0].blocks[0]
    new_body = new.regions[0].blocks[0]
    lw.values[old_body.arguments[0]] = new_body.arguments[0]
    old_args = list(old_body.arguments)[1:]
    for i, arg in enumerate(old_args):
        if i in keep:
            lw.values[arg] = new_body.arguments[1 + keep.index(i)]
        else:
            lw.values[arg] = lw.get(inits[i])
    with ir.InsertionPoint(new_body):
        terminator = lw.lower_block(old_body)
        yielded = list(terminator.operands)
        for i, value in enumerate(yielded):
            if i not in keep and lw.get(value) != lw.get(inits[i]):
                raise lw.unsupported(op, "a loop yields a tensor other than its iter_arg's buffer")
        scf.YieldOp([lw.get(yielded[i]) for i in keep])
    for i, result in enumerate(op.results):
        lw.values[result] = new.results[keep.index(i)] if i in keep else lw.get(inits[i])


def _if(lw: _Lowering, op: ir.Operation) -> None:
    results = list(op.results)
    keep = [i for i, r in enumerate(results) if not _is_tensor(r.type)]
    has_else = len(op.regions[1].blocks) > 0
    new = scf.IfOp(
        lw.get(op.operands[0]), [results[i].type for i in keep], has_else=has_else
    ).operation
    buffers: dict[int, ir.Value] = {}
    for region in range(2 if has_else else 1):
        old_block = op.regions[region].blocks[0]
        new_block = new.regions[region].blocks[0]
        with ir.InsertionPoint(new_block):
            terminator = lw.lower_block(old_block)
            yielded = list(terminator.operands)
            for i, value in enumerate(yielded):
                if i in keep:
                    continue
                buffer = lw.get(value)
                if buffers.setdefault(i, buffer) != buffer:
                    raise lw.unsupported(op, "the branches yield tensors of different buffers")
            scf.YieldOp([lw.get(yielded[i]) for i in keep])
    for i, result in enumerate(results):
        lw.values[result] = new.results[keep.index(i)] if i in keep else buffers[i]


def _call(lw: _Lowering, op: ir.Operation) -> None:
    callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
    if any(_is_tensor(r.type) for r in op.results):
        raise lw.unsupported(op, "calls returning tensors are not supported")
    operands = [lw.get(v) for v in op.operands]
    call = func.CallOp([r.type for r in op.results], callee, operands)
    for old, new in zip(op.results, call.results, strict=True):
        lw.values[old] = new


def _allocate_shared(lw: _Lowering, op: ir.Operation) -> None:
    tensor_type = op.results[0].type
    if ir.RankedTensorType(tensor_type).rank != 1:
        raise lw.unsupported(op, "shared memory tensors must be 1-D (run flatten-tensors first)")
    lw.values[op.results[0]] = lw.workgroup_buffer(op, tensor_type)


def _sync_threads(lw: _Lowering, op: ir.Operation) -> None:
    gpu.BarrierOp()
    for operand, result in zip(op.operands, op.results, strict=True):
        lw.values[result] = lw.get(operand)


def _ldmatrix(lw: _Lowering, op: ir.Operation) -> None:
    """``heron_gpu.ldmatrix`` -> ``nvgpu.ldmatrix`` on the shared buffer (the lane's row
    address is its element of the 1-D buffer)."""
    src, *indices = op.operands
    if len(indices) != 1:
        raise lw.unsupported(op, "tensors must be 1-D (run flatten-tensors first)")
    buffer = lw.get(src)
    element = _element(src)
    if not _is_workgroup(buffer) or memory_type(element) != element:
        raise lw.unsupported(op, "ldmatrix reads a shared tensor stored as its elements")
    tiles = ir.IntegerAttr(op.attributes["num_tiles"]).value
    loaded = nvgpu.ldmatrix(op.results[0].type, buffer, [lw.get(indices[0])], False, tiles)
    lw.values[op.results[0]] = loaded


def _atomic_rmw(lw: _Lowering, op: ir.Operation) -> None:
    """``heron_gpu.atomic_rmw`` -> one native atomic, or a compare-and-swap loop.

    A body ``current <op> x`` with a native kind becomes ``memref.atomic_rmw``
    (for any width the kind supports: f16, bf16, f64, i8 to i64); a body that
    ignores the current value is an atomic exchange (``assign``). Anything
    else is ``memref.generic_atomic_rmw`` (a CAS loop). LLVM's ``cmpxchg``
    takes integers only, so a float element is updated through an integer
    view of its buffer, the body bitcasting around the combiner. A packed
    sub-byte element (i2, i4, f4E2M1FN) is updated by a CAS loop on its whole
    byte: the loop extracts the element's bits, applies the body and merges
    the result back, leaving the byte's other elements as they are.
    """
    tensor, *indices = op.operands
    element = _element(tensor)
    if len(indices) != 1:
        raise lw.unsupported(op, "tensors must be 1-D (run flatten-tensors first)")
    if is_packed(element):
        _packed_generic_atomic(
            lw, op.regions[0].blocks[0], lw.get(tensor), lw.get(indices[0]), element
        )
        lw.values[op.results[0]] = lw.get(tensor)
        return
    if memory_type(element) != element or is_packed(element):
        raise lw.unsupported(
            op,
            f"atomic updates of {element} elements are not supported (they are stored as"
            f" {memory_type(element)}{', packed' if is_packed(element) else ''})",
        )
    if not isinstance(element, ir.IntegerType | ir.FloatType):
        raise lw.unsupported(op, f"atomic updates of {element} elements are not supported")
    buffer = lw.get(tensor)
    index = lw.get(indices[0])
    body = op.regions[0].blocks[0]
    simple = atomics.simple_atomic(body)
    if isinstance(body.arguments[0].type, ir.VectorType):
        _vector_atomic(lw, op, simple, buffer, index)
    elif simple is not None:
        kind, operand = simple
        memref.AtomicRMWOp(getattr(arith.AtomicRMWKind, kind), lw.get(operand), buffer, [index])
    elif isinstance(element, ir.IntegerType):
        _generic_atomic(lw, body, buffer, index, element)
    elif _calls_by_name(body):
        _float_cas_loop(lw, body, buffer, index, element)
    else:
        _float_generic_atomic(lw, body, buffer, index, element)
    lw.values[op.results[0]] = buffer


def _vector_atomic(
    lw: _Lowering,
    op: ir.Operation,
    simple: tuple[str, ir.Value] | None,
    buffer: ir.Value,
    index: ir.Value,
) -> None:
    """A vector atomic add -> one scalar ``memref.atomic_rmw`` per lane, each marked.

    ``vectorize-loads-stores`` makes vector atomics only where the device adds a
    vector at once and the index is aligned; no memref op says that, so the lanes
    carry the mark (:func:`heron.emitters.atomics.mark_lane`) that lets a backend
    join them into one instruction again. Only adds are vectorized.
    """
    if simple is None or simple[0] != "addf":
        raise lw.unsupported(op, "a vector atomic_rmw must add a value to the current one")
    addend = lw.get(simple[1])
    lanes = ir.VectorType(addend.type).shape[0]
    for lane in range(lanes):
        value = vector.ExtractOp(addend, [], [lane]).result
        at = index if lane == 0 else arith.addi(index, ir_utils.index_constant(lane))
        atomic = memref.AtomicRMWOp(arith.AtomicRMWKind.addf, value, buffer, [at])
        atomics.mark_lane(atomic.operation, lane, lanes)


def _generic_atomic(
    lw: _Lowering, body: ir.Block, buffer: ir.Value, index: ir.Value, element: ir.Type
) -> None:
    """A CAS loop on an integer element: the body lowered into the loop's region."""
    generic = memref.GenericAtomicRMWOp(element, buffer, [index])
    block = generic.regions[0].blocks.append(element)
    lw.values[body.arguments[0]] = block.arguments[0]
    with ir.InsertionPoint(block):
        terminator = lw.lower_block(body)
        memref.AtomicYieldOp(lw.get(terminator.operands[0]))


def _packed_generic_atomic(
    lw: _Lowering, body: ir.Block, buffer: ir.Value, index: ir.Value, element: ir.Type
) -> None:
    """A CAS loop on the byte holding packed element ``index``; the other bits are kept.

    In shared memory the element has its byte to itself (widened): shift 0.
    """
    width = ir_utils.bit_width(element)
    i8 = ir.IntegerType.get_signless(8)
    bits = ir.IntegerType.get_signless(width)
    if _is_workgroup(buffer):
        byte, shift = index, ir_utils.int_constant(0, 8)
    else:
        byte, shift = _packed_position(index, width)
    keep = arith.xori(
        arith.shli(ir_utils.int_constant((1 << width) - 1, 8), shift), ir_utils.int_constant(-1, 8)
    )
    generic = memref.GenericAtomicRMWOp(i8, buffer, [byte])
    block = generic.regions[0].blocks.append(i8)
    with ir.InsertionPoint(block):
        old = block.arguments[0]
        # The element's bits in registers (fp4 is held as its integer bits, see register_type).
        lw.values[body.arguments[0]] = arith.trunci(bits, arith.shrui(old, shift))
        terminator = lw.lower_block(body)
        new = arith.shli(arith.extui(i8, lw.get(terminator.operands[0])), shift)
        memref.AtomicYieldOp(arith.ori(arith.andi(old, keep), new))


def _float_generic_atomic(
    lw: _Lowering, body: ir.Block, buffer: ir.Value, index: ir.Value, element: ir.Type
) -> None:
    """A CAS loop on a float element through the integer view of its buffer."""
    bits, view = _integer_view(buffer, element)
    generic = memref.GenericAtomicRMWOp(bits, view, [index])
    block = generic.regions[0].blocks.append(bits)
    with ir.InsertionPoint(block):
        lw.values[body.arguments[0]] = arith.BitcastOp(element, block.arguments[0]).result
        terminator = lw.lower_block(body)
        memref.AtomicYieldOp(arith.BitcastOp(bits, lw.get(terminator.operands[0])).result)


def _float_cas_loop(
    lw: _Lowering, body: ir.Block, buffer: ir.Value, index: ir.Value, element: ir.Type
) -> None:
    """A CAS loop on a float element, the combiner computed outside the atomic op.

    ``memref.generic_atomic_rmw`` admits only ops MLIR knows to be free of side effects
    in its body, which an intrinsic called by name (``llvm.call_intrinsic``: the
    exponential's ``exp2``, a square root) is not: a scatter whose combiner takes the
    exponential or the square root of the current value (``x.at[i].apply(jnp.exp)``)
    failed verification. So, as XLA's own CAS loop does, the loop reads the current
    bits, computes the combiner, and swaps the result in only where the element still
    holds those bits (an atomic op whose body is a compare and a select), again from
    the bits it found until they agree. The first read is atomic too.
    """
    bits, view = _integer_view(buffer, element)
    read = memref.GenericAtomicRMWOp(bits, view, [index])
    read_block = read.regions[0].blocks.append(bits)
    with ir.InsertionPoint(read_block):
        memref.AtomicYieldOp(read_block.arguments[0])
    loop = scf.WhileOp([bits], [read.result])
    before = loop.before.blocks.append(bits)
    with ir.InsertionPoint(before):
        expected = before.arguments[0]
        lw.values[body.arguments[0]] = arith.BitcastOp(element, expected).result
        terminator = lw.lower_block(body)
        new = arith.BitcastOp(bits, lw.get(terminator.operands[0])).result
        swap = memref.GenericAtomicRMWOp(bits, view, [index])
        swap_block = swap.regions[0].blocks.append(bits)
        with ir.InsertionPoint(swap_block):
            found = swap_block.arguments[0]
            unchanged = arith.CmpIOp(arith.CmpIPredicate.eq, found, expected).result
            memref.AtomicYieldOp(arith.SelectOp(unchanged, new, found).result)
        changed = arith.CmpIOp(arith.CmpIPredicate.ne, swap.result, expected).result
        scf.ConditionOp(changed, [swap.result])
    after = loop.after.blocks.append(bits)
    with ir.InsertionPoint(after):
        scf.YieldOp([after.arguments[0]])


def _integer_view(buffer: ir.Value, element: ir.Type) -> tuple[ir.Type, ir.Value]:
    """The integer type of ``element``'s width and ``buffer`` viewed as such integers
    (LLVM's ``cmpxchg`` takes integers only)."""
    bits = ir.IntegerType.get_signless(ir_utils.bit_width(element))
    source = ir.MemRefType(buffer.type)
    view_type = ir.MemRefType.get(list(source.shape), bits, memory_space=source.memory_space)
    return bits, arith.BitcastOp(view_type, buffer).result


def _calls_by_name(body: ir.Block) -> bool:
    """Whether ``body`` calls an intrinsic by name (an op with side effects to MLIR)."""
    return any(callbacks.collect_ops(op, "llvm.call_intrinsic", label="atomic body") for op in body)


def _pure_call(lw: _Lowering, op: ir.Operation) -> None:
    _call(lw, op)


def _unexpected_terminator(lw: _Lowering, op: ir.Operation) -> None:
    raise lw.unsupported(op, "unexpected terminator in the middle of a block")


#: What lower-heron-gpu-to-scf (``pipeline/lower_to_scf.py``) lowers, before this pass.
_LOWERED_BEFORE = frozenset(
    {"heron_gpu.predicated_insert", "heron_gpu.predicated_extract", "heron_gpu.shuffle_reduce"}
)

_HANDLERS = {
    "tensor.extract": _extract,
    "tensor.insert": _insert,
    "vector.transfer_read": _transfer_read,
    "vector.transfer_write": _transfer_write,
    "arith.constant": _constant,
    "arith.bitcast": _bitcast,
    "scf.for": _for,
    "scf.if": _if,
    "func.call": _call,
    "heron_gpu.pure_call": _pure_call,
    "heron_gpu.allocate_shared": _allocate_shared,
    "heron_gpu.sync_threads": _sync_threads,
    "heron_gpu.atomic_rmw": _atomic_rmw,
    "heron_gpu.ldmatrix": _ldmatrix,
}


def _entry_function(module: ir.Module) -> ir.Operation:
    functions = [op for op in ir_utils.block_ops(module.body) if op.name == "func.func"]
    kernels = [f for f in functions if KERNEL_ATTR in f.attributes]
    if len(kernels) != 1:
        public = [f for f in functions if "sym_visibility" not in f.attributes]
        if len(kernels) == 0 and len(public) == 1:
            return public[0]
        raise UnsupportedError(
            f"lower-tensors: expected one entry function marked {KERNEL_ATTR}, found {len(kernels)}"
        )
    return kernels[0]


def lower_tensors(module: ir.Module, options: PipelineOptions | None = None) -> None:
    """Rewrite ``module`` (in place) into the gpu.module form described above."""
    del options  # what it needs of the device is in the IR (the kernel's launch attributes)
    if any(op.name == "gpu.module" for op in ir_utils.block_ops(module.body)):
        raise UnsupportedError("lower-tensors: the module already holds a gpu.module")
    module.context.dialects["memref"]  # noqa: B018 - indexing loads the dialect
    _Lowering(module, _entry_function(module)).run()


def run(module: ir.Module, options: PipelineOptions) -> None:
    lower_tensors(module, options)


PASS = Pass(
    name="lower-tensors",
    run=run,
    description="tensors -> memref loads/stores in a gpu.module kernel",
)
