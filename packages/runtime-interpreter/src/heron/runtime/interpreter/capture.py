"""MLIR module (``lower-tensors`` stage) -> :class:`~.program.Program`: the interpreter's compiler.

This is the only module of the interpreter that imports MLIR, and it does so
only when called: the interpreter backend names its stage
(``heron.runtime.interpreter.capture:capture_stage``), which the backend
registry imports lazily, so a machine without MLIR can still run a captured
program.

Attributes become JSON values (:func:`attribute_value`): integers, floats
(``{"bits": "0x7fc00001"}`` when the text is a hexadecimal bit pattern, so
NaN payloads survive), strings, booleans, lists for the dense arrays,
``{"dense": base64, "type": text, "splat": bool}`` for dense elements (their
bytes in the numpy form of :mod:`~.types`), symbol names as strings, and any
other attribute as its MLIR text (``"#gpu<dim x>"``, enum keywords).
"""

from __future__ import annotations

import base64
import itertools
import re
from typing import Any

import numpy as np

from heron.emitters.kernel_arguments import SHAPE_GENERIC_ATTR
from heron.runtime.core.device import KernelImage
from heron.runtime.interpreter.program import (
    FORMAT,
    Block,
    Function,
    Global,
    Op,
    Program,
    Region,
)
from heron.runtime.interpreter.types import MemRefType, parse_type

__all__ = ["attribute_value", "capture_module", "capture_stage", "compile_kernel_image"]

_HEX_FLOAT = re.compile(r"(0x[0-9A-Fa-f]+)\s*:")


def capture_stage(lowered, context) -> KernelImage:
    """The interpreter backend's one stage (``heron.runtime.core.hookspecs``): the image.

    The program does not depend on the Target: the device emulates its warp
    width at run time, and heron's passes already lowered for it.
    """
    return compile_kernel_image(lowered, context.kernel_name)


def compile_kernel_image(lowered, kernel_name: str | None = None) -> KernelImage:
    """A lower-tensors module (or its text) -> a KernelImage of the kernel ``kernel_name``."""
    program = capture_module(lowered)
    kernels = program.kernels
    if kernel_name is None:
        if len(kernels) != 1:
            raise ValueError(f"the module has {len(kernels)} kernels ({kernels}); name one")
        kernel_name = kernels[0]
    elif kernel_name not in kernels:
        raise ValueError(f"the module has no kernel '{kernel_name}' (it has {kernels})")
    return KernelImage(FORMAT, kernel_name, program.to_json())


def capture_module(lowered) -> Program:
    """Every function and global of the module's (single) ``gpu.module``."""
    from mlir import ir

    if isinstance(lowered, str):
        from heron.emitters.dialect import make_context  # heron_gpu may appear in the text

        lowered = ir.Module.parse(lowered, make_context())
    gpu_modules = [op for op in lowered.body.operations if op.operation.name == "gpu.module"]
    if len(gpu_modules) != 1:
        raise ValueError(
            f"expected one gpu.module at the lower-tensors stage, found {len(gpu_modules)}"
        )
    gpu_module = gpu_modules[0].operation
    module_name = ir.StringAttr(gpu_module.attributes["sym_name"]).value
    functions: dict[str, Function] = {}
    globals_: dict[str, Global] = {}
    texts = _Texts()
    for op in gpu_module.regions[0].blocks[0].operations:
        op = op.operation
        if op.name in ("gpu.func", "func.func"):
            function = _function(op, texts)
            functions[function.name] = function
        elif op.name == "memref.global":
            g = _global(op)
            globals_[g.name] = g
        else:
            raise ValueError(f"unexpected op '{op.name}' at the top of gpu.module {module_name}")
    return Program(module_name, functions, globals_)


class _Texts:
    """The printed form of each distinct type and the JSON value of each distinct scalar
    attribute of one module, made once: MLIR uniques both in its context, so the
    objects hash and compare by identity. A kernel of the interpreter backend holds
    thousands of ops (sax's lattice: 284,000 in 68 kernels), and printing the type of
    every operand and every attribute again was most of the capture."""

    def __init__(self) -> None:
        self.types: dict[Any, str] = {}
        self.attributes: dict[Any, Any] = {}

    def type_text(self, mlir_type) -> str:
        text = self.types.get(mlir_type)
        if text is None:
            text = self.types[mlir_type] = str(mlir_type)
        return text

    def attribute(self, attr) -> Any:
        known = self.attributes.get(attr, _UNKNOWN)
        if known is _UNKNOWN:
            known = attribute_value(attr)
            if isinstance(known, list | dict):
                return known  # not shared between ops: a value the caller may change
            self.attributes[attr] = known
        return known


_UNKNOWN = object()


class _Numbering:
    """Ids for values (per function), each with its type's text, and numbers for ops
    (pre-order)."""

    def __init__(self, texts: _Texts) -> None:
        self.ids: dict[Any, int] = {}
        self.types: list[str] = []
        self.texts = texts
        self.ops = itertools.count()

    def define(self, value) -> int:
        number = len(self.ids)
        self.ids[value] = number
        self.types.append(self.texts.type_text(value.type))
        return number

    def use(self, value) -> int:
        return self.ids[value]


def _function(op, texts: _Texts) -> Function:
    from mlir import ir

    attributes = op.attributes
    name = ir.StringAttr(attributes["sym_name"]).value
    kernel = op.name == "gpu.func" and "gpu.kernel" in attributes
    numbering = _Numbering(texts)
    body = _region(op.regions[0], numbering)
    function_type = ir.FunctionType(ir.TypeAttr(attributes["function_type"]).value)
    workgroup = 0
    if "workgroup_attributions" in attributes:
        workgroup = ir.IntegerAttr(attributes["workgroup_attributions"]).value
    return Function(
        name=name,
        kernel=kernel,
        body=body,
        result_types=tuple(str(t) for t in function_type.results),
        workgroup_count=workgroup,
        known_block_size=_dim3(attributes, "known_block_size"),
        known_grid_size=_dim3(attributes, "known_grid_size"),
        shape_generic=SHAPE_GENERIC_ATTR in attributes,
    )


def _dim3(attributes, name: str) -> tuple[int, int, int] | None:
    if name not in attributes:
        return None
    values = attribute_value(attributes[name])
    return (values[0], values[1], values[2])


def _region(region, numbering: _Numbering) -> Region:
    blocks = []
    for block in region.blocks:
        args = tuple(numbering.define(a) for a in block.arguments)
        types = tuple(numbering.types[a] for a in args)
        ops = tuple(_op(o.operation, numbering) for o in block.operations)
        blocks.append(Block(args, types, ops))
    return Region(tuple(blocks))


def _op(op, numbering: _Numbering) -> Op:
    number = next(numbering.ops)
    types = numbering.types
    operands = tuple(numbering.use(v) for v in op.operands)
    attribute = numbering.texts.attribute
    attributes = {name: attribute(attr) for name, attr in op.attributes.items()}
    regions = tuple(_region(r, numbering) for r in op.regions)
    results = tuple(numbering.define(r) for r in op.results)
    return Op(
        name=op.name,
        operands=operands,
        operand_types=tuple(types[v] for v in operands),
        results=results,
        result_types=tuple(types[r] for r in results),
        attributes=attributes,
        regions=regions,
        number=number,
    )


def _global(op) -> Global:
    from mlir import ir

    attributes = op.attributes
    name = ir.StringAttr(attributes["sym_name"]).value
    type_text = str(ir.TypeAttr(attributes["type"]).value)
    data = None
    if "initial_value" in attributes:
        value = attribute_value(attributes["initial_value"])
        if isinstance(value, dict) and "dense" in value:
            memref = parse_type(type_text)
            assert isinstance(memref, MemRefType)
            raw = np.frombuffer(base64.b64decode(value["dense"]), memref.dtype)
            if value["splat"]:
                raw = np.full(memref.size, raw[0], memref.dtype)
            data = raw.tobytes()
    return Global(name, type_text, data, "constant" in attributes)


def attribute_value(attr) -> Any:
    """A JSON value for an MLIR attribute (see the module docstring)."""
    from mlir import ir

    if isinstance(attr, ir.BoolAttr):
        return bool(attr.value)
    if isinstance(attr, ir.IntegerAttr):
        return attr.value
    if isinstance(attr, ir.FloatAttr):
        match = _HEX_FLOAT.match(str(attr))
        return {"bits": match[1]} if match else attr.value
    if isinstance(attr, ir.StringAttr):
        return attr.value
    if isinstance(attr, ir.FlatSymbolRefAttr):
        return attr.value
    if isinstance(attr, (ir.DenseI32ArrayAttr, ir.DenseI64ArrayAttr, ir.DenseBoolArrayAttr)):
        return [int(v) if not isinstance(v, bool) else v for v in attr]
    if isinstance(attr, ir.DenseElementsAttr):
        return _dense(attr)
    if isinstance(attr, ir.ArrayAttr):
        return [attribute_value(a) for a in attr]
    if isinstance(attr, ir.TypeAttr):
        return str(attr.value)
    if isinstance(attr, ir.UnitAttr):
        return True
    return str(attr)


def _dense(attr) -> dict:
    """A dense elements attribute as its numpy bytes (see :mod:`~.types`)."""
    from mlir import ir

    type_text = str(attr.type)
    element = parse_type(str(ir.ShapedType(attr.type).element_type))
    dtype = element.dtype
    count = 1 if attr.is_splat else int(np.prod(ir.ShapedType(attr.type).shape))
    if attr.is_splat:
        values = [_element_value(attr.get_splat_value())]
    else:
        try:
            values = np.array(attr).reshape(-1)
        except (TypeError, ValueError):
            values = [attr[i] for i in range(count)]
    array = _as_dtype(values, dtype, element)
    return {
        "dense": base64.b64encode(array.tobytes()).decode(),
        "type": type_text,
        "splat": bool(attr.is_splat),
    }


def _element_value(attr):
    from mlir import ir

    if isinstance(attr, ir.IntegerAttr):
        return attr.value
    if isinstance(attr, ir.FloatAttr):
        match = _HEX_FLOAT.match(str(attr))
        return {"bits": match[1]} if match else attr.value
    raise ValueError(f"unsupported dense element {attr}")


def _as_dtype(values, dtype: np.dtype, element) -> np.ndarray:
    """Values (ints, floats or ``{"bits"}``) -> an array of ``dtype`` (wrapping integers)."""
    width = getattr(element, "width", dtype.itemsize * 8)
    out = np.empty(len(values), dtype)
    for i, v in enumerate(values):
        if isinstance(v, dict):
            bits = int(v["bits"], 16)
            out[i : i + 1] = np.array([bits], f"u{dtype.itemsize}").view(dtype)
        elif dtype == np.bool_:
            out[i] = bool(v)
        elif dtype.kind == "i":
            mask = (1 << width) - 1
            raw = int(v) & mask
            if raw >> (width - 1):
                raw -= 1 << width
            out[i] = raw
        else:
            out[i] = v
    return out
