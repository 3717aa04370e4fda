"""``heron profile``: what a profiler would report for each kernel, measured on the interpreter.

Each fusion of a module is compiled for the Target, run on the interpreter
device with an :class:`~heron.runtime.interpreter.profile.AccessRecorder`
listening (random arguments, seed 0), and measured:

- global memory: bytes requested, 32-byte sectors per warp request against
  the ideal for the same bytes (coalescing), unique bytes and sectors touched
  (DRAM traffic with every sector fetched once), bytes per lane per request
  (the vector width achieved);
- shared memory: bank conflicts per request (the Target's banks);
- occupancy: from the kernel's registers and shared memory (``ptxas -v`` on
  the CUDA backend's PTX) and the Target's limits; a ROCm target has no
  resource usage here (no code object metadata is read), so its occupancy
  counts threads, blocks and shared memory only and says so;
- a roofline for the Target: DRAM bytes / bandwidth, warp instructions
  executed / issue rate, and the fused computation's arithmetic (the cost
  model's count: a dot's multiply-adds, every other op's lane operations) at
  the Target's peak (its tensor cores' ``mma`` rate for the multiply-adds of a
  kernel whose PTX runs ``mma`` instructions, its FP32 lanes otherwise), plus
  the launch overhead; the estimate is the largest bound plus the overhead,
  with the share of the bandwidth bound and the arithmetic intensity
  (FLOPs per DRAM byte, a multiply-add counting two).

docs/profile.md says how each number maps to Nsight Compute's metrics.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import attrs

from heron.emitters.target import resident_block_limits
from heron.runtime.interpreter.profile import AccessRecorder, MemoryModel, SampleComplete

if TYPE_CHECKING:
    from heron.hlo.ir import Computation, Module
    from heron.target import Target

__all__ = [
    "KernelProfile",
    "Occupancy",
    "Resources",
    "Roofline",
    "deviations",
    "memory_model",
    "occupancy",
    "profile_module",
    "roofline",
]


def memory_model(target: Target) -> MemoryModel:
    """The recorder's memory geometry, from the Target."""
    return MemoryModel(
        sector_bytes=target.dram_sector_bytes,
        banks=target.shared_memory_banks,
        bank_bytes=target.shared_memory_bank_bytes,
    )


@attrs.frozen
class Resources:
    """What the kernel's device code uses (``ptxas -v``), or why it is not known."""

    registers: int | None = None
    shared_memory: int | None = None
    spill_stores: int = 0
    spill_loads: int = 0
    ptx_instructions: int | None = None
    #: ``mma`` instructions in the PTX (tensor-core matrix multiply-accumulates).
    mma_instructions: int | None = None
    note: str = ""


@attrs.frozen
class Occupancy:
    """Resident blocks per core and what limits them; occupancy = resident warps / max warps."""

    blocks_per_core: int
    limiter: str
    limits: dict[str, int]
    theoretical: float
    #: With the grid's blocks spread over every core (a small grid fills fewer warps).
    grid_limited: float
    note: str = ""


@attrs.frozen
class Roofline:
    """Time bounds for the Target, in seconds, and the estimate."""

    dram_bytes: int
    memory_seconds: float
    warp_instructions: int
    issue_seconds: float
    launch_seconds: float
    #: FLOPs of the fused computation (two per multiply-add of a dot).
    flops: int = 0
    compute_seconds: float = 0.0
    #: The peak that bounds the arithmetic: ``"mma"`` (tensor cores) or ``"fp32"`` lanes.
    peak: str = "fp32"

    @property
    def estimate_seconds(self) -> float:
        return self.launch_seconds + max(
            self.memory_seconds, self.issue_seconds, self.compute_seconds
        )

    @property
    def bound(self) -> str:
        bounds = {
            "memory": self.memory_seconds,
            "issue": self.issue_seconds,
            "compute": self.compute_seconds,
        }
        return max(bounds, key=lambda name: bounds[name])  # ties: the first named

    @property
    def arithmetic_intensity(self) -> float:
        """FLOPs per DRAM byte: above the Target's ridge point a kernel is compute bound."""
        return self.flops / self.dram_bytes if self.dram_bytes else 0.0

    @property
    def bandwidth_fraction(self) -> float:
        """The share of the Target's bandwidth the estimate reaches (DRAM bytes / time)."""
        return self.memory_seconds / self.estimate_seconds if self.estimate_seconds else 0.0


@attrs.frozen
class KernelProfile:
    fusion: str
    kernel: str
    emitter: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    recorder: AccessRecorder = attrs.field(repr=False)
    resources: Resources
    occupancy: Occupancy
    roofline: Roofline

    def as_dict(self) -> dict[str, Any]:
        rec = self.recorder
        accesses: dict[str, Any] = {}
        for (space, kind), stats in sorted(rec.totals.items()):
            accesses.setdefault(space, {})[kind] = stats.as_dict(space)
        return {
            "fusion": self.fusion,
            "kernel": self.kernel,
            "emitter": self.emitter,
            "grid": list(self.grid),
            "block": list(self.block),
            "accesses": accesses,
            "per_op": [
                {"op": op, "space": space, "kind": kind, **stats.as_dict(space)}
                for (op, space, kind), stats in rec.by_op.items()
            ],
            "buffers": rec.buffers(),
            "warps": rec.warps_launched,
            "blocks_run": rec.blocks_run,
            "blocks": math.prod(self.grid),
            "warp_instructions": rec.warp_operations,
            "resources": attrs.asdict(self.resources),
            "occupancy": attrs.asdict(self.occupancy),
            "roofline": {
                **attrs.asdict(self.roofline),
                "estimate_seconds": self.roofline.estimate_seconds,
                "bound": self.roofline.bound,
                "bandwidth_fraction": round(self.roofline.bandwidth_fraction, 4),
                "arithmetic_intensity": round(self.roofline.arithmetic_intensity, 4),
            },
        }


def deviations(recorder: AccessRecorder) -> list[str]:
    """Where a kernel misses the ideal: global requests over the ideal sectors, bank conflicts.

    One phrase per kind of access (``global loads 8.00 sectors/request (ideal
    4.50)``, ``shared stores 1.00 conflicts/request``); none for a kernel at
    the ideal everywhere. The corpus acceptance (tests/test_profile_corpus.py)
    and docs/profile.md's exceptions quote these phrases.
    """
    found = []
    for kind in ("load", "store", "atomic"):
        stats = recorder.stats("global", kind)
        if stats.sectors != stats.ideal_sectors:
            found.append(
                f"global {kind}s {stats.sectors_per_request:.2f} sectors/request"
                f" (ideal {stats.ideal_sectors_per_request:.2f})"
            )
    for kind in ("load", "store", "atomic"):
        stats = recorder.stats("workgroup", kind)
        if stats.bank_conflicts:
            found.append(
                f"shared {kind}s {stats.bank_conflicts / stats.requests:.2f} conflicts/request"
            )
    return found


def occupancy(target: Target, threads: int, blocks: int, resources: Resources) -> Occupancy:
    """Resident blocks per core for ``threads`` a block, as the CUDA Occupancy Calculator does
    (the limits: :func:`heron.emitters.target.resident_block_limits`, the rule the GEMM
    emitter plans its registers by). The per-scheduler split of registers is not
    modelled.
    """
    warp = target.warp_size
    warps = -(-threads // warp)
    limits = resident_block_limits(target, threads, resources.registers, resources.shared_memory)
    notes = []
    if resources.registers is None:
        notes.append("registers unknown")
    if resources.shared_memory is None:
        notes.append("shared memory unknown")
    limiter = min(limits, key=lambda name: limits[name])
    resident = limits[limiter]
    max_warps = target.threads_per_core_limit // warp
    theoretical = resident * warps / max_warps
    per_core = min(resident, -(-blocks // target.core_count))
    return Occupancy(
        blocks_per_core=resident,
        limiter=limiter,
        limits=limits,
        theoretical=theoretical,
        grid_limited=per_core * warps / max_warps,
        note="; ".join(notes),
    )


def roofline(
    target: Target,
    dram_bytes: int,
    warp_instructions: int,
    body: Computation | None = None,
    *,
    tensor_cores: bool = False,
) -> Roofline:
    """Bounds: DRAM bytes at the Target's bandwidth; warp instructions at its issue rate;
    the arithmetic of ``body`` (the fused computation) at the Target's peak.

    ``tensor_cores``: the kernel runs ``mma`` instructions, so its dots' multiply-adds
    go at ``mma_multiply_adds_per_core_per_cycle`` (where the Target has one) and the
    rest of its arithmetic at the FP32 lanes (``fpus_per_core``).
    """
    from heron.compiler.fusion.cost_model import (
        dot_multiply_adds,
        lane_operations,
        throughput_costs,
    )

    clock = target.core_count * target.clock_rate_ghz * 1e9
    issue_rate = target.warp_instructions_per_cycle * clock
    multiply_adds = operations = 0.0
    if body is not None:
        operations = lane_operations(body, throughput_costs(target))
        multiply_adds = sum(dot_multiply_adds(i) for i in body.instructions if i.opcode == "dot")
    lanes = target.fpus_per_core * clock
    mma_rate = target.mma_multiply_adds_per_core_per_cycle * clock
    if tensor_cores and mma_rate and multiply_adds:
        compute, peak = multiply_adds / mma_rate + (operations - multiply_adds) / lanes, "mma"
    else:
        compute, peak = operations / lanes, "fp32"
    return Roofline(
        dram_bytes=dram_bytes,
        memory_seconds=dram_bytes / target.memory_bandwidth,
        warp_instructions=warp_instructions,
        issue_seconds=warp_instructions / issue_rate,
        launch_seconds=target.launch_overhead_seconds,
        flops=int(operations + multiply_adds),  # a multiply-add is two FLOPs
        compute_seconds=compute,
        peak=peak,
    )


def _cuda_resources(fusion, target: Target) -> Resources:
    """Registers, shared memory and PTX instructions of the CUDA backend's kernel."""
    from heron.compiler.driver import compile_fusion
    from heron.hlo.errors import HloError
    from heron.runtime.cuda.compiler_tools import ToolNotFoundError, find_ptxas
    from heron.runtime.cuda.ptx_statistics import (
        PtxasInfoError,
        kernel_statistics,
        ptxas_resource_usage,
    )

    try:
        compiled = compile_fusion(fusion, target, "cuda", stop_after="ptx")
    except (HloError, ImportError) as exc:
        return Resources(note=f"no PTX: {str(exc).splitlines()[0]}")
    ptx = next((a.data.decode() for a in compiled.artefacts if a.extension == "ptx"), "")
    if not ptx:
        return Resources(note="the CUDA backend made no PTX")
    stats = kernel_statistics(ptx).get(compiled.kernel_name)
    instructions = stats.instructions if stats is not None else None
    try:
        usage = ptxas_resource_usage(ptx, find_ptxas(), target.arch).get(compiled.kernel_name)
    except (ToolNotFoundError, PtxasInfoError, OSError) as exc:
        return Resources(ptx_instructions=instructions, note=f"no ptxas -v: {exc}")
    if usage is None:
        return Resources(ptx_instructions=instructions, note="ptxas -v named no such kernel")
    return Resources(
        registers=usage.registers,
        shared_memory=usage.shared_memory,
        spill_stores=usage.spill_stores,
        spill_loads=usage.spill_loads,
        ptx_instructions=instructions,
        mma_instructions=stats.opcodes["mma"] if stats is not None else None,
    )


def profile_module(
    module: Module,
    target: Target,
    *,
    fusion: str | None = None,
    resources: bool = True,
    seed: int = 0,
    max_blocks: int | None = None,
) -> list[KernelProfile]:
    """Profile every kernel of ``module`` (or the fusion named ``fusion``) for ``target``.

    The whole module runs as ``heron run`` runs it, an executable on the
    interpreter (:func:`heron.compiler.program_run.load_program`; a kernel's
    inputs are what the kernels before it computed; a kernel in a loop is
    profiled at each launch); ``resources=False`` skips the CUDA compile and
    ``ptxas -v`` (occupancy then counts threads and blocks only). With
    ``max_blocks``, each fusion instead runs alone on random inputs of its own, and only its
    first ``max_blocks`` blocks (a sample: per-request ratios are the
    sample's, and the roofline scales its bytes and instructions by the
    grid's blocks over the sample's).
    """
    if max_blocks is not None:
        return _sampled(module, target, fusion, resources, seed, max_blocks)
    from heron.compiler.program_run import load_program
    from heron.hlo.errors import UnsupportedError
    from heron.hlo.evaluator import random_arguments
    from heron.runtime.core.thunks import KernelThunk
    from heron.runtime.interpreter.device import InterpreterDevice

    # The executable heron run runs, each kernel launched from the host (no command
    # buffers), so that each launch gets a recorder of its own.
    device = InterpreterDevice(warp_size=target.warp_size)
    model = memory_model(target)
    profiles: list[KernelProfile] = []
    with load_program(
        module, device, "interpreter", target=target, command_buffers=False
    ) as loaded:
        program = loaded.compiled.program
        kernels = {emitted.key: emitted for emitted in program.kernels}
        fusions: dict[str, list[str]] = {}
        for name, key in program.kernel_of.items():
            fusions.setdefault(key, []).append(name)

        def on_thunk(thunk, record) -> None:
            if not isinstance(thunk, KernelThunk):
                return
            recorder, device.observer = device.observer, AccessRecorder(model)
            emitted = kernels[thunk.image_key]
            if fusion is not None and fusion not in fusions[thunk.image_key]:
                return
            kernel = emitted.compiled["interpreter"]
            profiles.append(_profile(emitted.fusion, kernel, recorder, target, resources))

        device.observer = AccessRecorder(model)
        loaded.run(random_arguments(module, seed=seed), on_thunk=on_thunk)
    if fusion is not None and not profiles:
        names = ", ".join(sorted(program.kernel_of)) or "none"
        raise UnsupportedError(f"no kernel of fusion '{fusion}' ran (kernels: {names})")
    return profiles


#: Inputs of at most this many elements get moderate random values in a sampled
#: profile; larger ones keep the device's poison bytes (filling them would cost more
#: than the sample: addresses that depend on data are then the poison's, clamped).
RANDOM_INPUT_ELEMENTS = 1 << 22


def _sampled(module, target, fusion, resources, seed, max_blocks) -> list[KernelProfile]:
    """Each fusion alone, on moderate random inputs, for its first ``max_blocks`` blocks."""
    import numpy as np

    from heron.compiler.driver import compile_fusion
    from heron.compiler.fusions import selected_fusions
    from heron.harness.inputs import moderate_array
    from heron.hlo.memory_layout import memory_bytes, to_memory
    from heron.runtime.interpreter.device import InterpreterDevice

    rng = np.random.default_rng(seed)
    profiles = []
    for instruction in selected_fusions(module, fusion):
        kernel = compile_fusion(instruction, target, "interpreter")
        device = InterpreterDevice(
            warp_size=target.warp_size, max_lanes=max_blocks * math.prod(kernel.block)
        )
        buffers = []
        for k, shape in enumerate(kernel.input_shapes):
            buffer = device.allocate(memory_bytes(shape), f"input {k}")
            if shape.num_elements <= RANDOM_INPUT_ELEMENTS:
                device.copy_to_device(buffer, to_memory(moderate_array(shape, rng), shape))
            buffers.append(buffer)
        for k, shape in enumerate(kernel.output_shapes):
            buffers.append(device.allocate(memory_bytes(shape), f"output {k}"))
        recorder = AccessRecorder(memory_model(target), max_blocks=max_blocks)
        device.observer = recorder
        try:
            device.launch(device.load_kernel(kernel.image), kernel.grid, kernel.block, buffers)
        except SampleComplete:
            pass
        profiles.append(_profile(instruction, kernel, recorder, target, resources))
    return profiles


def _profile(instruction, kernel, recorder: AccessRecorder, target: Target, resources: bool):
    if not resources:
        usage = Resources(note="not measured")
    elif target.backend == "cuda":
        usage = _cuda_resources(instruction, target)
    else:
        usage = Resources(note="no ROCm code object metadata is read: registers unknown")
    threads = math.prod(kernel.block)
    blocks = math.prod(kernel.grid)
    dram = sum(b["unique_sectors"] for b in recorder.buffers()) * target.dram_sector_bytes
    instructions = recorder.warp_operations
    if recorder.blocks_run and recorder.blocks_run < blocks:  # a sample: scale to the grid
        dram = dram * blocks // recorder.blocks_run
        instructions = instructions * blocks // recorder.blocks_run
    return KernelProfile(
        fusion=kernel.fusion_name,
        kernel=kernel.kernel_name,
        emitter=kernel.emitter,
        grid=tuple(kernel.grid),
        block=tuple(kernel.block),
        recorder=recorder,
        resources=usage,
        occupancy=occupancy(target, threads, blocks, usage),
        roofline=roofline(
            target,
            dram,
            instructions,
            instruction.called("calls"),
            tensor_cores=bool(usage.mma_instructions),
        ),
    )
