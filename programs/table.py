"""heron's kernels per corpus program beside XLA:GPU's: the tables of docs/programs.md and
docs/models.md.

    python programs/table.py            # prints the Markdown table and its summary
    python programs/table.py --update docs/programs.md   # rewrites the table there
    python programs/table.py --corpus models --update docs/models.md   # the model corpus

heron's figures are measured, never written down: each ``module.hlo`` goes
through what ``heron compile --executable`` does before it emits thunks
(:func:`heron.compiler.executable.prepare_module`: simplification, the GPU
fusion passes for the entry and for every loop body, condition and branch,
copy insertion and the scheduler), and its kernels are counted: one per
fusion of the entry and of those computations, a loop body's kernels once
(XLA's count is static too). Where an instruction is left that no heron
emitter runs yet (an instruction the fusion passes left outside a fusion
that is no copy, loop or conditional: thunk emission refuses it), the row
says ``refused: <opcode>``. Buffer assignment
(:func:`heron.hlo.buffers.assign_buffers`, the kernel ABI's alignment) gives
heron's peak memory, beside XLA's total allocation bytes (its
buffer-assignment "Total bytes"). XLA:GPU's figures come from the
committed ``xla_gpu.json`` (``programs/generate.py``). Needs heron only, not
jax nor XLA.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import attrs

from heron.compiler import Target
from heron.compiler.executable import prepare_module
from heron.emitters.kernel_arguments import BUFFER_ALIGNMENT
from heron.hlo.buffers import BufferAssignment, assign_buffers
from heron.hlo.buffers.dataflow import sequential_computations
from heron.hlo.ir import Module
from heron.hlo.parser import parse_module_file
from heron.hlo.passes.outline import HOST_OPCODES

HERE = Path(__file__).resolve().parent

#: How the outline names the instruction it refuses (heron.hlo.passes.outline.describe).
#: The thunk kinds of XLA's thunk sequence that are one kernel launch each.
KERNEL_THUNKS = frozenset({"kKernel", "kCustomKernel"})

#: XLA's thunks that launch device work of a library or a custom kernel: cuDNN
#: convolutions, custom calls (``__gpu$TopK``), cuBLAS GEMMs, FFTs. The issue's rule
#: counts "fusions plus unfused ops": each is one launch beside the kernel count.
LIBRARY_THUNKS = frozenset(
    {
        "kConvolution",
        "kCustomCall",
        "kGemm",
        "kCublasLtMatmul",
        "kCuDnn",
        "kFft",
        "kTriangularSolve",  # cuBLAS's trsm
    }
)

#: The device the counts are for.
TARGET = "h100"


@attrs.frozen
class HeronKernels:
    """heron's launch count for a module today, or the opcode that stops it."""

    count: int | None
    refused: str | None = None
    #: Bytes of every allocation of heron's buffer assignment (None when refused).
    peak_bytes: int | None = None

    def __str__(self) -> str:
        return str(self.count) if self.refused is None else f"refused: {self.refused}"


#: Control flow is run by thunks of its own (its computations' kernels are counted).
CONTROL_FLOW = frozenset({"while", "conditional"})
#: What thunk emission runs outside a fusion: host instructions (no thunk), copies,
#: loops and conditionals; any other instruction left there is refused.
RUN_OUTSIDE_FUSIONS = HOST_OPCODES | CONTROL_FLOW | {"copy"}


def heron_kernels(module: Module) -> HeronKernels:
    """Kernels heron's executable launches for ``module`` (statically: a loop body's
    once) and heron's peak memory for it."""
    prepared, _ = prepare_module(module, Target.preset(TARGET))
    return kernels_of(prepared)


def kernels_of(prepared: Module, assignment: BufferAssignment | None = None) -> HeronKernels:
    """:func:`heron_kernels` of a module ``prepare_module`` gave (``assignment``: its
    buffer assignment at the kernel ABI's alignment, when already made)."""
    computations = sequential_computations(prepared)
    instructions = [i for c in computations for i in c.instructions]
    # a library call (a convolution, an attention or its backward pass) is one launch
    # (cuDNN's), as XLA's kConvolution and fMHA thunks count; so is any other custom call
    # (jax's cuSOLVER calls: a custom-call thunk of their own, XLA's kCustomCall)
    launches = [i for i in instructions if i.opcode in ("fusion", "custom-call")]
    refused = [
        i.opcode
        for i in instructions
        if i.opcode not in RUN_OUTSIDE_FUSIONS | {"fusion", "custom-call"}
    ]
    if refused:
        return HeronKernels(None, refused[0])
    count = len(launches)
    if assignment is None:
        assignment = assign_buffers(prepared, alignment=BUFFER_ALIGNMENT)
    return HeronKernels(count, peak_bytes=assignment.total_bytes)


@attrs.frozen
class Row:
    name: str
    heron: HeronKernels
    xla_kernels: int
    xla_total_bytes: int
    xla_triton: bool
    xla_fusion_kinds: dict[str, int]
    #: XLA's thunks that launch no kernel of its own: copies, library calls, loops.
    xla_other_thunks: dict[str, int]


def program_names(corpus: Path = HERE) -> list[str]:
    """The programs of the corpus folder ``corpus`` (programs/ or models/), in index order."""
    index = json.loads((corpus / "index.json").read_text())
    return [entry["name"] for entry in index["programs"]]


def xla_kernels(xla: dict) -> int:
    """XLA:GPU's launches from a program's ``xla_gpu.json``: its kernels, and one per
    thunk of a library's or a custom kernel's work (:data:`LIBRARY_THUNKS`)."""
    return xla["kernel_count"] + sum(
        n for kind, n in xla["thunk_kinds"].items() if kind in LIBRARY_THUNKS
    )


def rows(corpus: Path = HERE, names: list[str] | None = None) -> list[Row]:
    result = []
    for name in names or program_names(corpus):
        folder = corpus / name
        xla = json.loads((folder / "xla_gpu.json").read_text())
        result.append(
            Row(
                name,
                heron_kernels(parse_module_file(folder / "module.hlo")),
                xla_kernels(xla),
                xla["buffers"]["total_bytes"],
                xla["triton"],
                xla["fusion_kinds"],
                {k: n for k, n in xla["thunk_kinds"].items() if k not in KERNEL_THUNKS},
            )
        )
    return result


@attrs.frozen
class Summary:
    programs: int
    runnable: int
    heron_kernels: int
    xla_kernels_of_runnable: int
    xla_kernels: int
    at_most_xla: int
    triton: int
    refused: dict[str, int]


def summarize(table: list[Row]) -> Summary:
    runnable = [r for r in table if r.heron.count is not None]
    refused: dict[str, int] = {}
    for r in table:
        if r.heron.refused is not None:
            refused[r.heron.refused] = refused.get(r.heron.refused, 0) + 1
    return Summary(
        programs=len(table),
        runnable=len(runnable),
        heron_kernels=sum(r.heron.count or 0 for r in runnable),
        xla_kernels_of_runnable=sum(r.xla_kernels for r in runnable),
        xla_kernels=sum(r.xla_kernels for r in table),
        at_most_xla=sum(1 for r in runnable if (r.heron.count or 0) <= r.xla_kernels),
        triton=sum(1 for r in table if r.xla_triton),
        refused=dict(sorted(refused.items())),
    )


def markdown(table: list[Row]) -> str:
    lines = [
        "| program | heron kernels | XLA:GPU kernels | heron bytes | XLA:GPU bytes"
        " | XLA fusion kinds | Triton | XLA's other thunks |",
        "|---|---:|---:|---:|---:|---|---|---|",
    ]
    for r in table:
        kinds = ", ".join(f"{k} {n}" for k, n in r.xla_fusion_kinds.items()) or "-"
        other = ", ".join(f"{k} {n}" for k, n in r.xla_other_thunks.items()) or "-"
        triton = "yes" if r.xla_triton else "no"
        peak = "-" if r.heron.peak_bytes is None else f"{r.heron.peak_bytes:,}"
        lines.append(
            f"| {r.name} | {r.heron} | {r.xla_kernels} | {peak} | {r.xla_total_bytes:,}"
            f" | {kinds} | {triton} | {other} |"
        )
    s = summarize(table)
    refused = ", ".join(f"{op} {n}" for op, n in s.refused.items()) or "none"
    ratio = s.heron_kernels / s.xla_kernels_of_runnable if s.xla_kernels_of_runnable else 0.0
    lines += [
        "",
        f"{s.programs} programs; heron runs {s.runnable} of them, launching {s.heron_kernels}"
        f" kernels where XLA:GPU launches {s.xla_kernels_of_runnable} ({ratio:.2f}x);"
        f" {s.at_most_xla} of them with no more kernels than XLA."
        f" Refused ({s.programs - s.runnable}): {refused}."
        f" XLA:GPU launches {s.xla_kernels} kernels for all {s.programs};"
        f" it uses Triton in {s.triton}.",
    ]
    return "\n".join(lines)


#: The lines of docs/programs.md (docs/models.md) between which ``--update`` writes the
#: table: BEGIN's prefix, then the command that writes it.
BEGIN, END = "<!-- table: python programs/table.py", "<!-- end of table -->"


def update(document: Path, table: str) -> None:
    """Replace what lies between the BEGIN line and END in ``document`` with ``table``."""
    text = document.read_text()
    start, end = text.find(BEGIN), text.find(END)
    if start >= 0:
        start = text.index("\n", start)
    if start < 0 or end < start:
        raise SystemExit(f"{document}: no '{BEGIN}' ... '{END}' lines to put the table between")
    document.write_text(text[: start + 1] + table + "\n" + text[end:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--update", metavar="FILE.md", help="write the table into FILE.md")
    parser.add_argument(
        "--corpus", type=Path, default=HERE, help="the corpus folder (default programs/)"
    )
    args = parser.parse_args(argv)
    table = markdown(rows(args.corpus))
    if args.update:
        update(Path(args.update), table)
    else:
        print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
