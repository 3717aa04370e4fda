"""PTX assembled in process by nvJitLink is what the ptxas executable makes of it.

heron assembles cubins with nvJitLink where it loads (no process to start: a
program's compile is 6-7 ms shorter), so these tests hold it to the executable
compiling as nvJitLink does, relocatably (``ptxas -c``): the same machine code
per kernel (label numbers aside), errors in ptxas's words naming the module,
and the executable still used where ``HERON_PTXAS`` asks for it or nvJitLink
is missing.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from heron.runtime.cuda import compiler_tools, nvjitlink_assembler
from heron.runtime.cuda.compiler import compile_to_ptx
from heron.target import ptx_isa_version

_KERNELS = Path(__file__).resolve().parents[3] / "tests" / "data" / "mlir"

pytestmark = pytest.mark.skipif(
    nvjitlink_assembler.unavailable_reason() is not None,
    reason=f"nvJitLink is not here: {nvjitlink_assembler.unavailable_reason()}",
)


def _ptx(name: str, arch: str = "sm_90") -> str:
    source = (_KERNELS / f"{name}.mlir").read_text()
    return compile_to_ptx(source, arch, ptx_version=ptx_isa_version(arch)).ptx


def _sass_by_kernel(cubin: bytes, tmp_path: Path) -> dict[str, list[str]]:
    """Each kernel's SASS instructions, addresses dropped and labels numbered from 0 per
    kernel (the one thing that differs between the two assemblers)."""
    path = tmp_path / "image.cubin"
    path.write_bytes(cubin)
    text = subprocess.run(
        [str(compiler_tools.find_nvdisasm()), "-c", str(path)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    kernels: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        section = re.match(r"\s*\.text\.(\S+):", line)
        if section:
            current = kernels.setdefault(section.group(1), [])
            continue
        instruction = re.match(r"\s*/\*[0-9a-f]{4}\*/\s+(.*?)\s*$", line)
        if current is not None and instruction:
            current.append(instruction.group(1))
    for name, instructions in kernels.items():
        labels: dict[str, str] = {}

        def renumber(match: re.Match, labels: dict[str, str] = labels) -> str:
            return labels.setdefault(match.group(0), f".L_{len(labels)}")

        kernels[name] = [re.sub(r"\.L_x_\d+", renumber, i) for i in instructions]
    return kernels


def _by_executable(
    modules: dict[str, str], arch: str, tmp_path: Path, relocatable: bool = True
) -> bytes:
    """The ptxas executable's cubin of ``modules``; ``relocatable`` (``-c``) as nvJitLink
    compiles (it links afterwards), else whole-program, as heron's compile did before."""
    sources = []
    for name, ptx in modules.items():
        (tmp_path / f"{name}.ptx").write_text(ptx)
        sources.append(str(tmp_path / f"{name}.ptx"))
    output = tmp_path / "executable.cubin"
    subprocess.run(
        [
            str(compiler_tools.find_ptxas()),
            *(["-c"] if relocatable else []),
            *("--gpu-name", arch, "-O3", "-o", str(output)),
            *sources,
        ],
        check=True,
    )
    return output.read_bytes()


def test_the_assembler_in_use_is_nvjitlink(monkeypatch):
    monkeypatch.delenv("HERON_PTXAS", raising=False)
    assert compiler_tools.cubin_assembler().startswith("nvJitLink ")


def test_several_kernels_get_the_executables_machine_code(tmp_path, monkeypatch):
    monkeypatch.delenv("HERON_PTXAS", raising=False)
    modules = {name: _ptx(name) for name in ("vector_add", "tanh_vec4")}
    in_process = compiler_tools.assemble_cubins(modules, "sm_90")
    assert in_process[:4] == b"\x7fELF"
    ours = _sass_by_kernel(in_process, tmp_path)
    theirs = _sass_by_kernel(_by_executable(modules, "sm_90", tmp_path), tmp_path)
    assert sorted(ours) == ["tanh_vec4", "vector_add"]
    assert ours == theirs
    assert len(ours["tanh_vec4"]) > 50  # a real body, libdevice's tanh inlined


def test_rejected_ptx_is_quoted_naming_its_module(monkeypatch):
    monkeypatch.delenv("HERON_PTXAS", raising=False)
    good = _ptx("vector_add")
    bad = _ptx("tanh_vec4").replace(".entry tanh_vec4(", ".entry tanh_vec4(\n.bogus", 1)
    with pytest.raises(compiler_tools.PtxasError, match="ptxas rejected the PTX for sm_90") as info:
        compiler_tools.assemble_cubins({"vector_add": good, "tanh_vec4": bad}, "sm_90")
    message = str(info.value)
    assert re.search(r"ptxas tanh_vec4\.ptx, line \d+; (fatal|error)", message)
    assert "vector_add.ptx" not in message
    assert info.value.ptxas_output in message


def test_heron_ptxas_chooses_the_executable(monkeypatch):
    ptxas = compiler_tools.find_ptxas()
    monkeypatch.setenv("HERON_PTXAS", str(ptxas))
    assert compiler_tools.cubin_assembler() == f"ptxas ({ptxas})"
    cubin = compiler_tools.assemble_cubin(_ptx("vector_add"), "sm_90")
    assert b"nvJIT API" not in cubin  # the in-process image names its producer so
    monkeypatch.delenv("HERON_PTXAS")
    assert b"nvJIT API" in compiler_tools.assemble_cubin(_ptx("vector_add"), "sm_90")


def test_without_nvjitlink_the_executable_assembles(monkeypatch):
    monkeypatch.delenv("HERON_PTXAS", raising=False)
    monkeypatch.setattr(nvjitlink_assembler, "unavailable_reason", lambda: "not here")
    assert compiler_tools.cubin_assembler().startswith("ptxas (")
    cubin = compiler_tools.assemble_cubin(_ptx("vector_add"), "sm_90")
    assert cubin[:4] == b"\x7fELF" and b"nvJIT API" not in cubin


def test_a_programs_kernels_are_one_input_when_they_can_be():
    """nvJitLink sets ptxas up once per input (4-5 ms each): kernels that can share a
    PTX module are given as one."""
    vector_add, tanh_vec4 = _ptx("vector_add"), _ptx("tanh_vec4")
    together = nvjitlink_assembler.combined({"a": vector_add, "b": tanh_vec4})
    assert together is not None
    assert together.count(".version ") == 1 and together.count(".target sm_90") == 1
    assert ".entry vector_add(" in together and ".entry tanh_vec4(" in together


def test_modules_that_cannot_share_one_stay_apart():
    vector_add = _ptx("vector_add")
    assert nvjitlink_assembler.combined({"a": vector_add, "b": vector_add}) is None  # one name
    older = _ptx("tanh_vec4", "sm_80")
    assert nvjitlink_assembler.combined({"a": vector_add, "b": older}) is None  # two targets
    table = ".global .align 4 .b8 table[4] = {1, 2, 3, 4};\n"
    with_table = _ptx("tanh_vec4") + table
    assert nvjitlink_assembler.combined({"a": vector_add + table, "b": with_table}) is None
    # Declared twice, they are still assembled, each module an input of its own.
    cubin = compiler_tools.assemble_cubins({"a": vector_add + table, "b": with_table}, "sm_90")
    assert b"vector_add" in cubin and b"tanh_vec4" in cubin


def test_with_neither_assembler_the_error_names_both(monkeypatch):
    def missing():
        raise compiler_tools.ToolNotFoundError("ptxas not found")

    monkeypatch.delenv("HERON_PTXAS", raising=False)
    monkeypatch.setattr(nvjitlink_assembler, "unavailable_reason", lambda: "no libnvJitLink")
    monkeypatch.setattr(compiler_tools, "find_ptxas", missing)
    with pytest.raises(compiler_tools.ToolNotFoundError, match="ptxas not found; nvJitLink"):
        compiler_tools.cubin_assembler()
