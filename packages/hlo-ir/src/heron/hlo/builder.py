"""Build HLO in code: computations and modules without writing text.

Tests and passes need small pieces of IR; writing HLO text and parsing it is
clumsy for that and hides mistakes until the verifier runs. The builder makes
each instruction through ``heron.hlo.shape_inference``, so a wrong operand is
reported at the line that adds it, and shapes never have to be spelled out::

    mb = ModuleBuilder("m")
    add = mb.computation("add")
    x = add.parameter(scalar_shape("f32"))
    y = add.parameter(scalar_shape("f32"))
    add.add(x, y)                      # the last instruction is the root
    add_fn = add.build()

    main = mb.computation("main")
    p = main.parameter(array_shape("f32", (4, 8)))
    zero = main.constant(np.float32(0))
    main.reduce([p], [zero], dimensions=(1,), to_apply=add_fn)
    module = mb.build(entry=main.build())

``op(opcode, operands, attributes, shape)`` makes any instruction; the named
methods are shorthands for the common ones. Names are generated unique
(``add.1``, ``add.2``, ...) across a module builder's computations.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from heron.hlo.attributes import (
    ComputationRef,
    PadDim,
    PaddingConfig,
    SliceRange,
    Window,
    WindowDim,
)
from heron.hlo.element_types import ElementType
from heron.hlo.errors import HloVerifyError
from heron.hlo.ir import Computation, Instruction, Module
from heron.hlo.shape_inference import describe_instruction, infer_shape
from heron.hlo.shapes import ArrayShape, Shape, TupleShape
from heron.hlo.verifier import verify_module

__all__ = ["ComputationBuilder", "ModuleBuilder", "NameUniquer"]

#: Ops whose declared shape carries information inference needs (see the table
#: in ``heron.hlo.shape_inference``); ``op`` wants ``shape=`` for these.
_NEEDS_SHAPE = frozenset(
    {
        "broadcast",
        "reshape",
        "dynamic-reshape",
        "bitcast",
        "iota",
        "rng",
        "rng-bit-generator",
        "constant",
        "parameter",
    }
)
#: Ops that take only the result element type from the declared shape: for these a
#: scalar ``shape=`` just names that type. dot and convolution default to the lhs type.
_TYPE_FROM_SHAPE = frozenset(
    {"dot", "convolution", "convert", "bitcast-convert", "stochastic-convert"}
)


def _element_type(value: ElementType | str) -> ElementType:
    return value if isinstance(value, ElementType) else ElementType.parse(value)


class NameUniquer:
    """Hands out ``base.N`` names, unique within one module (``taken``: names held where
    nothing reserves them here, :attr:`heron.hlo.ir.Module.names_elsewhere`)."""

    def __init__(self, taken: frozenset[str] = frozenset()) -> None:
        self._counters: dict[str, int] = {}
        self._used: set[str] = set()
        self._taken = taken

    def reserve(self, name: str) -> None:
        self._used.add(name)

    def unique(self, base: str) -> str:
        while True:
            n = self._counters.get(base, 0) + 1
            self._counters[base] = n
            name = f"{base}.{n}"
            if name not in self._used and name not in self._taken:
                self._used.add(name)
                return name

    def take(self, name: str) -> str:
        """``name`` itself when free, else a fresh ``name.N``."""
        if name in self._used or name in self._taken:
            return self.unique(name)
        self._used.add(name)
        return name


class ComputationBuilder:
    """Adds instructions to one computation; ``build`` picks the root and returns it."""

    def __init__(
        self,
        name: str,
        *,
        names: NameUniquer | None = None,
        on_build: Any = None,
    ) -> None:
        self._computation = Computation(name)
        self._names = names if names is not None else NameUniquer()
        self._next_parameter = 0
        self._on_build = on_build
        self._built = False

    @property
    def name(self) -> str:
        return self._computation.name

    @property
    def instructions(self) -> list[Instruction]:
        return list(self._computation.instructions)

    # -- the generic entry point ------------------------------------------------
    def op(
        self,
        opcode: str,
        operands: Sequence[Instruction] = (),
        attributes: Mapping[str, Any] | None = None,
        shape: Shape | None = None,
        *,
        name: str | None = None,
        literal: Any = None,
        parameter_number: int | None = None,
    ) -> Instruction:
        """Add one instruction; its shape is inferred, or checked when ``shape`` is given.

        For ops that take their result dimensions from the declared shape
        (broadcast, reshape, iota, ...) pass the full ``shape``; for convert,
        bitcast-convert, dot and convolution a scalar ``shape`` names just the
        result element type (dot and convolution default to the lhs type).
        """
        if self._built:
            raise RuntimeError(f"computation '{self.name}' is already built")
        for i, operand in enumerate(operands):
            if not isinstance(operand, Instruction):
                raise TypeError(f"{opcode}: operand {i} is {operand!r}, not an Instruction")
            if operand.parent is not self._computation:
                raise ValueError(
                    f"{opcode}: operand {i} ('{operand.name}') belongs to another computation"
                )
        type_only = opcode in _TYPE_FROM_SHAPE and isinstance(shape, ArrayShape) and not shape.dims
        if shape is None:
            if opcode in _NEEDS_SHAPE:
                raise ValueError(f"{opcode} needs shape= (its result shape is not derivable)")
            if opcode in _TYPE_FROM_SHAPE:
                if opcode not in ("dot", "convolution") or not operands:
                    raise ValueError(f"{opcode} needs shape= (at least its element type)")
                shape = ArrayShape(operands[0].shape.element_type, ())  # type: ignore[union-attr]
                type_only = True
        inst = Instruction(
            name=self._names.take(name) if name else self._names.unique(opcode),
            opcode=opcode,
            # Inference reads only what the table above says from this shape.
            shape=shape if shape is not None else TupleShape(()),
            operands=list(operands),
            attributes=dict(attributes or {}),
            literal=literal,
            parameter_number=parameter_number,
        )
        inst.parent = self._computation
        inferred = infer_shape(inst)
        if inferred is None:
            if shape is None:
                raise ValueError(f"{opcode}: the result shape cannot be inferred; pass shape=")
        elif shape is None or type_only:
            inst.shape = inferred
        elif opcode != "bitcast" and not inferred.same_type_and_dims(shape):
            raise HloVerifyError(
                f"{describe_instruction(inst)}: declared shape {shape.without_layout()}"
                f" but operands give {inferred.without_layout()}"
            )
        self._computation.add(inst)
        return inst

    def unary(self, opcode: str, x: Instruction, **attributes: Any) -> Instruction:
        return self.op(opcode, [x], attributes)

    def binary(self, opcode: str, x: Instruction, y: Instruction, **attributes: Any) -> Instruction:
        return self.op(opcode, [x, y], attributes)

    # -- leaves -------------------------------------------------------------------
    def parameter(self, shape: Shape, name: str | None = None) -> Instruction:
        """The next parameter (numbered in call order)."""
        number = self._next_parameter
        self._next_parameter += 1
        return self.op(
            "parameter",
            shape=shape,
            name=name or f"p{number}",
            parameter_number=number,
        )

    def constant(
        self, value: Any, element_type: ElementType | str | None = None, name: str | None = None
    ) -> Instruction:
        """A constant from a numpy array or scalar (its dtype gives the element type)."""
        if element_type is not None:
            et = _element_type(element_type)
            array = np.asarray(value).astype(et.numpy_dtype)
        else:
            array = np.asarray(value)
            et = ElementType.from_numpy(array.dtype)
        shape = ArrayShape(et, tuple(array.shape))
        return self.op("constant", shape=shape, literal=array, name=name)

    def iota(self, shape: ArrayShape, dimension: int) -> Instruction:
        return self.op("iota", attributes={"iota_dimension": dimension}, shape=shape)

    # -- elementwise ----------------------------------------------------------------
    def add(self, x: Instruction, y: Instruction) -> Instruction:
        return self.binary("add", x, y)

    def subtract(self, x: Instruction, y: Instruction) -> Instruction:
        return self.binary("subtract", x, y)

    def multiply(self, x: Instruction, y: Instruction) -> Instruction:
        return self.binary("multiply", x, y)

    def divide(self, x: Instruction, y: Instruction) -> Instruction:
        return self.binary("divide", x, y)

    def maximum(self, x: Instruction, y: Instruction) -> Instruction:
        return self.binary("maximum", x, y)

    def minimum(self, x: Instruction, y: Instruction) -> Instruction:
        return self.binary("minimum", x, y)

    def power(self, x: Instruction, y: Instruction) -> Instruction:
        return self.binary("power", x, y)

    def remainder(self, x: Instruction, y: Instruction) -> Instruction:
        return self.binary("remainder", x, y)

    def and_(self, x: Instruction, y: Instruction) -> Instruction:
        return self.binary("and", x, y)

    def or_(self, x: Instruction, y: Instruction) -> Instruction:
        return self.binary("or", x, y)

    def xor(self, x: Instruction, y: Instruction) -> Instruction:
        return self.binary("xor", x, y)

    def compare(
        self, x: Instruction, y: Instruction, direction: str, type: str | None = None
    ) -> Instruction:
        """``direction`` is EQ, NE, LT, LE, GT or GE; ``type`` e.g. TOTALORDER."""
        attributes: dict[str, Any] = {"direction": direction}
        if type is not None:
            attributes["type"] = type
        return self.op("compare", [x, y], attributes)

    def select(self, pred: Instruction, on_true: Instruction, on_false: Instruction) -> Instruction:
        return self.op("select", [pred, on_true, on_false])

    def clamp(self, low: Instruction, x: Instruction, high: Instruction) -> Instruction:
        return self.op("clamp", [low, x, high])

    def negate(self, x: Instruction) -> Instruction:
        return self.unary("negate", x)

    def abs(self, x: Instruction) -> Instruction:
        return self.unary("abs", x)

    def exp(self, x: Instruction) -> Instruction:
        return self.unary("exponential", x)

    def log(self, x: Instruction) -> Instruction:
        return self.unary("log", x)

    def sqrt(self, x: Instruction) -> Instruction:
        return self.unary("sqrt", x)

    def rsqrt(self, x: Instruction) -> Instruction:
        return self.unary("rsqrt", x)

    def tanh(self, x: Instruction) -> Instruction:
        return self.unary("tanh", x)

    def not_(self, x: Instruction) -> Instruction:
        return self.unary("not", x)

    def copy(self, x: Instruction) -> Instruction:
        return self.unary("copy", x)

    def convert(self, x: Instruction, element_type: ElementType | str) -> Instruction:
        return self.op("convert", [x], shape=ArrayShape(_element_type(element_type), ()))

    def bitcast_convert(self, x: Instruction, element_type: ElementType | str) -> Instruction:
        """Reinterpret bits; a width change adds or removes a minor dimension (as in XLA)."""
        return self.op("bitcast-convert", [x], shape=ArrayShape(_element_type(element_type), ()))

    # -- data movement --------------------------------------------------------------
    def broadcast(
        self, x: Instruction, dims: Sequence[int], dimensions: Sequence[int] = ()
    ) -> Instruction:
        """Broadcast ``x`` to result ``dims``; ``dimensions[i]`` is where operand dim i goes."""
        et = x.shape.element_type  # type: ignore[union-attr]
        return self.op(
            "broadcast",
            [x],
            {"dimensions": tuple(dimensions)},
            shape=ArrayShape(et, tuple(dims)),
        )

    def reshape(self, x: Instruction, dims: Sequence[int]) -> Instruction:
        et = x.shape.element_type  # type: ignore[union-attr]
        return self.op("reshape", [x], shape=ArrayShape(et, tuple(dims)))

    def bitcast(self, x: Instruction, shape: ArrayShape) -> Instruction:
        return self.op("bitcast", [x], shape=shape)

    def transpose(self, x: Instruction, permutation: Sequence[int]) -> Instruction:
        return self.op("transpose", [x], {"dimensions": tuple(permutation)})

    def reverse(self, x: Instruction, dimensions: Sequence[int]) -> Instruction:
        return self.op("reverse", [x], {"dimensions": tuple(dimensions)})

    def slice(
        self,
        x: Instruction,
        starts: Sequence[int],
        limits: Sequence[int],
        strides: Sequence[int] | None = None,
    ) -> Instruction:
        strides = strides if strides is not None else [1] * len(starts)
        ranges = tuple(SliceRange(a, b, s) for a, b, s in zip(starts, limits, strides))
        return self.op("slice", [x], {"slice": ranges})

    def dynamic_slice(
        self, x: Instruction, indices: Sequence[Instruction], sizes: Sequence[int]
    ) -> Instruction:
        return self.op("dynamic-slice", [x, *indices], {"dynamic_slice_sizes": tuple(sizes)})

    def dynamic_update_slice(
        self, x: Instruction, update: Instruction, indices: Sequence[Instruction]
    ) -> Instruction:
        return self.op("dynamic-update-slice", [x, update, *indices])

    def pad(
        self,
        x: Instruction,
        value: Instruction,
        config: Iterable[tuple[int, int] | tuple[int, int, int]],
    ) -> Instruction:
        """``config``: (low, high[, interior]) per dimension; low and high may be negative."""
        dims = tuple(PadDim(*c) for c in config)
        return self.op("pad", [x, value], {"padding": PaddingConfig(dims)})

    def concatenate(self, operands: Sequence[Instruction], dimension: int) -> Instruction:
        return self.op("concatenate", operands, {"dimensions": (dimension,)})

    def tuple(self, operands: Sequence[Instruction]) -> Instruction:
        return self.op("tuple", operands)

    def get_tuple_element(self, x: Instruction, index: int) -> Instruction:
        return self.op("get-tuple-element", [x], {"index": index})

    # -- reductions and calls ----------------------------------------------------------
    def reduce(
        self,
        inputs: Sequence[Instruction],
        inits: Sequence[Instruction],
        dimensions: Sequence[int],
        to_apply: Computation,
    ) -> Instruction:
        return self.op(
            "reduce",
            [*inputs, *inits],
            {"dimensions": tuple(dimensions), "to_apply": _ref(to_apply)},
        )

    def reduce_window(
        self,
        inputs: Sequence[Instruction],
        inits: Sequence[Instruction],
        window: Window | Sequence[int],
        to_apply: Computation,
    ) -> Instruction:
        """``window``: a Window, or just the window sizes (stride 1, no padding)."""
        if not isinstance(window, Window):
            window = Window(tuple(WindowDim(size) for size in window))
        return self.op(
            "reduce-window",
            [*inputs, *inits],
            {"window": window, "to_apply": _ref(to_apply)},
        )

    def dot(
        self,
        lhs: Instruction,
        rhs: Instruction,
        lhs_contracting: Sequence[int],
        rhs_contracting: Sequence[int],
        lhs_batch: Sequence[int] = (),
        rhs_batch: Sequence[int] = (),
        preferred_element_type: ElementType | str | None = None,
    ) -> Instruction:
        attributes: dict[str, Any] = {}
        if lhs_batch:
            attributes["lhs_batch_dims"] = tuple(lhs_batch)
        attributes["lhs_contracting_dims"] = tuple(lhs_contracting)
        if rhs_batch:
            attributes["rhs_batch_dims"] = tuple(rhs_batch)
        attributes["rhs_contracting_dims"] = tuple(rhs_contracting)
        shape = None
        if preferred_element_type is not None:
            shape = ArrayShape(_element_type(preferred_element_type), ())
        return self.op("dot", [lhs, rhs], attributes, shape=shape)

    def call(self, operands: Sequence[Instruction], computation: Computation) -> Instruction:
        return self.op("call", operands, {"to_apply": _ref(computation)})

    def fusion(
        self, operands: Sequence[Instruction], computation: Computation, kind: str = "kLoop"
    ) -> Instruction:
        return self.op("fusion", operands, {"kind": kind, "calls": _ref(computation)})

    def map(self, operands: Sequence[Instruction], to_apply: Computation) -> Instruction:
        rank = len(operands[0].shape.dims) if isinstance(operands[0].shape, ArrayShape) else 0
        return self.op(
            "map", operands, {"dimensions": tuple(range(rank)), "to_apply": _ref(to_apply)}
        )

    def sort(
        self,
        operands: Sequence[Instruction],
        dimension: int,
        comparator: Computation,
        is_stable: bool = False,
    ) -> Instruction:
        attributes: dict[str, Any] = {"dimensions": (dimension,)}
        if is_stable:
            attributes["is_stable"] = True
        attributes["to_apply"] = _ref(comparator)
        return self.op("sort", operands, attributes)

    def while_(self, init: Instruction, condition: Computation, body: Computation) -> Instruction:
        return self.op("while", [init], {"condition": _ref(condition), "body": _ref(body)})

    # -- finishing ----------------------------------------------------------------------
    def build(self, root: Instruction | None = None) -> Computation:
        """The computation, with ``root`` (default: the last instruction added) as root."""
        if self._built:
            return self._computation
        comp = self._computation
        if not comp.instructions:
            raise ValueError(f"computation '{self.name}' has no instructions")
        if root is None:
            root = comp.instructions[-1]
        elif root.parent is not comp:
            raise ValueError(f"root '{root.name}' is not an instruction of '{self.name}'")
        comp.root = root
        self._built = True
        if self._on_build is not None:
            self._on_build(comp)
        return comp


def _ref(computation: Computation) -> ComputationRef:
    return ComputationRef(computation.name, computation)


class ModuleBuilder:
    """Collects computations (callees first, as in HLO text) and makes a Module."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._names = NameUniquer()
        self._computation_names = NameUniquer()
        self._computations: list[Computation] = []
        self._builders: list[ComputationBuilder] = []

    def computation(self, name: str) -> ComputationBuilder:
        """A builder whose computation joins this module when it is built."""
        unique = self._computation_names.take(name)
        builder = ComputationBuilder(unique, names=self._names, on_build=self._register)
        self._builders.append(builder)
        return builder

    def add(self, computation: Computation) -> Computation:
        """Add a computation made elsewhere (its instruction names are reserved)."""
        for inst in computation.instructions:
            self._names.reserve(inst.name)
        self._computation_names.reserve(computation.name)
        self._register(computation)
        return computation

    def _register(self, computation: Computation) -> None:
        if not any(c is computation for c in self._computations):
            self._computations.append(computation)

    def build(
        self, entry: Computation | ComputationBuilder | None = None, verify: bool = True
    ) -> Module:
        """The module, verified unless ``verify=False``.

        Builders not yet built are built (root: their last instruction). ``entry``
        defaults to the computation of the builder created last; it goes last in
        the module and is the one marked ENTRY.
        """
        for builder in self._builders:
            builder.build()
        if isinstance(entry, ComputationBuilder):
            entry = entry.build()
        if entry is None:
            if self._builders:
                entry = self._builders[-1].build()
            elif self._computations:
                entry = self._computations[-1]
            else:
                raise ValueError(f"module '{self.name}' has no computations")
        self._register(entry)
        comps = [c for c in self._computations if c is not entry] + [entry]
        for comp in comps:
            comp.is_entry = comp is entry
        module = Module(self.name, comps)
        if verify:
            verify_module(module)
        return module
