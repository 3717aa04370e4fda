"""Collectives of a one-device program: each device's group holds that device alone.

jax code written for several devices runs on one as well: ``shard_map`` over a
mesh of one device (``psum``, ``pmean``, ``all_gather``, ``psum_scatter``,
``ppermute``, ``axis_index``) lowers to collectives whose replica groups each hold
one device. XLA simplifies them away (``AllReduceSimplifier``: an all-reduce over
groups of one is its operand; ``partition-id`` of a one-partition program is 0),
and so does heron, which runs a program on one device, first in its pipeline:

- ``all-reduce``, ``all-gather``, ``reduce-scatter``, ``all-to-all`` over groups of
  one: the operand (a reduction, gather or scatter of one contribution; the
  result's shape is the operand's, checked), a tuple of them for a variadic one;
- ``collective-permute``: the operand where the one device sends to itself
  (``source_target_pairs={{0,0}}``), else zeros (a device no pair targets
  receives nothing, which XLA defines as zeros);
- ``partition-id``, ``replica-id``: the constant 0.

A module that declares more than one replica or partition (``replica_count``,
``num_partitions``), or a collective whose groups hold more than one device, is
left as it is and refused later naming the op: heron does not run programs across
devices.
"""

from __future__ import annotations

import re

import numpy as np

from heron.hlo.attributes import RawAttribute
from heron.hlo.devices import devices_declared
from heron.hlo.ir import Instruction, Module
from heron.hlo.passes.registry import hlo_pass
from heron.hlo.passes.rewrite import Inserter, rewrite_each
from heron.hlo.shapes import ArrayShape, TupleShape

__all__ = [
    "devices_declared",
    "groups_of_one",
    "one_device_value",
    "simplify_one_device_collectives",
]

_PASSING = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all")
_IDS = ("partition-id", "replica-id")


def groups_of_one(inst: Instruction, devices: int | None) -> bool:
    """Whether every replica group of ``inst`` holds at most one device: ``{{0}}``,
    ``{{0},{1}}``, the iota form ``[G,1]<=[N]``, or ``{}`` (all devices) where the
    program has one (``devices``: how many it declares; None: not known, as in the
    reference evaluator, which sees a computation without its module's header)."""
    groups = inst.attributes.get("replica_groups")
    text = (
        "{}" if groups is None else groups.text if isinstance(groups, RawAttribute) else str(groups)
    )
    text = text.replace(" ", "")
    if text == "{}":
        return devices == 1
    iota = re.fullmatch(r"\[(\d+),(\d+)\]<=\[[\d,]+\](T\([\d,]+\))?", text)
    if iota is not None:
        return int(iota.group(2)) <= 1
    inner = re.fullmatch(r"\{(.*)\}", text)
    if inner is None:
        return False
    return all("," not in group for group in re.findall(r"\{([^{}]*)\}", inner.group(1)))


def _sends_to_itself(inst: Instruction) -> bool | None:
    """Whether a collective-permute's pairs send device 0 to itself (None: unreadable, or
    a pair naming another device)."""
    pairs = inst.attributes.get("source_target_pairs")
    text = pairs.text if isinstance(pairs, RawAttribute) else str(pairs)
    found = re.findall(r"\{\s*(\d+)\s*,\s*(\d+)\s*\}", text)
    if any(source != "0" or target != "0" for source, target in found):
        return None
    return bool(found)


def one_device_value(
    inst: Instruction, operands: list, devices: int | None = None
) -> object | None:
    """The value ``inst`` (a collective) has on a one-device program, from its operands'
    values (numpy arrays): what :func:`simplify_one_device_collectives` replaces it by,
    for the reference evaluator; None where the module docstring's rule leaves it."""
    if inst.opcode == "collective-permute":
        itself = _sends_to_itself(inst)
        if itself is None or len(operands) != 1 or not isinstance(inst.shape, ArrayShape):
            return None
        return operands[0] if itself else np.zeros(inst.shape.dims, inst.shape.numpy_dtype)
    if inst.opcode not in _PASSING or not groups_of_one(inst, devices) or not _same_shapes(inst):
        return None
    return tuple(operands) if isinstance(inst.shape, TupleShape) else operands[0]


def _same_shapes(inst: Instruction) -> bool:
    """Each result has its operand's shape (one contribution gathered or scattered)."""
    shapes = inst.shape.elements if isinstance(inst.shape, TupleShape) else (inst.shape,)
    return len(shapes) == len(inst.operands) and all(
        isinstance(shape, ArrayShape) and shape.without_layout() == operand.shape.without_layout()
        for shape, operand in zip(shapes, inst.operands, strict=True)
    )


def _zeros(inserter: Inserter, like: Instruction, shape: ArrayShape) -> Instruction:
    """A constant of zeros of ``shape`` (a scalar, or one broadcast)."""
    scalar = ArrayShape(shape.element_type, ())
    zero = np.zeros((), shape.element_type.numpy_dtype)
    constant = inserter.add("constant", scalar, [], like=like, suffix="zero", literal=zero)
    if not shape.dims:
        return constant
    return inserter.add("broadcast", shape, [constant], {"dimensions": ()}, like=like)


def _replacement(inserter: Inserter, inst: Instruction, devices: int) -> Instruction | None:
    """What ``inst`` computes on the one device, or None to leave it (refused later)."""
    if inst.opcode in _IDS:
        return _zeros(inserter, inst, inst.shape)
    if inst.opcode == "collective-permute":
        if len(inst.operands) != 1 or not isinstance(inst.shape, ArrayShape):
            return None
        itself = _sends_to_itself(inst)
        if itself is None:
            return None
        return inst.operands[0] if itself else _zeros(inserter, inst, inst.shape)
    if not groups_of_one(inst, devices) or not _same_shapes(inst):
        return None
    operands = list(inst.operands)
    if isinstance(inst.shape, TupleShape):
        return inserter.add("tuple", inst.shape, operands, {}, like=inst)
    return operands[0]


@hlo_pass(
    "one-device-collectives",
    "collectives over groups of one device become their operand, partition-id 0 (XLA's)",
)
def simplify_one_device_collectives(module: Module) -> bool:
    """Replace every collective of a one-device ``module`` (see the module docstring)."""
    devices = devices_declared(module)
    if devices != 1:
        return False
    return rewrite_each(
        module,
        (*_PASSING, *_IDS, "collective-permute"),
        lambda inserter, inst: _replacement(inserter, inst, devices),
    )
