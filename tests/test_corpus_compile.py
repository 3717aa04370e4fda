"""Acceptance: every loop-hero file of the XLA corpus compiles for both GPU vendors.

The files are ``common/loop/*.hlo`` and ``gpu/convert/*.hlo`` of the corpus
(the root conftest's ``corpus_dir``; a missing corpus fails the test). Each
fusion is emitted and lowered once per target; the lowered module is then
compiled for two architectures each: PTX that ptxas accepts for sm_80 and
sm_90, and an HSACO (an AMDGPU ELF) for gfx90a and gfx942. A file that fails
shows the compiler's own error (which names the fusion and the op): nothing
is skipped.
"""

from __future__ import annotations

from heron.compiler import compile_backend, fusions_of, lower
from heron.compiler.driver import emit_one
from heron.hlo.parser import parse_module_file

CUDA_ARCHS = ("sm_80", "sm_90")
ROCM_ARCHS = ("gfx90a", "gfx942")
EM_AMDGPU = 224


def test_loop_corpus_has_the_expected_files(loop_hero_folders, corpus_dir):
    names = {p.name for folder in loop_hero_folders for p in (corpus_dir / folder).glob("*.hlo")}
    assert {"vectorize_x4.hlo", "mof_reshapes.hlo", "f4e2m1fn_intrinsics.hlo"} <= names


def test_compiles_to_ptx_accepted_by_ptxas(loop_corpus_file):
    from heron.runtime.cuda.compiler import validate_ptx

    module = parse_module_file(loop_corpus_file)
    for fusion in fusions_of(module):
        kernel = emit_one(fusion)
        lowered = str(lower(kernel, "cuda"))
        for arch in CUDA_ARCHS:
            result = compile_backend(lowered, "cuda", arch, assemble=False, fusion_name=fusion.name)
            assert f".target {arch}" in result.ptx
            assert result.kernel_names == (kernel.name,)
            validate_ptx(result.ptx, arch)  # raises PtxasError with ptxas's message


def test_compiles_to_an_hsaco(loop_corpus_file):
    module = parse_module_file(loop_corpus_file)
    for fusion in fusions_of(module):
        kernel = emit_one(fusion)
        lowered = str(lower(kernel, "rocm"))
        for arch in ROCM_ARCHS:
            result = compile_backend(lowered, "rocm", arch, fusion_name=fusion.name)
            image = result.hsaco
            assert image[:4] == b"\x7fELF"
            assert int.from_bytes(image[18:20], "little") == EM_AMDGPU
            assert result.kernel_names == (kernel.name,)
