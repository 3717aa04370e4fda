"""``Target``: the one frozen description of the GPU a module is compiled for.

Launch bounds, shared-memory budgets, warp width, the PTX ISA to declare and the
cost model's bandwidth all depend on the device. Scattering them as constants
("32 lanes", "48 KiB", "sm_90") makes a second device a hunt through the code;
reading them from one ``Target`` makes it a new preset file.

Presets are data, not code: one TOML file per device under ``presets/`` (package
data), each naming where its numbers come from, so a number can be checked against
its source without reading Python. The numbers follow XLA's GpuTargetConfig specs
(``xla/backends/gpu/target_config/specs``) so heron and XLA reason about the same
machine.

Bad input (an unknown preset, an arch of the wrong backend, a negative size) raises
:class:`TargetError` naming the field and the value, which the CLI prints as-is.

This package is the bottom of heron's dependency graph: it imports attrs and
the standard library only, so every layer (the HLO passes, the emitters, the
runtimes and their devices) reads the device from this one class and none
restates a fact of it.
"""

from __future__ import annotations

import functools
import importlib.resources
import math
import re
import tomllib
from collections.abc import Mapping
from typing import Any

import attrs

__all__ = ["BACKENDS", "Target", "TargetError", "default_target", "ptx_isa_version", "presets"]


class TargetError(ValueError):
    """A target that cannot be made: an unknown preset or arch, a field out of range."""

    @property
    def message(self) -> str:
        return str(self)


BACKENDS = ("cuda", "rocm")

# The preset a backend compiles for when nothing more is said: the newest chip
# heron is tested against on each side.
_DEFAULT_PRESET = {"cuda": "h100", "rocm": "mi300x"}

_ARCH_PATTERN = {
    "cuda": re.compile(r"sm_(?P<number>[1-9]\d+)(?P<suffix>[af]?)"),
    "rocm": re.compile(r"gfx(?P<major>[0-9a-f]+?)(?P<minor>[0-9a-f])(?P<stepping>[0-9a-f])"),
}
_ARCH_SPELLING = {
    "cuda": "sm_ and two or three digits, optionally a or f (e.g. sm_90a)",
    "rocm": "gfx and at least three hex digits (e.g. gfx942)",
}

# Lowest PTX ISA version (times ten) that accepts each SM newer than PTX 8.0 covers,
# from the PTX ISA release notes (LLVM's NVPTX.td carries the same table). Family
# targets ("sm_100f") arrived with PTX 8.8. sm_90 is accepted from PTX 7.8, but heron's
# sm_90 kernels add with vector reductions (``red.global.add.v4.f32``), which PTX 8.1
# brought (drivers of CUDA 12.1 and later).
_PTX_ISA_FOR_SM = {88: 90, 90: 81, 100: 86, 101: 86, 103: 88, 110: 90, 120: 87, 121: 88}
_PTX_ISA_FLOOR = 80  # heron emits PTX 8.0 constructs, so never declare less.
_ROCM_CODE_OBJECT_VERSION = 5


def _arch_backend(arch: object) -> str:
    """The backend an arch name belongs to; TargetError when it names none."""
    if isinstance(arch, str):
        for backend, pattern in _ARCH_PATTERN.items():
            if pattern.fullmatch(arch):
                return backend
    spellings = " or ".join(_ARCH_SPELLING.values())
    raise TargetError(f"unknown GPU arch {arch!r} (expected {spellings})")


def _sm_number(arch: str) -> tuple[int, str] | None:
    """``"sm_90a"`` -> ``(90, "a")``; None when ``arch`` is not a CUDA arch."""
    match = _ARCH_PATTERN["cuda"].fullmatch(arch) if isinstance(arch, str) else None
    return (int(match["number"]), match["suffix"]) if match else None


def ptx_isa_version(arch: str) -> int:
    """The PTX ISA version, times ten, to declare for a CUDA ``arch``.

    The lowest version ptxas accepts for the arch with every instruction heron emits
    for it, but at least 8.0: sm_80 gives 80, sm_90 81 (its vector reductions), sm_100
    86, sm_120 87, sm_103 and family targets 88, sm_110 90.
    """
    parsed = _sm_number(arch)
    if parsed is None:
        raise TargetError(f"ptx_isa_version needs a CUDA arch, got {arch!r}")
    number, suffix = parsed
    isa = _PTX_ISA_FOR_SM.get(number, 87 if number >= 120 else 86 if number >= 100 else 80)
    if suffix == "f":
        isa = max(isa, 88)
    return max(isa, _PTX_ISA_FLOOR)


def _compute_capability_of(arch: str) -> tuple[int, int] | None:
    parsed = _sm_number(arch)
    return None if parsed is None else divmod(parsed[0], 10)


def _default_compute_capability(target: Target) -> tuple[int, int] | None:
    # Runs before the validators, so a bad arch must not raise here: they report it.
    return _compute_capability_of(target.arch) if target.backend == "cuda" else None


def _default_isa_version(target: Target) -> int:
    if target.backend == "cuda" and _sm_number(target.arch) is not None:
        return ptx_isa_version(target.arch)
    return _ROCM_CODE_OBJECT_VERSION if target.backend == "rocm" else _PTX_ISA_FLOOR


# The warp-level MMA instructions (``mma.sync``) by the compute capability that brought
# them, as ``shape.type`` of the A and B operands: PTX ISA 8.x, "Warp-level Matrix
# Multiply-Accumulate Instructions", the table of mma shapes and types with their
# target ISA requirements (m16n8k16 .f16 and .bf16, m16n8k8 .tf32 and m16n8k32 .s8 all
# require sm_80). Later architectures keep them (sm_90's wgmma is another instruction).
#: The compute capability from which a CUDA device multiplies fp8 (sm_89: Ada; Hopper).
_FP8_SINCE = (8, 9)
_MMA_SINCE = {(8, 0): ("m16n8k16.f16", "m16n8k16.bf16", "m16n8k8.tf32", "m16n8k32.s8")}


def _mma_shapes_of(backend: str, arch: str) -> tuple[str, ...]:
    capability = _compute_capability_of(arch) if backend == "cuda" else None
    if capability is None:
        return ()
    return tuple(
        shape
        for since, shapes in sorted(_MMA_SINCE.items())
        if capability >= since
        for shape in shapes
    )


def _default_mma_shapes(target: Target) -> tuple[str, ...]:
    # Runs before the validators, so a bad arch must not raise here: they report it.
    return _mma_shapes_of(target.backend, target.arch) if target.backend in BACKENDS else ()


def _to_compute_capability(value: object) -> object:
    """TOML and device queries give a list; the field holds a (hashable) tuple."""
    return tuple(value) if isinstance(value, list) else value


# --- validators: each raises TargetError naming the field and the value -------------


def _positive_int(target: Target, attribute: attrs.Attribute, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise TargetError(
            f"target field {attribute.name} must be a positive integer, got {value!r}"
        )


def _positive_number(target: Target, attribute: attrs.Attribute, value: object) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or value <= 0:
        raise TargetError(f"target field {attribute.name} must be a positive number, got {value!r}")


def _non_negative_int(target: Target, attribute: attrs.Attribute, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise TargetError(
            f"target field {attribute.name} must be a non-negative integer, got {value!r}"
        )


def _text(target: Target, attribute: attrs.Attribute, value: object) -> None:
    if not isinstance(value, str):
        raise TargetError(f"target field {attribute.name} must be a string, got {value!r}")


def _backend(target: Target, attribute: attrs.Attribute, value: object) -> None:
    if value not in BACKENDS:
        raise TargetError(
            f"target field backend must be one of {', '.join(BACKENDS)}, got {value!r}"
        )


def _arch(target: Target, attribute: attrs.Attribute, value: object) -> None:
    pattern = _ARCH_PATTERN[target.backend]
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise TargetError(
            f"target field arch must be a {target.backend} arch "
            f"{_ARCH_SPELLING[target.backend]}, got {value!r}"
        )


def _warp_size(target: Target, attribute: attrs.Attribute, value: object) -> None:
    if isinstance(value, bool) or value not in (32, 64):
        raise TargetError(f"target field warp_size must be 32 or 64, got {value!r}")


def _compute_capability(target: Target, attribute: attrs.Attribute, value: object) -> None:
    expected = _default_compute_capability(target)
    if value != expected:
        raise TargetError(
            f"target field compute_capability must be {expected!r} for "
            f"{target.backend} arch {target.arch}, got {value!r}"
        )


def _isa_version(target: Target, attribute: attrs.Attribute, value: object) -> None:
    _positive_int(target, attribute, value)
    if target.backend == "cuda" and value < (lowest := ptx_isa_version(target.arch)):
        raise TargetError(
            f"target field isa_version must be at least {lowest} (PTX {lowest / 10:.1f}) "
            f"for {target.arch}, got {value!r}"
        )


def _to_op_cycles(value: object) -> object:
    """A preset's ``[op_cycles]`` table (or :meth:`Target.to_json`'s pairs) as sorted pairs;
    anything else is left for :func:`_op_cycles` to name."""
    items = value.items() if isinstance(value, Mapping) else value
    try:
        pairs = [tuple(pair) for pair in items]  # type: ignore[union-attr]
    except TypeError:
        return value
    if not all(len(pair) == 2 and isinstance(pair[0], str) for pair in pairs):
        return value
    return tuple(sorted(pairs))  # type: ignore[arg-type]


def _op_cycles(target: Target, attribute: attrs.Attribute, value: object) -> None:
    if not isinstance(value, tuple):
        raise TargetError(
            f"target field {attribute.name} must be a table of 'opcode.type' = cycles, "
            f"got {value!r}"
        )
    for key, cycles in value:
        opcode, _, element_type = key.partition(".")
        if not opcode or not element_type or "." in element_type:
            raise TargetError(
                f"target field {attribute.name}: key {key!r} is not 'opcode.type' "
                "(e.g. 'divide.c128')"
            )
        if isinstance(cycles, bool) or not isinstance(cycles, int) or cycles <= 0:
            raise TargetError(
                f"target field {attribute.name}: {key} must be a positive integer, got {cycles!r}"
            )


def _json(value: object) -> object:
    """``value`` with its tuples as lists, nested ones too (``op_cycles``' pairs)."""
    return [_json(item) for item in value] if isinstance(value, tuple) else value


def _int_field() -> Any:
    return attrs.field(validator=_positive_int)


@attrs.frozen(kw_only=True)
class Target:
    """A GPU as the compiler sees it: what it may launch, hold and expect.

    Sizes are in bytes, bandwidth in bytes/s; "core" is an SM (CUDA) or a CU (ROCm),
    "warp" a warp or a wavefront. Fields mirror XLA's ``GpuDeviceInfoProto`` so a
    preset reads against its spec line by line. Keyword-only: two dozen positional
    numbers would be a bug magnet.
    """

    name: str = attrs.field(validator=_text)
    """Preset name (``"h100"``), ``"h100@sm_90a"`` for a preset with another arch,
    ``"device:<arch>"`` for a queried device."""
    backend: str = attrs.field(validator=_backend)
    arch: str = attrs.field(validator=_arch)
    """The code-generation target: ``sm_90``, ``sm_90a``, ``gfx942``..."""
    warp_size: int = attrs.field(validator=_warp_size)
    core_count: int = _int_field()
    threads_per_block_limit: int = _int_field()
    threads_per_core_limit: int = _int_field()
    shared_memory_per_block: int = _int_field()
    """What a block gets without opting in (the static ``__shared__`` limit)."""
    shared_memory_per_block_optin: int = _int_field()
    """What a block may get after raising its dynamic shared-memory attribute."""
    shared_memory_per_core: int = _int_field()
    registers_per_core_limit: int = _int_field()
    registers_per_block_limit: int = _int_field()
    l2_cache_size: int = _int_field()
    memory_bandwidth: int = _int_field()
    clock_rate_ghz: float = attrs.field(validator=_positive_number)
    device_memory_size: int = _int_field()
    block_dim_limit_x: int = _int_field()
    block_dim_limit_y: int = _int_field()
    block_dim_limit_z: int = _int_field()
    compute_capability: tuple[int, int] | None = attrs.field(
        default=attrs.Factory(_default_compute_capability, takes_self=True),
        converter=_to_compute_capability,
        validator=_compute_capability,
    )
    """``(major, minor)`` for CUDA, derived from ``arch``; None for ROCm."""
    isa_version: int = attrs.field(
        default=attrs.Factory(_default_isa_version, takes_self=True), validator=_isa_version
    )
    """CUDA: the PTX ISA version times ten (80 = PTX 8.0); ROCm: the code object version."""
    # --- what ``heron profile`` models (docs/profile.md); each preset cites its source ---
    dram_sector_bytes: int = _int_field()
    """The unit of global memory traffic: a warp's request moves whole sectors."""
    shared_memory_banks: int = _int_field()
    shared_memory_bank_bytes: int = _int_field()
    max_blocks_per_core: int = _int_field()
    """Resident blocks (workgroups) one core holds at most, whatever their size."""
    register_allocation_unit: int = _int_field()
    """Registers a warp's allocation is rounded up to (registers per thread x warp size)."""
    shared_memory_allocation_unit: int = _int_field()
    """Bytes a block's shared memory is rounded up to."""
    shared_memory_reserved_per_block: int = attrs.field(validator=_non_negative_int)
    """Shared memory the system takes from each resident block (CUDA: 1 KiB since sm_80)."""
    warp_instructions_per_cycle: int = _int_field()
    """Warp instructions one core issues per cycle (its schedulers; the issue bound)."""
    launch_overhead_seconds: float = attrs.field(validator=_positive_number)
    """What one kernel launch costs besides its work (XLA's cost model's figure)."""
    mma_shapes: tuple[str, ...] = attrs.field(
        default=attrs.Factory(_default_mma_shapes, takes_self=True), converter=tuple
    )
    """The warp-level matrix multiply-accumulate instructions (``mma.sync``) the device
    runs, as ``shape.type`` of their A and B operands (``"m16n8k16.f16"``); derived from
    the compute capability (PTX ISA, table of mma shapes and types: sm_80 and later),
    empty for ROCm (heron emits no MFMA) and before sm_80. The GEMM emitter takes the
    tensor-core path for a dot whose shape and type are here, the scalar path else."""
    description: str = attrs.field(default="", validator=_text)
    source: str = attrs.field(default="", validator=_text)
    """Where the numbers come from, so they can be checked."""

    # --- the fusion cost model (heron.compiler.fusion.cost_model) ------------------------
    fpus_per_core: int = _int_field()
    """FP32 lanes per core: 128 on Hopper SMs, 64 on Ampere SMs and CDNA CUs (each
    preset says where its number comes from); the cost model's peak flop rate is
    ``core_count * fpus_per_core * clock``. The launch overhead it charges per
    kernel is ``launch_overhead_seconds``, shared with ``heron profile``."""
    memory_bytes_per_block_per_clock: int = _int_field()
    """Bytes one block moves to or from device memory per clock at most (XLA's
    ``memory_transactions_per_clock``: one 32-byte transaction on NVIDIA GPUs, 16 bytes
    on an MI300): a kernel of few blocks cannot use the device's whole bandwidth (an
    H100 needs 53 busy blocks). The cost model caps a kernel's bandwidth at its blocks
    times this times the clock."""
    mma_multiply_adds_per_core_per_cycle: int = attrs.field(default=0, validator=_non_negative_int)
    """Dense f16/bf16 multiply-adds the tensor cores of one core retire per clock (the
    ``mma.sync`` peak): 1024 on Ampere SMs, 2048 on Hopper SMs (each preset says where
    its number comes from); 0 where heron emits no matrix instructions (ROCm: no MFMA).
    ``heron profile`` bounds a kernel that runs ``mma`` instructions by this peak."""
    op_cycles: tuple[tuple[str, int], ...] = attrs.field(
        default=(), converter=_to_op_cycles, validator=_op_cycles
    )
    """Clock cycles of one element of an op on one element type, as measured on the
    device (``"divide.c128"``: 2280 on an H100): XLA's ``HloOpProfiles`` for the arch.
    The cost model charges an op on another type than f32 its f32 lane operations times
    the measured ratio of the two (:class:`heron.compiler.fusion.cost_model.LaneCosts`):
    a complex division costs a hundred f32 divisions, which decides whether priority
    fusion duplicates it into each of its users. Empty where nothing was measured (every
    type then costs what f32 does)."""
    # --- end of the fusion cost model's fields -------------------------------------------

    def __attrs_post_init__(self) -> None:
        # Limits that contradict each other would make launch-bound arithmetic lie.
        self._require_at_most("shared_memory_per_block", "shared_memory_per_block_optin")
        self._require_at_most("shared_memory_per_block_optin", "shared_memory_per_core")
        self._require_at_most("threads_per_block_limit", "threads_per_core_limit")
        self._require_at_most("registers_per_block_limit", "registers_per_core_limit")
        if self.threads_per_block_limit % self.warp_size:
            raise TargetError(
                f"target field threads_per_block_limit ({self.threads_per_block_limit}) "
                f"must be a multiple of warp_size ({self.warp_size})"
            )

    def _require_at_most(self, small: str, large: str) -> None:
        if getattr(self, small) > getattr(self, large):
            raise TargetError(
                f"target field {small} ({getattr(self, small)}) must not exceed "
                f"{large} ({getattr(self, large)})"
            )

    # --- construction --------------------------------------------------------------------

    @classmethod
    def preset(cls, name: str) -> Target:
        """The preset called ``name`` (case-insensitive), e.g. ``Target.preset("h100")``."""
        known = _presets()
        found = known.get(name.lower()) if isinstance(name, str) else None
        if found is None:
            raise TargetError(f"unknown target preset {name!r} (known presets: {', '.join(known)})")
        return found

    @classmethod
    def for_arch(cls, arch: str) -> Target:
        """The preset compiled for ``arch``, or the closest one of its backend.

        ``sm_80`` is the A100, ``gfx942`` the MI300X. An arch with no preset keeps the
        closest preset's numbers with the arch replaced (``"h100@sm_90a"``): the
        limits of a sibling chip are a better guess than none, and naming the
        preset in the result says whose numbers they are.
        """
        backend = _arch_backend(arch)
        candidates = [t for t in _presets().values() if t.backend == backend]
        for target in candidates:
            if target.arch == arch:
                return target
        closest = min(candidates, key=lambda t: _arch_distance(arch, t.arch))
        return closest._with_arch(arch)

    @classmethod
    def resolve(cls, target: str | None, arch: str | None, backend: str | None = None) -> Target:
        """What ``--target TARGET --arch ARCH`` mean on the command line.

        ``target`` names a preset, or a backend (``"cuda"``/``"rocm"``) for that
        backend's default preset; ``arch``, when given, replaces the preset's arch and
        must belong to the same backend. A backend name with an arch picks the preset
        of that arch (``resolve("cuda", "sm_80")`` is the A100, not an H100 told it is
        an sm_80, whose 227 KiB of shared memory an A100 does not have). With only
        ``arch``, the arch picks; with neither, the default of ``backend`` (or CUDA).
        ``backend``, when given, must agree with what the others name.
        """
        if backend is not None and backend not in BACKENDS:
            raise TargetError(
                f"unknown backend {backend!r} (expected one of {', '.join(BACKENDS)})"
            )
        if target in BACKENDS:
            if backend is not None and target != backend:
                raise TargetError(f"--target {target} contradicts backend {backend}")
            backend, target = target, None
        if target is None:
            if arch is None:
                return default_target(backend or "cuda")
            chosen = cls.for_arch(arch)
        else:
            chosen = cls.preset(target)
            if arch is not None and arch != chosen.arch:
                arch_backend = _arch_backend(arch)
                if arch_backend != chosen.backend:
                    raise TargetError(
                        f"arch {arch!r} is a {arch_backend} arch, but target "
                        f"{chosen.name!r} is a {chosen.backend} device"
                    )
                chosen = chosen._with_arch(arch)
        if backend is not None and chosen.backend != backend:
            raise TargetError(f"target {chosen.name!r} is a {chosen.backend} device, not {backend}")
        return chosen

    @classmethod
    def from_device(cls, properties: Mapping[str, object]) -> Target:
        """A Target for a real device, from its queried properties.

        ``properties`` uses the field names as keys (a runtime maps
        ``cuDeviceGetAttribute`` / ``hipDeviceProp_t`` onto them); ``arch`` is
        required and may carry ROCm feature flags (``"gfx90a:sramecc+:xnack-"``),
        which are dropped. A number the runtime cannot query falls back to the
        closest preset of the same arch, and ``source`` says which ones did.
        """
        field_names = set(attrs.fields_dict(cls))
        unknown = sorted(set(properties) - field_names)
        if unknown:
            raise TargetError(f"unknown device properties: {', '.join(unknown)}")
        if "arch" not in properties:
            raise TargetError("device properties must include arch")
        raw_arch = properties["arch"]
        arch = raw_arch.split(":", 1)[0] if isinstance(raw_arch, str) else raw_arch
        backend = _arch_backend(arch)
        if properties.get("backend", backend) != backend:
            raise TargetError(
                f"device property backend {properties['backend']!r} contradicts arch {arch!r}"
            )
        fallback = cls.for_arch(arch)
        values = {key: _plain(value) for key, value in properties.items()}
        values.update(name=f"device:{arch}", backend=backend, arch=arch)
        derived = {"compute_capability", "isa_version", "mma_shapes"}
        borrowed = sorted(field_names - set(values) - derived)
        for key in borrowed:
            values[key] = getattr(fallback, key)
        if "description" in borrowed:
            values["description"] = f"device with arch {arch}"
        if "source" in borrowed:
            numbers = [key for key in borrowed if key not in ("description", "source")]
            values["source"] = "device properties" + (
                f"; {', '.join(numbers)} from preset {fallback.name}" if numbers else ""
            )
        return cls(**values)

    def _with_arch(self, arch: str) -> Target:
        """This device's numbers, compiled for another arch of the same backend."""
        return attrs.evolve(
            self,
            name=f"{self.name.split('@', 1)[0]}@{arch}",
            arch=arch,
            compute_capability=_compute_capability_of(arch) if self.backend == "cuda" else None,
            isa_version=ptx_isa_version(arch) if self.backend == "cuda" else self.isa_version,
            mma_shapes=_mma_shapes_of(self.backend, arch),
            description=f"{self.description} (arch {arch})",
        )

    # --- as data ---------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """Every field, as JSON values (what an executable artefact records)."""
        return {name: _json(value) for name, value in attrs.asdict(self, recurse=False).items()}

    @classmethod
    def from_json(cls, fields: Mapping[str, Any]) -> Target:
        """The Target :meth:`to_json` gave, checked as a preset is (unknown or missing
        fields, and every value, are TargetErrors naming them)."""
        if not isinstance(fields, Mapping):
            raise TargetError(f"a target is an object of fields, not {type(fields).__name__}")
        known = attrs.fields_dict(cls)
        unknown = sorted(set(fields) - set(known))
        if unknown:
            raise TargetError(f"unknown target fields {', '.join(unknown)}")
        required = {n for n, f in known.items() if f.default is attrs.NOTHING}
        missing = sorted(required - set(fields))
        if missing:
            raise TargetError(f"target fields {', '.join(missing)} missing")
        return cls(**fields)

    # --- reading ---------------------------------------------------------------------------

    @property
    def tf32(self) -> bool:
        """Whether f32 dots multiply in TF32 by default, as XLA:GPU's on this device: it
        has TF32 tensor cores (its MMA shapes include ``m16n8k8.tf32``: sm_80 and later).
        :func:`heron.hlo.dot_precision.dot_compute` applies it."""
        return "m16n8k8.tf32" in self.mma_shapes

    @property
    def fp8(self) -> bool:
        """Whether the device multiplies fp8 (e4m3, e5m2) in its tensor cores: CUDA's
        compute capability 8.9 (Ada) and later, where PTX's ``mma`` takes ``.e4m3`` and
        ``.e5m2`` operands and cuBLASLt its fp8 GEMMs
        (:mod:`heron.compiler.library_gemm_fp8` makes such dots library calls)."""
        capability = self.compute_capability
        return self.backend == "cuda" and capability is not None and capability >= _FP8_SINCE

    @property
    def gemm_library(self) -> str:
        """The BLAS library heron's runtime calls a GEMM with on this backend
        (``cublasLt``, ``hipblas``; ``""`` where none), whose epilogues the fusion passes
        leave in a dot's fusion (:mod:`heron.compiler.library_gemm`)."""
        return _GEMM_LIBRARIES.get(self.backend, "")

    @property
    def dnn_library(self) -> str:
        """The DNN library heron's runtime calls a convolution with on this backend
        (``cudnn``; ``""`` where none: ROCm's MIOpen has no binding in heron yet), which
        the compiler hands the convolutions it takes instead of lowering them to a GEMM
        (:mod:`heron.compiler.library_convolution`)."""
        return _DNN_LIBRARIES.get(self.backend, "")

    @property
    def fused_attention_library(self) -> str:
        """The library heron's runtime calls a fused (flash) attention with on this device
        (``cudnn`` on CUDA from sm_80, whose half-precision tensor cores its flash-attention
        engines need; ``""`` where none), to which the compiler hands the attention it
        recognises (:mod:`heron.compiler.library_attention`)."""
        capability = self.compute_capability
        if not self.dnn_library or capability is None or capability < (8, 0):
            return ""
        return self.dnn_library

    @property
    def vector_atomic_add_bytes(self) -> int:
        """How many bytes of consecutive f32, f16 or bf16 elements one global atomic add
        may update: 16 on CUDA from sm_90 with PTX 8.1 (``red.global.add.v4.f32``,
        ``.v8.bf16``: PTX ISA, "Parallel Synchronization and Communication Instructions:
        red", vector types), 0 where every atomic add updates one element. The
        vectorizer turns an aligned run of a scatter's atomic adds into one such add
        (:mod:`heron.emitters.pipeline.vectorize`)."""
        capability = self.compute_capability  # isa_version is at least 81 from sm_90
        return 16 if capability is not None and capability >= (9, 0) else 0

    def summary(self) -> str:
        """One line for ``heron targets``: the numbers that most change code generation."""
        cores = "SMs" if self.backend == "cuda" else "CUs"
        shared = f"{_kib(self.shared_memory_per_block)} shared/block"
        if self.shared_memory_per_block_optin != self.shared_memory_per_block:
            shared += f" ({_kib(self.shared_memory_per_block_optin)} opt-in)"
        return (
            f"{self.name}: {self.backend} {self.arch}, {self.core_count} {cores}, "
            f"warp {self.warp_size}, {shared}, {self.memory_bandwidth / 1e12:.2f} TB/s"
        )


#: backend -> the GEMM library its runtime calls (runtime-cuda's cuBLASLt, runtime-rocm's
#: hipBLAS).
_GEMM_LIBRARIES = {"cuda": "cublasLt", "rocm": "hipblas"}
#: backend -> the DNN library its runtime calls a convolution with (runtime-cuda's cuDNN).
_DNN_LIBRARIES = {"cuda": "cudnn"}


def _kib(size: int) -> str:
    return f"{size // 1024} KiB" if size % 1024 == 0 else f"{size / 1024:.1f} KiB"


def _plain(value: object) -> object:
    """Device queries may hand back numpy scalars or lists; store plain Python values."""
    if isinstance(value, list | tuple):
        return tuple(_plain(item) for item in value)
    if hasattr(value, "item") and callable(value.item):  # a numpy scalar
        return value.item()
    return value


def _arch_distance(arch: str, other: str) -> tuple[int, int]:
    """How far ``other`` is from ``arch`` (same backend): another major first, then the rest.

    Same-major chips share a feature set (sm_89 has no sm_90 TMA; gfx908 is CDNA like
    gfx90a), so they are preferred over a numerically nearer chip of another major.
    Ties keep preset order, which ``min`` does.
    """
    if arch.startswith("sm_"):
        (number, _), (other_number, _) = _sm_number(arch), _sm_number(other)
        (major, minor), (other_major, other_minor) = divmod(number, 10), divmod(other_number, 10)
    else:
        a, b = _ARCH_PATTERN["rocm"].fullmatch(arch), _ARCH_PATTERN["rocm"].fullmatch(other)
        major, other_major = int(a["major"], 16), int(b["major"], 16)
        minor = int(a["minor"] + a["stepping"], 16)
        other_minor = int(b["minor"] + b["stepping"], 16)
    return abs(major - other_major), abs(minor - other_minor)


# --- presets -----------------------------------------------------------------------------


@functools.cache
def _presets() -> dict[str, Target]:
    """Every preset file, parsed and validated once, in name order (the ``heron targets``
    order). Callers get this dict only through copies or single lookups."""
    folder = importlib.resources.files("heron.target").joinpath("presets")
    loaded: dict[str, Target] = {}
    files = sorted(
        (entry for entry in folder.iterdir() if entry.name.endswith(".toml")),
        key=lambda entry: entry.name,
    )
    for entry in files:
        name = entry.name.removesuffix(".toml")
        data = tomllib.loads(entry.read_text(encoding="utf-8"))
        allowed = set(attrs.fields_dict(Target)) - {"name"}
        unknown = sorted(set(data) - allowed)
        if unknown:
            raise TargetError(
                f"preset file {entry.name}: unexpected keys {', '.join(unknown)} "
                "(the file name is the preset name)"
            )
        loaded[name] = Target(name=name, **data)
    return loaded


def presets() -> dict[str, Target]:
    """All presets by name, in name order (a fresh dict: changing it changes nothing)."""
    return dict(_presets())


def default_target(backend: str = "cuda") -> Target:
    """The preset a backend compiles for when no target is named: h100, or mi300x."""
    if backend not in _DEFAULT_PRESET:
        raise TargetError(f"unknown backend {backend!r} (expected one of {', '.join(BACKENDS)})")
    return Target.preset(_DEFAULT_PRESET[backend])
