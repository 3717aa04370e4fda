"""Sub-byte integers (s2/s4/u2/u4) on the ROCm backend: compiled, never an LLVM abort.

Fuzz finding generated-s1-97 (tests/fuzz/reproducers/rocm_s4_reduce_then_add_sigabrt.hlo)
and its relatives: an s4 reduction followed by an elementwise op aborted the
process (SIGABRT) in LLVM's AMDGPU instruction selection, SelectionDAG's
"Invalid truncate node, src < dst!". LLVM's loop vectorizer turned heron's
scalar ``trunc i8 to i4`` and ``i4`` arithmetic into ``trunc <N x i8> to
<N x i4>``, which the AMDGPU type legaliser cannot lower; the backend now
optimises such a module again without the vectorizers
(``heron.runtime.rocm.compiler.llvm_ir_to_object``).

Every compile runs in a subprocess: a regression aborts that process, not pytest's.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("llvmlite.binding")
pytest.importorskip("mlir.ir")

from heron.runtime.rocm.compiler import sub_byte_vector_truncates  # noqa: E402

REPRODUCER = (
    Path(__file__).resolve().parent / "fuzz" / "reproducers" / "rocm_s4_reduce_then_add_sigabrt.hlo"
)

# A reduction of p0 with `reducer`, then `op` with p1 (the shape of the fuzz findings).
_TEMPLATE = """HloModule {name}

combine {{
  a = {t}[] parameter(0)
  b = {t}[] parameter(1)
  ROOT r = {t}[] {reducer}(a, b)
}}

fused {{
  p0 = {t}[{shape}]{{{layout}}} parameter(0)
  p1 = {t}[{out}]{{{out_layout}}} parameter(1)
  zero = {t}[] constant(0)
  r = {t}[{out}]{{{out_layout}}} reduce(p0, zero), dimensions={{{dims}}}, to_apply=combine
  ROOT n = {t}[{out}]{{{out_layout}}} {op}(r, p1)
}}

ENTRY main {{
  p0 = {t}[{shape}]{{{layout}}} parameter(0)
  p1 = {t}[{out}]{{{out_layout}}} parameter(1)
  ROOT f = {t}[{out}]{{{out_layout}}} fusion(p0, p1), kind=kInput, calls=fused
}}
"""

# (element type, reducer, op after the reduction, input shape, reduced dims)
VARIANTS = [
    ("s2", "add", "add", "64", "0"),
    ("u4", "add", "add", "64", "0"),
    ("u2", "add", "add", "1024", "0"),
    ("s4", "add", "maximum", "64", "0"),
    ("s4", "maximum", "maximum", "64", "0"),
    ("u4", "maximum", "maximum", "64", "0"),
    ("s4", "minimum", "subtract", "64", "0"),
    ("s4", "add", "add", "8,64", "1"),  # row reduction s4[8,64] -> s4[8], then add
    ("s4", "maximum", "add", "8,64", "1"),
    ("s2", "add", "add", "4,1024", "1"),
    ("u4", "add", "add", "64,8", "0"),  # column reduction
]


def _hlo(t: str, reducer: str, op: str, shape: str, dims: str) -> str:
    rank = shape.count(",") + 1
    layout = ",".join(str(d) for d in reversed(range(rank)))
    sizes = shape.split(",")
    kept = [s for i, s in enumerate(sizes) if str(i) not in dims.split(",")]
    out_layout = ",".join(str(d) for d in reversed(range(len(kept))))
    name = f"{t}_{reducer}_{op}_{shape.replace(',', 'x')}"
    return _TEMPLATE.format(
        name=name,
        t=t,
        reducer=reducer,
        op=op,
        shape=shape,
        layout=layout,
        out=",".join(kept),
        out_layout=out_layout,
        dims=dims,
    )


def _heron(*args: str) -> subprocess.CompletedProcess:
    code = "import sys; from heron.cli.main import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300
    )


def _compile(hlo: Path, target: str, out: Path, *extra: str) -> None:
    result = _heron("compile", str(hlo), "--target", target, "-o", f"{out}/", *extra)
    assert result.returncode == 0, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr
    assert any(out.iterdir()), "no device code written"


@pytest.mark.parametrize("target", ["mi300x", "h100"])
def test_the_fuzz_reproducer_compiles(tmp_path: Path, target: str) -> None:
    _compile(REPRODUCER, target, tmp_path / "out")


def test_no_sub_byte_vector_reaches_the_amdgpu_code_generator(tmp_path: Path) -> None:
    dumps = tmp_path / "dump"
    _compile(REPRODUCER, "mi300x", tmp_path / "out", "--dump-dir", str(dumps))
    (optimised,) = dumps.glob("*llvm-ir-optimised*")
    text = optimised.read_text()
    assert " i4 " in text  # still s4 arithmetic, only scalar
    assert sub_byte_vector_truncates(text) == []


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: "-".join(v).replace(",", "x"))
def test_sub_byte_reduction_then_elementwise_compiles_for_mi300x(
    tmp_path: Path, variant: tuple[str, ...]
) -> None:
    hlo = tmp_path / "case.hlo"
    hlo.write_text(_hlo(*variant))
    _compile(hlo, "mi300x", tmp_path / "out")


# A scalar i4 sum of 64 bytes' low nibbles (the loop vectorizer's candidate), and
# LLVM IR that already holds a <4 x i4> vector (which must be refused, not aborted on).
_SCALAR_I4_LOOP = """
define amdgpu_kernel void @k(ptr addrspace(1) %in, ptr addrspace(1) %out) {
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %next, %loop ]
  %acc = phi i4 [ 0, %entry ], [ %sum, %loop ]
  %p = getelementptr inbounds i8, ptr addrspace(1) %in, i64 %i
  %byte = load i8, ptr addrspace(1) %p, align 1
  %nibble = trunc i8 %byte to i4
  %sum = add i4 %acc, %nibble
  %next = add i64 %i, 1
  %done = icmp eq i64 %next, 64
  br i1 %done, label %exit, label %loop
exit:
  %wide = zext i4 %sum to i8
  store i8 %wide, ptr addrspace(1) %out, align 1
  ret void
}
"""

_VECTOR_I4 = """
define amdgpu_kernel void @k(ptr addrspace(1) %out, ptr addrspace(1) %in) {
  %a = load <4 x i8>, ptr addrspace(1) %in, align 4
  %p = getelementptr i8, ptr addrspace(1) %in, i64 4
  %b = load <4 x i8>, ptr addrspace(1) %p, align 4
  %x = trunc <4 x i8> %a to <4 x i4>
  %y = trunc <4 x i8> %b to <4 x i4>
  %s = add <4 x i4> %x, %y
  %z = sext <4 x i4> %s to <4 x i8>
  store <4 x i8> %z, ptr addrspace(1) %out, align 4
  ret void
}
"""

_TO_OBJECT = """
import sys
from heron.hlo.errors import UnsupportedError
from heron.runtime.rocm.compiler import llvm_ir_to_object
try:
    obj = llvm_ir_to_object(sys.stdin.read(), ("k",), "gfx942")
except UnsupportedError as exc:
    print("refused:", exc)
else:
    print("object:", len(obj))
"""


def _to_object(llvm_ir: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", _TO_OBJECT],
        input=llvm_ir,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, (result.returncode, result.stderr[-2000:])
    return result.stdout


def test_a_scalar_i4_reduction_loop_becomes_an_object() -> None:
    assert _to_object(_SCALAR_I4_LOOP).startswith("object:")


def test_sub_byte_vectors_in_the_input_are_refused_not_aborted_on() -> None:
    out = _to_object(_VECTOR_I4)
    assert out.startswith("refused:") and "<4 x i4>" in out, out


def test_sub_byte_vector_truncates() -> None:
    assert sub_byte_vector_truncates("%t = trunc <4 x i8> %v to <4 x i4>") == ["<4 x i4>"]
    text = (
        "%a = trunc <2 x i32> %x to <2 x i2>\n%b = trunc <vscale x 8 x i8> %y to <vscale x 8 x i7>"
    )
    assert sub_byte_vector_truncates(text) == ["<2 x i2>", "<vscale x 8 x i7>"]
    # i1 masks, byte-sized or wider elements, scalar truncates, and sub-byte vectors that
    # are only loaded and taken apart (O3's form of heron's packed s2 loads) are fine.
    assert sub_byte_vector_truncates("%m = trunc <4 x i8> %v to <4 x i1>") == []
    assert sub_byte_vector_truncates("%m = trunc <4 x i32> %v to <4 x i8>") == []
    assert sub_byte_vector_truncates("%s = trunc i8 %v to i4") == []
    loads = "%9 = load <16 x i2>, ptr addrspace(1) %8\n%10 = extractelement <16 x i2> %9, i64 0"
    assert sub_byte_vector_truncates(loads) == []


def test_packed_s2_loads_still_compile_for_mi300x(corpus_dir: Path, tmp_path: Path) -> None:
    """The corpus's s8 -> s2 loop: O3 loads `<16 x i2>` and extracts its elements, which
    the AMDGPU code generator handles; only truncates to sub-byte vectors are refused."""
    _compile(corpus_dir / "common" / "loop" / "s8_to_s2.hlo", "mi300x", tmp_path / "out")


def test_idempotent_sub_word_atomics_become_atomic_loads() -> None:
    from heron.runtime.rocm.compiler import idempotent_sub_word_atomics_as_loads as rewrite

    text = '%5 = atomicrmw or ptr addrspace(1) %3, i8 0 syncscope("agent") acq_rel, align 1'
    assert (
        rewrite(text)
        == '%5 = load atomic i8, ptr addrspace(1) %3 syncscope("agent") acquire, align 1'
    )
    assert rewrite("%a = atomicrmw and ptr %p, i16 -1 seq_cst, align 2") == (
        "%a = load atomic i16, ptr %p seq_cst, align 2"
    )
    # Atomics that change memory, and 32-bit ones (which AMDGPU selects), stay.
    for kept in (
        "%a = atomicrmw or ptr addrspace(1) %p, i8 5 acq_rel, align 1",
        "%a = atomicrmw and ptr addrspace(1) %p, i8 -16 acq_rel, align 1",
        "%a = atomicrmw or ptr addrspace(1) %p, i32 0 acq_rel, align 4",
        "%a = atomicrmw or ptr addrspace(1) %p, i8 %v acq_rel, align 1",
    ):
        assert rewrite(kept) == kept


@pytest.mark.parametrize("atomic", ["or:0", "and:-1", "add:0", "xor:0", "or:5", "and:-16"])
def test_byte_atomics_compile_for_amdgpu_whatever_their_operand(atomic: str) -> None:
    """Fuzz finding generated-s1-3058: `atomicrmw or ptr, i8 0` aborted AMDGPU's
    instruction selection ("Cannot select: AtomicLoadAdd")."""
    op, value = atomic.split(":")
    llvm_ir = f"""
define amdgpu_kernel void @k(ptr addrspace(1) %p) {{
  %r = atomicrmw {op} ptr addrspace(1) %p, i8 {value} syncscope("agent") acq_rel, align 1
  ret void
}}
"""
    assert _to_object(llvm_ir).startswith("object:")
