"""The interpreter's program: a kernel module as plain data, with no MLIR in it.

The interpreter device runs the kernels heron emits at the last
backend-neutral stage of the pipeline (``lower-tensors``, docs/pipeline.md).
A runtime package must run without MLIR installed (ARCHITECTURE.md), so the
compiler side (:mod:`heron.runtime.interpreter.capture`, which does
import MLIR) turns the module into this form once, and the device loads it
from JSON. The form mirrors MLIR's generic form:

- an :class:`Op` has a name (``arith.addi``), operand and result value ids,
  the operands' and results' types as MLIR type text (parsed by
  :mod:`heron.runtime.interpreter.types`), attributes as JSON values
  (see :func:`heron.runtime.interpreter.capture.attribute_value`), and
  regions;
- a :class:`Region` holds :class:`Block` s; a block has argument ids and types;
- a :class:`Function` is a ``gpu.func`` kernel or a ``func.func`` it calls;
  a kernel's workgroup attributions (shared memory) are extra block
  arguments counted by ``workgroup_count``;
- a :class:`Global` is a ``memref.global`` with its initial bytes.

Value ids are unique within a function. Every op carries ``number``, its
position in a pre-order walk of its function, so that an error can name it.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import attrs

__all__ = ["FORMAT", "Block", "Function", "Global", "Op", "Program", "Region"]

#: ``KernelImage.format`` of a serialised program.
FORMAT = "heron-interpreter"
_VERSION = 1


@attrs.frozen
class Block:
    arguments: tuple[int, ...]
    argument_types: tuple[str, ...]
    ops: tuple[Op, ...]


@attrs.frozen
class Region:
    blocks: tuple[Block, ...]

    @property
    def entry(self) -> Block:
        return self.blocks[0]


@attrs.frozen
class Op:
    name: str
    operands: tuple[int, ...]
    operand_types: tuple[str, ...]
    results: tuple[int, ...]
    result_types: tuple[str, ...]
    attributes: dict[str, Any] = attrs.field(factory=dict)
    regions: tuple[Region, ...] = ()
    number: int = 0

    def describe(self) -> str:
        """``op #12 'memref.load' (memref<64xf32>, index) -> f32``: for error messages."""
        ins = ", ".join(self.operand_types)
        outs = ", ".join(self.result_types)
        return f"op #{self.number} '{self.name}' ({ins})" + (f" -> {outs}" if outs else "")


@attrs.frozen
class Function:
    name: str
    kernel: bool
    body: Region
    result_types: tuple[str, ...] = ()
    workgroup_count: int = 0
    #: ``known_block_size`` / ``known_grid_size`` of a kernel, when it declares them.
    known_block_size: tuple[int, int, int] | None = None
    known_grid_size: tuple[int, int, int] | None = None
    #: A kernel built once for any size (``heron.shape_generic``): its 1-D memref argument
    #: types are upper bounds, and the device binds each argument at its buffer's size.
    shape_generic: bool = False

    @property
    def argument_types(self) -> tuple[str, ...]:
        """The types of the call arguments (without the workgroup attributions)."""
        types = self.body.entry.argument_types
        return types[: len(types) - self.workgroup_count]


@attrs.frozen
class Global:
    name: str
    type: str
    #: The initial value in memory representation (``None``: uninitialised).
    data: bytes | None
    constant: bool = False


@attrs.frozen
class Program:
    """Every function and global of one ``gpu.module``."""

    module_name: str
    functions: dict[str, Function]
    globals: dict[str, Global] = attrs.field(factory=dict)
    #: What the engine derives from the program once and reuses on every launch (the
    #: execution plan of each block, :func:`heron.runtime.interpreter.engine.block_plan`):
    #: kept with the program so that it lives and dies with it. Not part of its value.
    derived: dict[str, Any] = attrs.field(factory=dict, init=False, eq=False, repr=False)

    @property
    def kernels(self) -> list[str]:
        return [name for name, f in self.functions.items() if f.kernel]

    def walk(self):
        """Every op of every function: ``(function, op)`` in program order."""
        for function in self.functions.values():
            stack = [function.body]
            while stack:
                region = stack.pop()
                for block in region.blocks:
                    for op in block.ops:
                        yield function, op
                        stack.extend(reversed(op.regions))

    # -- JSON -------------------------------------------------------------------------
    def to_json(self) -> bytes:
        return json.dumps(
            {
                "format": FORMAT,
                "version": _VERSION,
                "module": self.module_name,
                "functions": [_function_json(f) for f in self.functions.values()],
                "globals": [_global_json(g) for g in self.globals.values()],
            },
            separators=(",", ":"),
        ).encode()

    @staticmethod
    def from_json(data: bytes | str) -> Program:
        raw = json.loads(data)
        if raw.get("format") != FORMAT or raw.get("version") != _VERSION:
            raise ValueError(
                f"not a heron interpreter program of version {_VERSION}"
                f" (format {raw.get('format')!r}, version {raw.get('version')!r})"
            )
        functions = [_function_from(f) for f in raw["functions"]]
        globals_ = [_global_from(g) for g in raw["globals"]]
        return Program(raw["module"], {f.name: f for f in functions}, {g.name: g for g in globals_})


def _region_json(region: Region) -> list:
    return [
        {
            "args": list(b.arguments),
            "types": list(b.argument_types),
            "ops": [_op_json(op) for op in b.ops],
        }
        for b in region.blocks
    ]


def _op_json(op: Op) -> dict:
    out: dict[str, Any] = {
        "n": op.name,
        "i": list(op.operands),
        "it": list(op.operand_types),
        "o": list(op.results),
        "ot": list(op.result_types),
        "#": op.number,
    }
    if op.attributes:
        out["a"] = op.attributes
    if op.regions:
        out["r"] = [_region_json(r) for r in op.regions]
    return out


def _region_from(raw: list) -> Region:
    return Region(
        tuple(
            Block(tuple(b["args"]), tuple(b["types"]), tuple(_op_from(o) for o in b["ops"]))
            for b in raw
        )
    )


def _op_from(raw: dict) -> Op:
    return Op(
        raw["n"],
        tuple(raw["i"]),
        tuple(raw["it"]),
        tuple(raw["o"]),
        tuple(raw["ot"]),
        raw.get("a", {}),
        tuple(_region_from(r) for r in raw.get("r", ())),
        raw["#"],
    )


def _function_json(f: Function) -> dict:
    return {
        "name": f.name,
        "kernel": f.kernel,
        "body": _region_json(f.body),
        "results": list(f.result_types),
        "workgroup": f.workgroup_count,
        "block": list(f.known_block_size) if f.known_block_size else None,
        "grid": list(f.known_grid_size) if f.known_grid_size else None,
        **({"generic": True} if f.shape_generic else {}),  # absent: older programs read alike
    }


def _function_from(raw: dict) -> Function:
    return Function(
        raw["name"],
        raw["kernel"],
        _region_from(raw["body"]),
        tuple(raw["results"]),
        raw["workgroup"],
        tuple(raw["block"]) if raw["block"] else None,
        tuple(raw["grid"]) if raw["grid"] else None,
        raw.get("generic", False),
    )


def _global_json(g: Global) -> dict:
    data = None if g.data is None else base64.b64encode(g.data).decode()
    return {"name": g.name, "type": g.type, "data": data, "constant": g.constant}


def _global_from(raw: dict) -> Global:
    data = None if raw["data"] is None else base64.b64decode(raw["data"])
    return Global(raw["name"], raw["type"], data, raw["constant"])
