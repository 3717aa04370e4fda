"""Statistics of PTX text and of ``ptxas -v``: what a kernel's device code does.

PTX is this package's format, and comparing two compilers' kernels (heron's
and XLA's, ``heron xla``) needs the same measures on both:

- :func:`kernel_statistics`: per ``.entry`` kernel, the instructions
  (statements of the kernel's body, directives and labels left out) counted by
  opcode, global loads and stores by width in bits, read-only-cache loads
  (``ld.global.nc``), shared-memory accesses, atomics (``atom``/``red``),
  warp shuffles, barriers, FMAs and approximate instructions;
- :func:`parse_ptxas_info`: the resource usage ``ptxas -v`` prints per kernel
  (registers, spill stores and loads, stack frame, shared memory, barriers);
- :func:`ptxas_resource_usage`: runs a given ``ptxas -v`` on PTX text for the
  PTX's own ``.target`` and parses it.

Text only (and a subprocess for ptxas): no MLIR, no llvmlite, so this module
is on the device side; the compile side's ``compiler_tools.find_ptxas`` says
which ptxas to run.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "KernelStatistics",
    "ResourceUsage",
    "kernel_statistics",
    "parse_ptxas_info",
    "ptx_target",
    "ptxas_resource_usage",
]

_ENTRY = re.compile(r"\.entry\s+([A-Za-z_$][\w$]*)\s*\(")
_TARGET = re.compile(r"^\s*\.target\s+(sm_\w+)", re.MULTILINE)
_LABEL = re.compile(r"^[A-Za-z_$][\w$]*:")
_TYPE_BITS = re.compile(r"^[bsuf](8|16|32|64|128)$")
_VECTOR = re.compile(r"^v(2|4|8)$")
_SPACES = ("global", "shared", "local", "param", "const")


@dataclass
class KernelStatistics:
    """What one kernel's PTX body does, statement by statement."""

    name: str
    #: Instructions in the body (a ``{ ... }`` scope's statements count; labels,
    #: directives such as ``.reg`` and braces do not).
    instructions: int = 0
    #: Instructions by opcode, the first dotted part (``ld``, ``fma``, ``shfl``...).
    opcodes: Counter = field(default_factory=Counter)
    #: ``ld.global`` (with ``.nc``) by access width in bits (vector length x type).
    global_loads: Counter = field(default_factory=Counter)
    #: ``st.global`` by access width in bits.
    global_stores: Counter = field(default_factory=Counter)
    #: ``ld.global.nc``: loads through the read-only (non-coherent) cache.
    nc_loads: int = 0
    #: ``ld.shared`` and ``ldmatrix...shared`` (a warp's MMA fragments in one instruction).
    shared_loads: int = 0
    shared_stores: int = 0
    #: ``atom.*`` and ``red.*`` in any state space.
    atomics: int = 0
    #: ``shfl.*``.
    shuffles: int = 0
    #: ``bar.*`` and ``barrier.*`` (``bar.sync``, ``barrier.sync.aligned``).
    barriers: int = 0
    #: ``fma.*``.
    fma: int = 0
    #: Instructions with an ``.approx`` modifier (``ex2.approx``, ``div.approx``...).
    approx: int = 0

    @property
    def global_load_count(self) -> int:
        return sum(self.global_loads.values())

    @property
    def global_store_count(self) -> int:
        return sum(self.global_stores.values())

    def as_dict(self) -> dict:
        """JSON-ready: counters as ``{str(key): count}`` sorted by key."""
        return {
            "name": self.name,
            "instructions": self.instructions,
            "global_loads": _widths(self.global_loads),
            "global_stores": _widths(self.global_stores),
            "nc_loads": self.nc_loads,
            "shared_loads": self.shared_loads,
            "shared_stores": self.shared_stores,
            "atomics": self.atomics,
            "shuffles": self.shuffles,
            "barriers": self.barriers,
            "fma": self.fma,
            "approx": self.approx,
        }


def _widths(counter: Counter) -> dict[str, int]:
    return {str(width): counter[width] for width in sorted(counter)}


@dataclass(frozen=True)
class ResourceUsage:
    """One kernel's line of ``ptxas -v`` (``Used N registers, ...``)."""

    name: str
    registers: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    stack_frame: int = 0
    shared_memory: int = 0
    barriers: int = 0

    def as_dict(self) -> dict:
        return {
            "registers": self.registers,
            "spill_stores": self.spill_stores,
            "spill_loads": self.spill_loads,
            "stack_frame": self.stack_frame,
            "shared_memory": self.shared_memory,
            "barriers": self.barriers,
        }


def ptx_target(ptx: str) -> str | None:
    """The PTX module's ``.target`` (``sm_90a``...), or None."""
    match = _TARGET.search(ptx)
    return match.group(1) if match else None


def _strip_comments(ptx: str) -> str:
    ptx = re.sub(r"/\*.*?\*/", " ", ptx, flags=re.DOTALL)
    return re.sub(r"//[^\n]*", "", ptx)


def _entry_bodies(ptx: str) -> list[tuple[str, str]]:
    """``(name, body)`` of every ``.entry``: the text between its outermost braces."""
    text = _strip_comments(ptx)
    bodies = []
    for match in _ENTRY.finditer(text):
        start = text.find("{", match.end())
        if start < 0:
            continue
        depth, end = 0, start
        for end in range(start, len(text)):
            if text[end] == "{":
                depth += 1
            elif text[end] == "}":
                depth -= 1
                if depth == 0:
                    break
        bodies.append((match.group(1), text[start + 1 : end]))
    return bodies


def _opcode(statement: str) -> str | None:
    """The statement's opcode (``ld.global.nc.v4.f32``), or None for a non-instruction."""
    text = statement.strip()
    while True:
        stripped = text.lstrip("{} \t\n")
        label = _LABEL.match(stripped)
        if label:
            stripped = stripped[label.end() :]
        if stripped == text:
            break
        text = stripped
    if not text or text.startswith("."):
        return None
    tokens = text.split()
    if tokens[0].startswith("@"):  # a predicate guard: @%p1 bra ...
        tokens = tokens[1:]
    return tokens[0] if tokens else None


def _access_bits(parts: list[str]) -> int:
    lanes, bits = 1, 0
    for part in parts:
        if _VECTOR.match(part):
            lanes = int(part[1:])
        type_match = _TYPE_BITS.match(part)
        if type_match:
            bits = int(type_match.group(1))
    return lanes * bits


def kernel_statistics(ptx: str) -> dict[str, KernelStatistics]:
    """Per ``.entry`` kernel of ``ptx`` (in the order they appear), its statistics."""
    result: dict[str, KernelStatistics] = {}
    for name, body in _entry_bodies(ptx):
        stats = KernelStatistics(name)
        for statement in body.split(";"):
            opcode = _opcode(statement)
            if opcode is None:
                continue
            parts = opcode.split(".")
            base = parts[0]
            stats.instructions += 1
            stats.opcodes[base] += 1
            space = next((p for p in parts[1:] if p in _SPACES), None)
            if base == "ld" and space == "global":
                stats.global_loads[_access_bits(parts)] += 1
                stats.nc_loads += "nc" in parts
            elif base == "st" and space == "global":
                stats.global_stores[_access_bits(parts)] += 1
            elif base in ("ld", "ldmatrix") and space == "shared":  # ldmatrix: a warp's
                stats.shared_loads += 1  # fragments read from shared memory at once
            elif base == "st" and space == "shared":
                stats.shared_stores += 1
            elif base in ("atom", "red"):
                stats.atomics += 1
            elif base == "shfl":
                stats.shuffles += 1
            elif base in ("bar", "barrier"):
                stats.barriers += 1
            elif base == "fma":
                stats.fma += 1
            stats.approx += "approx" in parts
        result[name] = stats
    return result


_COMPILING = re.compile(r"Compiling entry function '([^']+)'")
_PROPERTIES = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_USED_BARRIERS = re.compile(r"used (\d+) barriers")
_SMEM = re.compile(r"(\d+) bytes smem")


def parse_ptxas_info(text: str) -> dict[str, ResourceUsage]:
    """The kernels' resource usage from ``ptxas -v`` output (its stderr or stdout).

    Device functions' ``Function properties`` blocks are ignored: a kernel's
    own frame and spills are what its block reports.
    """
    found: dict[str, dict] = {}
    current: str | None = None
    properties_of: str | None = None
    for line in text.splitlines():
        match = _COMPILING.search(line)
        if match:
            current = properties_of = match.group(1)
            found[current] = {"name": current}
            continue
        match = _PROPERTIES.search(line)
        if match:
            properties_of = match.group(1)
            continue
        if current is None:
            continue
        entry = found[current]
        match = _FRAME.search(line)
        if match and properties_of == current:
            entry["stack_frame"], entry["spill_stores"], entry["spill_loads"] = map(
                int, match.groups()
            )
        match = _USED.search(line)
        if match:
            entry["registers"] = int(match.group(1))
            barriers = _USED_BARRIERS.search(line)
            smem = _SMEM.search(line)
            if barriers:
                entry["barriers"] = int(barriers.group(1))
            if smem:
                entry["shared_memory"] = int(smem.group(1))
    return {name: ResourceUsage(**values) for name, values in found.items()}


class PtxasInfoError(RuntimeError):
    """``ptxas -v`` rejected the PTX; the message quotes it."""


def ptxas_resource_usage(
    ptx: str, ptxas: str | os.PathLike, arch: str | None = None
) -> dict[str, ResourceUsage]:
    """Run ``ptxas -v`` (the executable ``ptxas``) on ``ptx`` for ``arch`` (default:
    the PTX's ``.target``) and return each kernel's resource usage."""
    arch = arch or ptx_target(ptx)
    if not arch:
        raise PtxasInfoError("the PTX names no .target: say which arch to assemble it for")
    with tempfile.TemporaryDirectory(prefix="heron-ptxas-v-") as tmp:
        source = Path(tmp) / "kernel.ptx"
        source.write_text(ptx)
        result = subprocess.run(
            [os.fspath(ptxas), "-v", "--gpu-name", arch, "-o", os.devnull, str(source)],
            capture_output=True,
            text=True,
            check=False,
        )
    if result.returncode != 0:
        message = (result.stderr or result.stdout).strip().splitlines()
        raise PtxasInfoError(
            f"ptxas -v rejected the PTX for {arch} (exit {result.returncode}):"
            f" {message[0] if message else ''}"
        )
    return parse_ptxas_info(result.stdout + "\n" + result.stderr)
