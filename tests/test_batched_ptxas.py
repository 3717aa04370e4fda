"""A program's CUDA kernels are assembled in groups, one ptxas (nvJitLink) run and one
cubin each, each kernel's machine code as alone (the ``cubin`` stage batched,
``heron.runtime.core.hookspecs.Stage.batched``).

Setting ptxas up costs several times what assembling a fusion's kernel takes, so a
program's compile runs it once per group of kernels; the groups halve towards the
program's end (``heron.compiler.driver.tapered_group_sizes``), so that what is left
after the last kernel's LLVM is one kernel's assembly.
"""

from __future__ import annotations

import re
import subprocess
import zipfile
from pathlib import Path

import pytest

from heron.compiler import Target
from heron.compiler.executable import compile_program
from heron.hlo.parser import parse_module

PROGRAM = Path(__file__).resolve().parents[1] / "programs" / "adam_step" / "module.hlo"


def _tools():
    from heron.runtime.cuda.compiler_tools import ToolNotFoundError, find_nvdisasm, find_ptxas

    try:
        return find_ptxas(), find_nvdisasm()
    except ToolNotFoundError as exc:
        pytest.skip(str(exc))


def _sass_by_kernel(cubin: bytes, nvdisasm: Path, tmp_path: Path) -> dict[str, list[str]]:
    """Each kernel's instructions, labels renamed (nvdisasm numbers them across the file)."""
    path = tmp_path / "k.cubin"
    path.write_bytes(cubin)
    text = subprocess.run([str(nvdisasm), "-c", str(path)], capture_output=True, text=True).stdout
    kernels: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        section = re.match(r"\s*\.section\s+\.text\.(\S+?),", line)
        if section:
            current = kernels.setdefault(section.group(1), [])
        elif current is not None and re.search(r"/\*[0-9a-f]{4,}\*/", line):
            current.append(" ".join(re.sub(r"\.L_x_\d+", "L", line).split()))
    return kernels


def test_a_program_s_kernels_share_a_cubin_per_group_with_each_kernel_as_alone(tmp_path):
    from heron.compiler.driver import tapered_group_sizes
    from heron.runtime.cuda.compiler_tools import assemble_cubin

    _, nvdisasm = _tools()
    compiled = compile_program(
        parse_module(PROGRAM.read_text()), Target.preset("h100"), ("cuda", "interpreter")
    )
    kernels = [emitted.compiled["cuda"] for emitted in compiled.program.kernels]
    assert len(kernels) >= 3 and all(k.image.format == "cubin" for k in kernels)
    # adam_step's four launches (XLA's four) run three kernels (the two bias updates
    # are one body): two of them in one cubin, the third alone.
    sizes = tapered_group_sizes(len(kernels))
    assert sum(sizes) == len(kernels) and max(sizes) >= 2
    groups, start = [], 0
    for size in sizes:
        groups.append(kernels[start : start + size])
        start += size
    for group in groups:
        assert len({kernel.image.data for kernel in group}) == 1
        shared = _sass_by_kernel(group[0].image.data, nvdisasm, tmp_path)
        assert set(shared) == {kernel.kernel_name for kernel in group}
        for kernel in group:
            (ptx,) = [a.data.decode() for a in kernel.artefacts if a.stage == "ptx"]
            alone = _sass_by_kernel(assemble_cubin(ptx, "sm_90"), nvdisasm, tmp_path)
            assert alone[kernel.kernel_name] == shared[kernel.kernel_name], kernel.kernel_name
    # The artefact stores each group's cubin once; every kernel loads its own name from it.
    path = tmp_path / "adam.heron"
    compiled.artefact.save(path)
    cubins = [n for n in zipfile.ZipFile(path).namelist() if n.endswith(".cubin")]
    assert len(cubins) == len(sizes)


def test_a_ptxas_error_still_names_its_kernel(tmp_path):
    """ptxas quotes the file it refuses, named after its kernel (and a program's compile
    then assembles that group kernel by kernel: packages/compiler/tests/test_driver.py)."""
    from heron.runtime.cuda.compiler_tools import PtxasError, assemble_cubins

    _tools()
    good = ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry good() { ret; }\n"
    bad = ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry bad() { nonsense; }\n"
    with pytest.raises(PtxasError, match="bad.ptx"):
        assemble_cubins({"good": good, "bad": bad}, "sm_90")
    with pytest.raises(ValueError, match="no PTX module"):
        assemble_cubins({}, "sm_90")
