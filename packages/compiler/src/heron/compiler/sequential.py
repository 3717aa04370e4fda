"""Run a module's entry computation on a device, one instruction after the other.

The simplest executor that gives a whole module's results from device kernels:
no streams, no buffer reuse, no overlap. Each fusion instruction is compiled
for the Target by the backend (:func:`heron.compiler.compile_fusion`) and
launched (:func:`~heron.compiler.device_kernels.run_on_device`) with its
operands' values; parameters, constants, tuples, get-tuple-element and bitcasts
are evaluated on the host, where they cost nothing. A module first goes
through the GPU pipeline for the Target (a copy of it:
:func:`heron.compiler.fusion.program_pipeline`: the target-independent
simplification, which inlines JAX's helper calls and removes dead and repeated
work, then the fusion passes; a module that is already fused keeps its
fusions); what the fusion passes leave outside a fusion
besides host instructions is an op no emitter takes (dot, sort, ...), refused
here with the instruction named; a custom call runs on the host, by the
plugin that provides its target (:mod:`heron.hlo.custom_calls`).

Values between instructions are logical numpy arrays (or tuples of them), the
form the reference evaluator uses, so the results compare directly with it.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np

from heron.hlo.custom_calls.registry import resolve
from heron.hlo.errors import UnsupportedError
from heron.hlo.ir import Instruction, Module
from heron.hlo.passes import run_pipeline
from heron.hlo.passes.outline import HOST_OPCODES, REFUSED_OPCODES, describe, refusal
from heron.hlo.shapes import ArrayShape, Shape

if TYPE_CHECKING:
    from heron.compiler.driver import CompiledKernel
    from heron.compiler.target import Target

__all__ = ["FusionRunError", "KernelRecord", "SequentialRun", "run_module"]

Value = Any  # np.ndarray or a (nested) tuple of them


class FusionRunError(RuntimeError):
    """A kernel failed on the device (a sanitizer finding, an op the device cannot run).

    Not an error in the user's HLO: the message names the fusion, and the
    device's own error is the ``__cause__``.
    """


@attrs.frozen
class KernelRecord:
    """What the report says about one fusion: who emitted it, its launch, and its times."""

    fusion_name: str
    emitter: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    compile_seconds: float
    run_seconds: float


@attrs.frozen
class SequentialRun:
    """The flattened results of the entry's ROOT, and one record per kernel launched."""

    outputs: tuple[np.ndarray, ...]
    kernels: tuple[KernelRecord, ...]
    #: The module that ran (after the GPU pipeline: simplification and fusion).
    module: Module
    seconds: float


def run_module(
    module: Module,
    arguments: Sequence[np.ndarray],
    device: Any,
    backend: str,
    *,
    target: Target | None = None,
    compiler: Callable[[Instruction, Target, str], CompiledKernel] | None = None,
    on_kernel: Callable[[KernelRecord], None] | None = None,
) -> SequentialRun:
    """Evaluate ``module``'s entry on ``device`` (a :class:`heron.runtime.core.device.Device`).

    ``backend`` names the backend whose stages compile the kernels
    (``interpreter``, ``cuda``, ``rocm``); ``target`` the device they are
    compiled for (default: :func:`~heron.compiler.device_kernels.target_for_device`);
    ``compiler(fusion, target, backend)`` replaces :func:`compile_fusion`
    (tests, caching); ``on_kernel`` hears of each kernel as soon as it has run
    (progress output).
    """
    from heron.compiler.device_kernels import run_on_device, target_for_device
    from heron.compiler.driver import compile_fusion
    from heron.compiler.fusion import program_pipeline
    from heron.runtime.core.device import DeviceError

    compiler = compiler or compile_fusion
    target = target_for_device(device, backend, target)
    start = time.perf_counter()
    optimized = copy.deepcopy(module)  # the caller's module stays as it was
    run_pipeline(optimized, program_pipeline(optimized, target))
    entry = optimized.entry
    parameters = entry.parameters
    if len(arguments) != len(parameters):
        raise UnsupportedError(
            f"entry computation '{entry.name}' takes {len(parameters)} arguments,"
            f" given {len(arguments)}"
        )
    for inst in entry.instructions:  # an unknown custom-call target, before any kernel runs
        if inst.opcode == "custom-call":
            resolve(inst)
    values: dict[int, Value] = {}
    records: list[KernelRecord] = []
    for inst in entry.post_order():
        operands = [values[id(operand)] for operand in inst.operands]
        if inst.opcode == "fusion":
            kernel = compiler(inst, target, backend)
            inputs = [_array_operand(inst, k, value) for k, value in enumerate(operands)]
            try:
                run = run_on_device(device, kernel, inputs)
            except DeviceError as exc:
                raise FusionRunError(
                    f"fusion '{inst.name}' failed on the {backend} device: {exc}"
                ) from exc
            record = KernelRecord(
                fusion_name=kernel.fusion_name,
                emitter=kernel.emitter,
                grid=tuple(kernel.grid),
                block=tuple(kernel.block),
                compile_seconds=kernel.seconds,
                run_seconds=run.seconds,
            )
            records.append(record)
            if on_kernel is not None:
                on_kernel(record)
            values[id(inst)] = _unflatten(inst.shape, iter(run.outputs))
        elif inst.opcode in HOST_OPCODES:
            values[id(inst)] = _host(inst, operands, arguments)
        elif inst.opcode == "custom-call":
            values[id(inst)] = _custom_call(inst, operands)
        elif inst.opcode in REFUSED_OPCODES:
            raise refusal(inst)
        else:
            raise UnsupportedError(
                f"cannot run instruction {describe(inst)}: no heron emitter takes it as a fusion",
                inst.location,
            )
    root = values[id(entry.root_instruction)]
    return SequentialRun(
        outputs=tuple(_flatten(root)),
        kernels=tuple(records),
        module=optimized,
        seconds=time.perf_counter() - start,
    )


def _host(inst: Instruction, operands: list[Value], arguments: Sequence[np.ndarray]) -> Value:
    """The value of a parameter, constant, tuple, get-tuple-element or bitcast."""
    if inst.opcode == "parameter":
        return np.asarray(arguments[inst.parameter_number])
    if inst.opcode == "constant":
        return inst.literal
    if inst.opcode == "tuple":
        return tuple(operands)
    if inst.opcode == "get-tuple-element":
        value, index = operands[0], inst.attr("index")
        if not isinstance(value, tuple) or not isinstance(index, int):
            raise UnsupportedError(f"{describe(inst)}: index={index} selects no tuple element")
        return value[index]
    return _bitcast(inst, operands[0])


def _custom_call(inst: Instruction, operands: list[Value]) -> Value:
    """A custom call on the host, by its ``heron.custom_calls`` plugin (values are host
    arrays here already); an unknown target is refused naming it and where it is."""
    call, registry = resolve(inst)
    leaves = [leaf for value in operands for leaf in _flatten(value)]
    return call.nest(registry.invoke(call, leaves))


def _bitcast(inst: Instruction, value: Value) -> np.ndarray:
    """Reinterpret the buffer: logical -> memory order of the operand -> the result's shape."""
    from heron.hlo.memory_layout import from_memory, to_memory

    source = inst.operands[0].shape
    if not isinstance(source, ArrayShape) or not isinstance(inst.shape, ArrayShape):
        raise UnsupportedError(f"{describe(inst)}: bitcast of a tuple", inst.location)
    if source.element_type is not inst.shape.element_type:
        raise UnsupportedError(
            f"{describe(inst)}: bitcast changes the element type ({source.element_type.value}"
            f" -> {inst.shape.element_type.value}); that is bitcast-convert",
            inst.location,
        )
    return from_memory(to_memory(value, source), inst.shape)


def _array_operand(fusion: Instruction, index: int, value: Value) -> np.ndarray:
    if isinstance(value, tuple):
        raise UnsupportedError(
            f"fusion {describe(fusion)}: operand {index} is a tuple; kernels take arrays",
            fusion.location,
        )
    return value


def _unflatten(shape: Shape, leaves: Iterator[np.ndarray]) -> Value:
    """The fusion's value from its kernel's output arrays (tuple leaves in order)."""
    if isinstance(shape, ArrayShape):
        return next(leaves)
    return tuple(_unflatten(element, leaves) for element in shape.elements)


def _flatten(value: Value) -> Iterator[np.ndarray]:
    if isinstance(value, tuple):
        for element in value:
            yield from _flatten(element)
    else:
        yield np.asarray(value)
