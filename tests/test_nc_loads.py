"""Read-only inputs reach LLVM as ``noalias readonly``: ``ld.global.nc`` wherever XLA has it.

Every corpus file is compiled for an H100 (``heron.emitters.kernel_arguments``,
docs/emitters.md "Kernel arguments: noalias, readonly"). For each kernel:

- the ``gpu.func`` of the lower-tensors stage carries the attributes the
  kernel ABI gives (``EmittedKernel.arguments`` and ``output_aliases``, a path
  independent of the ``heron.in_place_of`` marks the pipeline reads): every
  parameter ``noalias readonly``, every output ``noalias``, an in-place output
  and its parameter neither;
- no ``readonly`` argument is written by the lowered kernel (stores, atomics,
  through views and calls: ``written_arguments``); the interpreter runs this
  MLIR and never sees the attributes, so this is what catches a wrong one;
- the LLVM IR's ``define`` has them, and the PTX loads through the read-only
  data cache (``ld.global.nc``) in every file where XLA's does
  (tests/data/xla_reference.json).

In-place DUS and scatter files are also compiled for an MI300X (ROCDL), whose
LLVM IR must keep the pairs without ``noalias``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from mlir import ir

from heron.emitters import kernel_arguments as ka

ROOT = Path(__file__).resolve().parent.parent
TABLE = ROOT / "tests" / "data" / "xla_reference.json"
IN_PLACE_FILES = [
    "common/dynamic_update_slice/mof.hlo",
    "common/dynamic_update_slice/int4.hlo",
    "gpu/scatter/add.hlo",
    "gpu/scatter/variadic_scatter_argmax.hlo",
]


def _xla_has_nc_loads(relative: str) -> bool:
    entry = json.loads(TABLE.read_text())["files"].get(relative)
    return bool(entry) and any((p["xla"] or {}).get("nc_loads") for p in entry["kernels"])


def _compile(path: Path, target_name: str) -> list[tuple[object, dict[str, str]]]:
    from heron.compiler import Target, compile_fusion, fusions_of
    from heron.hlo.parser import parse_module_file

    target = Target.preset(target_name)
    compiled = []
    for fusion in fusions_of(parse_module_file(path)):
        stages: dict[str, str] = {}
        compiled.append((compile_fusion(fusion, target, dump=stages.__setitem__), stages))
    return compiled


def _expected(kernel) -> list[tuple[bool, bool]]:
    """(noalias, readonly) per argument, from the kernel's ABI record."""
    n_params = sum(1 for a in kernel.arguments if not a.is_output)
    outputs = {k for k, a in enumerate(kernel.arguments) if a.is_output}
    pairs = {n_params + out: param for out, param in kernel.output_aliases.items()}
    return ka.argument_attributes(len(kernel.arguments), outputs, pairs)


def _gpu_func(module: ir.Module) -> tuple[ir.Operation, ir.Operation]:
    gpu_module = next(
        op.operation for op in module.body.operations if op.operation.name == "gpu.module"
    )
    kernel = next(
        op.operation
        for op in gpu_module.regions[0].blocks[0].operations
        if op.operation.name == "gpu.func"
    )
    return gpu_module, kernel


def _actual(kernel: ir.Operation) -> list[tuple[bool, bool]]:
    result = []
    for entry in ir.ArrayAttr(kernel.attributes["arg_attrs"]):
        names = {ir.DictAttr(entry)[i].name for i in range(len(ir.DictAttr(entry)))}
        result.append((ka.LLVM_NOALIAS in names, ka.LLVM_READONLY in names))
    return result


def _define_arguments(llvm_ir: str, name: str, convention: str) -> list[str]:
    (arguments,) = re.findall(
        rf"^define {convention} void @{re.escape(name)}\((.*)\)", llvm_ir, re.MULTILINE
    )
    return arguments.split(", ")


def test_kernel_arguments_follow_the_abi_and_load_through_the_read_only_cache(
    corpus_file, corpus_dir
):
    relative = corpus_file.relative_to(corpus_dir).as_posix()
    ptx_files_with_nc = 0
    for kernel, stages in _compile(corpus_file, "h100"):
        expected = _expected(kernel)
        with kernel.module.context:
            gpu_module, function = _gpu_func(kernel.module)
            assert _actual(function) == expected, f"{kernel.fusion_name}: argument attributes"
            written = ka.written_arguments(gpu_module, function)
        for k, (_, readonly) in enumerate(expected):
            assert not (readonly and k in written), (
                f"{kernel.fusion_name}: readonly argument {k} is written ({written[k]})"
            )
        defined = _define_arguments(stages["llvm-ir"], kernel.kernel_name, "ptx_kernel")
        assert [("noalias" in a, "readonly" in a) for a in defined] == expected
        assert all("align 16" in a for a in defined)
        ptx_files_with_nc += "ld.global.nc" in stages["ptx"]
    if _xla_has_nc_loads(relative):
        assert ptx_files_with_nc, f"{relative}: XLA loads through ld.global.nc, heron does not"


@pytest.mark.parametrize("relative", IN_PLACE_FILES)
def test_in_place_pairs_are_neither_noalias_nor_readonly_on_both_backends(relative, corpus_dir):
    for target, convention in (("h100", "ptx_kernel"), ("mi300x", "amdgpu_kernel")):
        for kernel, stages in _compile(corpus_dir / relative, target):
            assert kernel.output_aliases, f"{relative}: not an in-place kernel"
            n_params = sum(1 for a in kernel.arguments if not a.is_output)
            defined = _define_arguments(stages["llvm-ir"], kernel.kernel_name, convention)
            for out, param in kernel.output_aliases.items():
                for k in (param, n_params + out):
                    assert "noalias" not in defined[k] and "readonly" not in defined[k], (
                        f"{relative} ({target}): argument {k}: {defined[k]}"
                    )
            others = [
                a
                for k, a in enumerate(defined[:n_params])
                if k not in set(kernel.output_aliases.values())
            ]
            assert others and all("noalias readonly" in a for a in others), (relative, target)
