"""XLA's side: one deviceless compile in a worker process, then its dump folder, read.

:func:`compile_with_xla` sends the module to :mod:`heron.xla_compare.worker`
(in the Python :func:`heron.xla_compare.install.find_xla` found) and reads
what XLA left in the dump folder:

- ``*gpu_after_optimizations.txt``: the optimized module, XLA's fusion
  decisions (each entry fusion's kind, backend config and fused computation);
- ``*thunk_sequence.txt``: each kernel's launch (grid, threads per block,
  dynamic shared memory);
- ``*.ptx``: the kernels' PTX, measured with ``heron.runtime.cuda.ptx_statistics``;
- ``*-memory-usage-report.txt`` and ``*-live-range.txt`` (buffer assignment):
  the bytes of all allocations and the peak of simultaneously live buffers
  (:func:`buffer_sizes`).

An XLA CHECK failure aborts the worker: that is an :class:`XlaCompileError`
whose message is XLA's one fatal line.
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from heron.runtime.cuda.ptx_statistics import KernelStatistics, ResourceUsage, kernel_statistics
from heron.runtime.cuda.sass_statistics import SassStatistics
from heron.xla_compare.install import XlaInstallation
from heron.xla_compare.launch import LaunchShape

#: How long one XLA compile may take (a process of its own).
DEFAULT_TIMEOUT = 300.0

_THUNK_KERNEL = re.compile(
    r"(?P<name>[\w.$-]+)\s+grid:\s*\[(?P<grid>[\d,\s]+)\]\s+threads:\s*\[(?P<block>[\d,\s]+)\]"
    r"(?:\s+shared_memory:\s*(?P<shared>\d+)\s*bytes)?"
)
_COMPUTATION = re.compile(r"^(ENTRY\s+)?%?([\w.\-]+)\s+\(.*\{\s*$")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*)$")
_TOTAL_BYTES = re.compile(r"^Total bytes:\s*(\d+)", re.MULTILINE)
_PEAK_SECTION = re.compile(r"^\s*Live ranges at \d+ \(peak\):\s*$", re.MULTILINE)
_CUMULATIVE = re.compile(r"\(cumulative:\s*(\d+) bytes\)")
_FATAL = re.compile(r"^(F\d{4}\s.*|.*Check failed.*)$", re.MULTILINE)


class XlaCompileError(RuntimeError):
    """XLA refused or aborted the compile; the message is one line."""


@dataclass
class XlaKernel(LaunchShape):
    """One kernel XLA launches: its fusion, launch and PTX measures."""

    name: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_memory: int
    #: The entry fusion instruction this kernel runs (None when none matches).
    fusion: str | None = None
    #: The fusion's kind (kLoop, kInput, kCustom) and, for kCustom, its backend kind
    #: (``__triton``, ``__triton_gemm``...).
    kind: str | None = None
    backend_kind: str | None = None
    #: The names of the fused computation's instructions (parameters left out).
    fused_names: frozenset[str] = frozenset()
    stats: KernelStatistics | None = None
    resources: ResourceUsage | None = None
    #: nvdisasm's view of the kernel ptxas made of XLA's PTX (compare.measure_machine_code).
    sass: SassStatistics | None = None
    ptx_file: str | None = None

    @property
    def emitter(self) -> str:
        """What XLA emitted it with, as far as the dump says: Triton, or the fusion kind."""
        if self.backend_kind and "triton" in self.backend_kind:
            return f"triton ({self.backend_kind})"
        return self.kind or "kernel"


@dataclass
class XlaCompile:
    """What one XLA compile of a module produced."""

    seconds: float
    plugin_version: str
    jaxlib_version: str
    pjrt_api: str
    optimized_hlo: str
    thunk_sequence: str
    kernels: list[XlaKernel] = field(default_factory=list)
    #: PTX text per dump file name (for ptxas -v).
    ptx: dict[str, str] = field(default_factory=dict)
    #: Buffer assignment's memory usage report and live ranges ("" when not dumped).
    memory_usage_report: str = ""
    live_range: str = ""

    @property
    def buffers(self) -> BufferSizes:
        """Total allocated and peak live bytes, as far as the dump says."""
        return buffer_sizes(self.memory_usage_report, self.live_range)


@dataclass(frozen=True)
class BufferSizes:
    """What XLA's buffer assignment says of a module's memory (None: not in the dump)."""

    #: All allocations of the default memory space: parameters, outputs, temporaries.
    total_bytes: int | None
    #: The most bytes live at once in XLA's schedule (its "Live ranges at N (peak)").
    peak_bytes: int | None


def buffer_sizes(memory_usage_report: str, live_range: str) -> BufferSizes:
    """Total bytes from the memory usage report; peak bytes from the live ranges' peak."""
    total = _TOTAL_BYTES.search(memory_usage_report)
    peak = None
    section = _PEAK_SECTION.search(live_range)
    if section is not None:
        block = []
        for line in live_range[section.end() :].splitlines()[1:]:
            if not line.startswith("    "):
                break
            block.append(line)
        cumulative = [int(v) for v in _CUMULATIVE.findall("\n".join(block))]
        peak = max(cumulative, default=0)
    return BufferSizes(int(total.group(1)) if total else None, peak)


def _ints(text: str) -> tuple[int, int, int]:
    values = [int(v) for v in text.replace(" ", "").split(",") if v]
    return tuple((values + [1, 1, 1])[:3])  # type: ignore[return-value]


def kernel_name(instruction_name: str) -> str:
    """The kernel symbol XLA gives a fusion instruction (``fusion.1`` -> ``fusion_1``)."""
    return re.sub(r"[^\w$]", "_", instruction_name)


def parse_thunk_sequence(text: str) -> list[XlaKernel]:
    """The kernel launches of ``*thunk_sequence.txt``, in order."""
    kernels = []
    for match in _THUNK_KERNEL.finditer(text):
        kernels.append(
            XlaKernel(
                name=match.group("name"),
                grid=_ints(match.group("grid")),
                block=_ints(match.group("block")),
                shared_memory=int(match.group("shared") or 0),
            )
        )
    return kernels


@dataclass
class _Computation:
    name: str
    is_entry: bool
    lines: list[str]


def _computations(hlo: str) -> list[_Computation]:
    found: list[_Computation] = []
    current: _Computation | None = None
    for line in hlo.splitlines():
        header = _COMPUTATION.match(line)
        if header and current is None:
            current = _Computation(header.group(2), bool(header.group(1)), [])
        elif current is not None and line.strip() == "}":
            found.append(current)
            current = None
        elif current is not None:
            current.lines.append(line)
    return found


def parse_fusions(hlo: str) -> dict[str, dict]:
    """Entry fusion instruction name -> kind, backend kind and fused instruction names."""
    computations = {c.name: c for c in _computations(hlo)}
    fusions: dict[str, dict] = {}
    for computation in computations.values():
        if not computation.is_entry:
            continue
        for line in computation.lines:
            match = _INSTRUCTION.match(line)
            if not match or not re.search(r"\bfusion\(", match.group(2)):
                continue
            rest = match.group(2)
            kind = re.search(r"\bkind=(k\w+)", rest)
            calls = re.search(r"\bcalls=%?([\w.\-]+)", rest)
            backend = re.search(r'"kind"\s*:\s*"([^"]+)"', rest)
            called = computations.get(calls.group(1)) if calls else None
            names = frozenset(
                m.group(1)
                for m in map(_INSTRUCTION.match, called.lines if called else [])
                if m and not re.search(r"\bparameter\(", m.group(2))
            )
            fusions[match.group(1)] = {
                "kind": kind.group(1) if kind else None,
                "backend_kind": backend.group(1) if backend else None,
                "fused_names": names,
            }
    return fusions


def _one_file(dump: Path, pattern: str) -> str:
    files = sorted(p for p in dump.glob(pattern) if p.stat().st_size)
    return files[-1].read_text() if files else ""


def read_dump(dump: Path, answer: dict) -> XlaCompile:
    """The compile's results from its dump folder (and the worker's answer)."""
    optimized = _one_file(dump, "*gpu_after_optimizations.txt")
    thunks = _one_file(dump, "*thunk_sequence.txt")
    result = XlaCompile(
        seconds=float(answer.get("seconds", 0.0)),
        plugin_version=str(answer.get("plugin_version", "unknown")),
        jaxlib_version=str(answer.get("jaxlib_version", "unknown")),
        pjrt_api=str(answer.get("pjrt_api", "")),
        optimized_hlo=optimized,
        thunk_sequence=thunks,
        memory_usage_report=_one_file(dump, "*-memory-usage-report.txt"),
        live_range=_one_file(dump, "*-live-range.txt"),
    )
    statistics: dict[str, tuple[str, KernelStatistics]] = {}
    for ptx_file in sorted(dump.glob("*.ptx")):
        text = ptx_file.read_text()
        result.ptx[ptx_file.name] = text
        for name, stats in kernel_statistics(text).items():
            statistics[name] = (ptx_file.name, stats)
    fusions = parse_fusions(optimized)
    by_kernel = {kernel_name(name): name for name in fusions}
    for kernel in parse_thunk_sequence(thunks):
        fusion = by_kernel.get(kernel.name) or (kernel.name if kernel.name in fusions else None)
        if fusion is not None:
            kernel.fusion = fusion
            kernel.kind = fusions[fusion]["kind"]
            kernel.backend_kind = fusions[fusion]["backend_kind"]
            kernel.fused_names = fusions[fusion]["fused_names"]
        if kernel.name in statistics:
            kernel.ptx_file, kernel.stats = statistics[kernel.name]
        result.kernels.append(kernel)
    return result


def fatal_line(stderr: str) -> str | None:
    """XLA's fatal log line (``F1124 ... Check failed: ...``) in ``stderr``, if any."""
    lines = _FATAL.findall(stderr)
    return lines[0].strip() if lines else None


def compile_with_xla(
    hlo_text: str,
    target_config: str,
    installation: XlaInstallation,
    options: dict[str, object] | None = None,
    dump_dir: Path | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> XlaCompile:
    """Compile ``hlo_text`` with XLA:GPU, deviceless, in a worker process; read its dump.

    ``dump_dir`` keeps XLA's dump folder (a temporary one otherwise). The
    compile is the worker's first, so its ``seconds`` include what XLA pays once
    per process; :func:`time_xla_compile` times a compile without it.
    """
    with tempfile.TemporaryDirectory(prefix="heron-xla-") as scratch:
        dump = Path(dump_dir) if dump_dir is not None else Path(scratch) / "dump"
        dump.mkdir(parents=True, exist_ok=True)
        answer = _run_worker(
            {
                "hlo": hlo_text,
                "target_config": target_config,
                "dump_dir": str(dump),
                "options": dict(options or {}),
                "plugin": installation.plugin,
            },
            installation,
            timeout,
        )
        return read_dump(dump, answer)


#: The module a timing worker compiles first, untimed (:func:`time_xla_compile`): a
#: loop fusion and a row reduction, so that LLVM, libdevice, ptxas and the emitters
#: XLA sets up once per process are set up before the timed compile.
WARM_UP_MODULE = """HloModule warm_up, entry_computation_layout={(f32[64,256]{1,0})->f32[64]{0}}

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT sum = f32[] add(a, b)
}

ENTRY main {
  x = f32[64,256]{1,0} parameter(0)
  e = f32[64,256]{1,0} exponential(x)
  t = f32[64,256]{1,0} tanh(e)
  zero = f32[] constant(0)
  ROOT r = f32[64]{0} reduce(t, zero), dimensions={1}, to_apply=add
}
"""


def time_xla_compile(
    hlo_text: str,
    target_config: str,
    installation: XlaInstallation,
    options: dict[str, object] | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> float:
    """Seconds XLA:GPU takes to compile ``hlo_text`` (deviceless) in a process that has
    compiled another module before (:data:`WARM_UP_MODULE`), without dumping: the
    figure to set beside heron's compile of the same module in a warm process.

    A process's first compile pays XLA's start-up too (40-60 ms on the 2-core
    machine of docs/benchmarks.md, against a 45 ms compile of a 100-line module); a
    second compile of the same module reuses what XLA keeps in memory (its PTX
    compilation cache), so each timing is a fresh worker's second module.
    """
    answer = _run_worker(
        {
            "hlo": hlo_text,
            "target_config": target_config,
            "options": dict(options or {}),
            "plugin": installation.plugin,
            "warm_up": WARM_UP_MODULE,
        },
        installation,
        timeout,
    )
    return float(answer["seconds"])


def _run_worker(request: dict, installation: XlaInstallation, timeout: float) -> dict:
    """The worker's answer to ``request`` (XlaCompileError when XLA failed or aborted)."""
    try:
        process = subprocess.run(
            [installation.python, "-I", str(installation.worker)],
            input=json.dumps(request),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise XlaCompileError(f"XLA did not finish within {timeout:.0f} s") from exc
    except OSError as exc:
        raise XlaCompileError(f"cannot run {installation.python}: {exc}") from exc
    answer = _answer(process.stdout)
    if process.returncode != 0 or answer is None:
        fatal = fatal_line(process.stderr)
        how = (
            f"killed by signal {-process.returncode}"
            if process.returncode < 0
            else f"exit status {process.returncode}"
        )
        last = [line for line in process.stderr.splitlines() if line.strip()]
        detail = fatal or (last[-1].strip() if last else "no message")
        raise XlaCompileError(f"XLA aborted ({how}): {detail}")
    if not answer.get("ok"):
        raise XlaCompileError(str(answer.get("error", "XLA failed")).splitlines()[0])
    return answer


def _answer(stdout: str) -> dict | None:
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                return None
    return None
