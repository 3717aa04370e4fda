"""Statistics of SASS, the machine code a GPU executes: what ``nvdisasm`` shows of a cubin.

PTX is not what runs: ptxas expands one ``div.rn.f32`` into a fast path, a
check and a call to a slow-path subroutine, turns ``tanh.approx`` into one
``MUFU.TANH``, and schedules, unrolls and vectorises on its own. Two kernels
with equal PTX counts can differ twofold in SASS, and on compute-bound
kernels (transcendental elementwise math, GEMM mainloops) SASS size predicts
the GPU's time where PTX did not (issue 29's GELU: 209 against 136 PTX
instructions, 360 against 144 SASS). So ``heron xla`` and the benchmarks
count both, for both compilers, with the same ptxas and nvdisasm:

- :func:`sass_statistics` parses ``nvdisasm`` text: per kernel (a
  ``.text.<kernel>`` section, the subroutines ptxas put in it included),
  instructions by opcode, branches, calls (slow paths), ``MUFU`` (the
  special-function unit: ex2, rcp, rsq, tanh...), and memory instructions by
  state space and access width;
- :func:`cubin_sass_statistics` runs a given ``nvdisasm`` on a cubin;
- :func:`ptx_sass_statistics` assembles PTX with a given ptxas first.

Text and subprocesses only (no MLIR): this module is on the device side. The
compile side's ``compiler_tools.find_nvdisasm`` says which nvdisasm to run
(the ``nvidia-cuda-nvdisasm`` wheel, part of the ``compile`` extra).
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from heron.runtime.cuda.ptx_statistics import ptx_target

__all__ = [
    "SassError",
    "SassStatistics",
    "cubin_sass_statistics",
    "ptx_sass_statistics",
    "sass_statistics",
]

_SECTION = re.compile(r"^\s*\.section\s+\.text\.(\S+?),")
_INSTRUCTION = re.compile(
    r"/\*[0-9a-f]{4,}\*/\s+(?:\{\s*)?(?:@!?U?P[T0-9]+\s+)?(?P<opcode>[A-Z][A-Za-z0-9_.]*)"
)
_VERSION = re.compile(r"^\s*\.version\s+\S+", re.MULTILINE)
_FUNCTION = re.compile(r"^\s*\.type\s+(\S+?),@function")
#: Opcode -> (state space, is a store) of the memory instructions counted by width.
_MEMORY = {
    "LDG": ("global", False),
    "STG": ("global", True),
    "LD": ("generic", False),
    "ST": ("generic", True),
    "LDS": ("shared", False),
    "STS": ("shared", True),
    "LDSM": ("shared", False),  # ldmatrix: a warp's MMA fragments in one instruction
    "LDL": ("local", False),
    "STL": ("local", True),
}
#: Atomic and reduction opcodes (global, shared and generic).
_ATOMICS = frozenset({"ATOM", "ATOMG", "ATOMS", "RED", "REDG", "REDS"})
_BRANCHES = frozenset({"BRA", "BRX", "JMP", "JMX"})
_WIDTH_MODIFIER = re.compile(r"^(?:[USF]?(8|16|32|64|128))$")
_VECTOR_MODIFIER = re.compile(r"^[A-Z]+(8|16|32|64)x(2|4|8)$")


class SassError(RuntimeError):
    """ptxas or nvdisasm failed on the input; the message quotes the tool."""


@dataclass
class SassStatistics:
    """What one kernel's machine code holds, instruction by instruction."""

    name: str
    #: Instructions, ``NOP`` padding left out, the section's subroutines included.
    instructions: int = 0
    #: Instructions by opcode without modifiers (``FFMA``, ``MUFU``, ``LDG``...).
    opcodes: Counter = field(default_factory=Counter)
    #: ``BRA``/``BRX``/``JMP``/``JMX``, predicated or not.
    branches: int = 0
    #: ``CALL``: calls into subroutines (ptxas's IEEE division and sqrt slow paths).
    calls: int = 0
    #: Subroutines in the kernel's section (``$__internal_..._slowpath``).
    subroutines: tuple[str, ...] = ()
    #: Of ``instructions``, those in the subroutines (slow paths a kernel rarely runs).
    subroutine_instructions: int = 0
    #: ``MUFU.*`` by function (``EX2``, ``RCP``, ``TANH``...).
    mufu: Counter = field(default_factory=Counter)
    #: Global loads and stores by access width in bits.
    global_loads: Counter = field(default_factory=Counter)
    global_stores: Counter = field(default_factory=Counter)
    shared_loads: int = 0
    shared_stores: int = 0
    #: Local-memory accesses (spills, stack arrays).
    local_accesses: int = 0
    #: Atomics and reductions by access width in bits (``RED.E.ADD.F32x4``: 128).
    atomics: Counter = field(default_factory=Counter)

    @property
    def mufu_count(self) -> int:
        return sum(self.mufu.values())

    def as_dict(self) -> dict:
        """JSON-ready, with ``sass_`` names (beside the PTX statistics in one record)."""
        return {
            "sass_instructions": self.instructions,
            "sass_branches": self.branches,
            "sass_calls": self.calls,
            "sass_subroutine_instructions": self.subroutine_instructions,
            "sass_mufu": {k: self.mufu[k] for k in sorted(self.mufu)},
            "sass_global_loads": {str(w): self.global_loads[w] for w in sorted(self.global_loads)},
            "sass_global_stores": {
                str(w): self.global_stores[w] for w in sorted(self.global_stores)
            },
            "sass_shared": [self.shared_loads, self.shared_stores],
            "sass_local": self.local_accesses,
            "sass_atomics": {str(w): self.atomics[w] for w in sorted(self.atomics)},
        }


def _access_bits(modifiers: list[str]) -> int:
    """The access width a memory instruction's modifiers say (32 when none does)."""
    bits = 32
    for modifier in modifiers:
        vector = _VECTOR_MODIFIER.match(modifier)
        if vector:
            return int(vector.group(1)) * int(vector.group(2))
        width = _WIDTH_MODIFIER.match(modifier)
        if width:
            bits = int(width.group(1))
    return bits


def _count(stats: SassStatistics, opcode: str) -> None:
    base, *modifiers = opcode.split(".")
    if base == "NOP":
        return
    stats.instructions += 1
    stats.opcodes[base] += 1
    if base in _BRANCHES:
        stats.branches += 1
    elif base == "CALL":
        stats.calls += 1
    elif base == "MUFU":
        stats.mufu[modifiers[0] if modifiers else "?"] += 1
    elif base in _ATOMICS:
        stats.atomics[_access_bits(modifiers)] += 1
    elif base in _MEMORY:
        space, store = _MEMORY[base]
        if space == "global":
            (stats.global_stores if store else stats.global_loads)[_access_bits(modifiers)] += 1
        elif space == "shared":
            if store:
                stats.shared_stores += 1
            else:
                stats.shared_loads += 1
        elif space == "local":
            stats.local_accesses += 1


def sass_statistics(sass: str) -> dict[str, SassStatistics]:
    """Per kernel of ``nvdisasm`` output (its ``.text.<kernel>`` sections, in order)."""
    result: dict[str, SassStatistics] = {}
    current: SassStatistics | None = None
    for line in sass.splitlines():
        section = _SECTION.match(line)
        if section:
            current = result.setdefault(section.group(1), SassStatistics(section.group(1)))
            continue
        if current is None:
            continue
        function = _FUNCTION.match(line)
        if function and function.group(1) != current.name:
            current.subroutines += (function.group(1),)
            continue
        instruction = _INSTRUCTION.search(line)
        if instruction:
            before = current.instructions
            _count(current, instruction.group("opcode"))
            if current.subroutines:  # ptxas puts subroutines after the kernel's code
                current.subroutine_instructions += current.instructions - before
    return result


def cubin_sass_statistics(cubin: bytes, nvdisasm: str | os.PathLike) -> dict[str, SassStatistics]:
    """Disassemble ``cubin`` with the executable ``nvdisasm`` and count its kernels' SASS."""
    with tempfile.TemporaryDirectory(prefix="heron-nvdisasm-") as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        result = subprocess.run(
            [os.fspath(nvdisasm), "-c", str(path)], capture_output=True, text=True, check=False
        )
    if result.returncode != 0:
        message = (result.stderr or result.stdout).strip().splitlines()
        raise SassError(
            f"nvdisasm failed (exit {result.returncode}): {message[0] if message else ''}"
        )
    return sass_statistics(result.stdout)


def ptx_sass_statistics(
    ptx: str,
    ptxas: str | os.PathLike,
    nvdisasm: str | os.PathLike,
    arch: str | None = None,
) -> dict[str, SassStatistics]:
    """Assemble ``ptx`` with ``ptxas`` for its own ``.target`` (``arch`` when it names none), then
    count each kernel's SASS. PTX without kernels gives ``{}``."""
    if ptx_target(ptx) is None:
        if not arch:
            raise SassError("the PTX names no .target: say which arch to assemble it for")
        ptx = _VERSION.sub(lambda m: f"{m.group(0)}\n.target {arch}", ptx, count=1)
    arch = ptx_target(ptx) or arch
    with tempfile.TemporaryDirectory(prefix="heron-sass-") as tmp:
        source, cubin = Path(tmp) / "kernel.ptx", Path(tmp) / "kernel.cubin"
        source.write_text(ptx)
        result = subprocess.run(
            [os.fspath(ptxas), "--gpu-name", arch, "-o", str(cubin), str(source)],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            message = (result.stderr or result.stdout).strip().splitlines()
            raise SassError(
                f"ptxas rejected the PTX for {arch} (exit {result.returncode}):"
                f" {message[0] if message else ''}"
            )
        return cubin_sass_statistics(cubin.read_bytes(), nvdisasm)
