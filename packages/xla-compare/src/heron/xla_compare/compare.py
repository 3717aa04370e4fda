"""One module, compiled by XLA:GPU and by heron for the same target, kernel beside kernel.

:func:`compare_file` parses the module with heron, prints it whole for XLA
(:mod:`heron.xla_compare.module_text`), compiles it with XLA in a worker
process and with heron fusion by fusion, measures both PTX with one ptxas
(``ptxas -v``: registers, spills, shared memory) and both cubins with one
nvdisasm (SASS: instructions, slow paths, MUFU, memory widths), and pairs each heron fusion
with the XLA kernel that computes the same instructions (the fused
computations' instruction names, XLA's ``.N`` suffixes aside).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from heron.hlo.ir import Module
from heron.runtime.cuda.ptx_statistics import ptx_target
from heron.xla_compare.heron_side import HeronKernel, compile_with_heron
from heron.xla_compare.install import XlaInstallation, find_xla
from heron.xla_compare.module_text import is_prefused, xla_module_text, xla_options
from heron.xla_compare.targets import TARGETS, target_config
from heron.xla_compare.xla_side import XlaCompile, XlaCompileError, XlaKernel, compile_with_xla

#: What XLA does differently on a machine without a GPU (said with every comparison).
DEVICELESS_NOTE = (
    "XLA compiled deviceless (a target config, no GPU): no autotuning, so dots become Triton"
    " GEMM fusions with default tiles and softmax/layer-norm-like fusions become Triton"
    " fusions; loop, reduction, transpose, concatenate, scatter and dynamic-update-slice"
    " kernels are the ones XLA emits on a real device."
)


@dataclass
class Pair:
    """A heron fusion and the XLA kernel computing the same instructions (either may be None)."""

    heron: HeronKernel | None
    xla: XlaKernel | None

    @property
    def same_launch(self) -> bool | None:
        if self.heron is None or self.xla is None or self.heron.error or self.heron.library:
            return None
        return (self.heron.blocks, self.heron.threads) == (self.xla.blocks, self.xla.threads)


@dataclass
class Comparison:
    file: str
    target: str
    pairs: list[Pair] = field(default_factory=list)
    xla: XlaCompile | None = None
    xla_error: str | None = None
    ptxas: str | None = None
    nvdisasm: str | None = None
    notes: list[str] = field(default_factory=list)


#: A name's tail that says nothing of what it computes: XLA's ``.N`` copies and clones, and
#: the suffixes heron's rewrites give what they make (``Inserter.add``), so that the two
#: halves of a split reduce keep the reduce's name.
_TAIL = re.compile(r"(\.(\d+|split|rest|pad|bitcast|part|results|clone))+$")


def _normal(name: str) -> str:
    return _TAIL.sub("", name)


def _overlap(heron: HeronKernel, xla: XlaKernel) -> int:
    return len({_normal(n) for n in heron.fused_names} & {_normal(n) for n in xla.fused_names})


def _same_name(heron: HeronKernel, xla: XlaKernel) -> bool:
    """Whether the two fusions have the same name (heron names a fusion as XLA does: its
    kind and its root's opcode), ``.N``/``_N`` copies aside."""
    if heron.fusion is None or xla.fusion is None:
        return False
    return _normal(heron.fusion.replace("_", ".")) == _normal(xla.fusion.replace("_", "."))


def pair_kernels(heron: list[HeronKernel], xla: list[XlaKernel]) -> list[Pair]:
    """Each heron fusion with the XLA kernel that computes the same instructions: of the
    kernels sharing fused instruction names with it, one of the same name (the same kind
    and root) first, then the one sharing most names; the closest pairs are made first,
    so that a kernel listed early does not take the partner of a closer match. Then a
    fusion sharing no name with any kernel left pairs with one of its name (a rewrite
    named what it made its own way: heron's select-and-scatter expansion, XLA's), and a
    lone heron fusion with a lone XLA fusion kernel regardless. Heron's fusions in
    their order, then the XLA kernels left over, unpaired."""
    left = [k for k in xla if k.fusion is not None] or list(xla)
    scores = []
    for h, kernel in enumerate(heron):
        for i, x in enumerate(left):
            shared = _overlap(kernel, x)
            if shared:
                scores.append((not _same_name(kernel, x), -shared, h, i))
    partner: dict[int, XlaKernel] = {}
    taken: set[int] = set()
    for _, _, h, i in sorted(scores):
        if h not in partner and i not in taken:
            partner[h] = left[i]
            taken.add(i)
    for h, kernel in enumerate(heron):
        for i, x in enumerate(left):
            if h not in partner and i not in taken and _same_name(kernel, x):
                partner[h] = x
                taken.add(i)
    if not partner and len(heron) == 1 and len(left) == 1:
        partner[0] = left[0]
    pairs = [Pair(kernel, partner.get(h)) for h, kernel in enumerate(heron)]
    paired = {id(p.xla) for p in pairs if p.xla is not None}
    pairs += [Pair(None, k) for k in xla if id(k) not in paired]
    return pairs


def _tool(name: str):
    """The path of ``find_ptxas``/``find_nvdisasm``'s tool, or None where it is not installed."""
    from heron.runtime.cuda import compiler_tools

    try:
        return getattr(compiler_tools, f"find_{name}")()
    except compiler_tools.ToolNotFoundError:
        return None


def _has_kernels(ptx: str) -> bool:
    return ".entry" in ptx


def measure_machine_code(comparison: Comparison) -> None:
    """``ptxas -v`` and nvdisasm on both sides' PTX with one ptxas and one nvdisasm (each
    PTX for its own .target, the target's arch where it names none): registers, spills,
    shared memory, and the SASS each kernel became. PTX without kernels (XLA's constants
    module) is skipped."""
    from heron.runtime.cuda.ptx_statistics import PtxasInfoError, ptxas_resource_usage
    from heron.runtime.cuda.sass_statistics import SassError, ptx_sass_statistics

    ptxas, nvdisasm = _tool("ptxas"), _tool("nvdisasm")
    if ptxas is None:
        comparison.notes.append("ptxas not found: no registers, spills, shared memory or SASS")
        return
    if nvdisasm is None:
        comparison.notes.append(
            "nvdisasm not found (the nvidia-cuda-nvdisasm wheel): no SASS measures"
        )
    comparison.ptxas = str(ptxas)
    comparison.nvdisasm = None if nvdisasm is None else str(nvdisasm)
    _, arch = TARGETS[comparison.target]

    def measure(ptx: str, whose: str) -> tuple[dict, dict]:
        usage, sass = {}, {}
        try:
            usage = ptxas_resource_usage(ptx, ptxas, arch=ptx_target(ptx) or arch)
            if nvdisasm is not None:
                sass = ptx_sass_statistics(ptx, ptxas, nvdisasm, arch=arch)
        except (PtxasInfoError, SassError) as exc:
            comparison.notes.append(f"{whose}: {exc}")
        return usage, sass

    measured = {}
    if comparison.xla is not None:
        for name, text in comparison.xla.ptx.items():
            if _has_kernels(text):
                measured[name] = measure(text, f"XLA's {name}")
    for pair in comparison.pairs:
        if pair.xla is not None and pair.xla.ptx_file in measured:
            usage, sass = measured[pair.xla.ptx_file]
            pair.xla.resources = usage.get(pair.xla.name)
            pair.xla.sass = sass.get(pair.xla.name)
        if pair.heron is not None and pair.heron.ptx:
            usage, sass = measure(pair.heron.ptx, f"heron's {pair.heron.fusion}")
            pair.heron.resources = usage.get(pair.heron.kernel)
            pair.heron.sass = sass.get(pair.heron.kernel)


def compare_file(
    path: str | Path,
    target: str = "h100",
    fusion: str | None = None,
    installation: XlaInstallation | None = None,
    dump_dir: Path | None = None,
    heron_full: bool = True,
) -> Comparison:
    """:func:`compare_module` on the module in ``path`` (parsed and verified by heron)."""
    from heron.hlo.parser import parse_module_file
    from heron.hlo.verifier import verify_module

    module = parse_module_file(Path(path))
    verify_module(module)
    return compare_module(module, str(path), target, fusion, installation, dump_dir, heron_full)


def compare_module(
    module: Module,
    label: str,
    target: str = "h100",
    fusion: str | None = None,
    installation: XlaInstallation | None = None,
    dump_dir: Path | None = None,
    heron_full: bool = True,
) -> Comparison:
    """Compile ``module`` with XLA and with heron for ``target``; pair and measure the kernels.

    XlaNotInstalledError when XLA is not installed (before any work). An XLA
    failure does not raise: ``xla_error`` says it, heron's side is still there.
    ``fusion`` keeps heron's side (and the pairs) to that fusion; XLA compiles
    the whole module. ``heron_full=False`` stops heron after emission (launches only).
    """
    if target not in TARGETS:
        raise ValueError(f"no XLA target spec for {target!r} (known: {', '.join(TARGETS)})")
    installation = installation or find_xla()
    if fusion is not None and is_prefused(module):
        from heron.compiler import selected_fusions

        selected_fusions(module, fusion)  # an unknown name is refused before XLA runs
    comparison = Comparison(label, target, notes=[DEVICELESS_NOTE])
    try:
        comparison.xla = compile_with_xla(
            xla_module_text(module),
            target_config(target),
            installation,
            xla_options(module),
            dump_dir=dump_dir,
        )
    except XlaCompileError as exc:
        comparison.xla_error = str(exc)
    program = not is_prefused(module)
    heron = compile_with_heron(module, target, fusion, full=heron_full, program=program)
    xla_kernels = comparison.xla.kernels if comparison.xla is not None else []
    pairs = pair_kernels(heron, xla_kernels)
    if fusion is not None:
        pairs = [p for p in pairs if p.heron is not None]
    comparison.pairs = pairs
    if heron_full:
        measure_machine_code(comparison)
    if program and comparison.xla is not None:
        names = ", ".join(k.name for k in comparison.xla.kernels) or "none"
        comparison.notes.append(
            "the module has no fusions: both compilers ran their whole pipelines (XLA made"
            f" {names}; its optimized HLO is in --dump-dir), and kernels are paired by the"
            " instructions they compute"
        )
    for pair in pairs:
        if pair.xla is not None and pair.xla.backend_kind and "triton" in pair.xla.backend_kind:
            comparison.notes.append(
                f"XLA kernel {pair.xla.name} is a Triton fusion ({pair.xla.backend_kind}):"
                " with a GPU, autotuning would pick its tiles"
            )
    return comparison
