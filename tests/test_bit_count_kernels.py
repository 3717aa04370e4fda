"""popcnt and count-leading-zeros compile for both backends and agree with the evaluator.

Both were refused by expand-math ("no approximation is written") on every type
until the program corpus's uint8_bit_ops met them: NVVM's math conversion sends
math.ctpop/ctlz to libdevice, so expand-math now lowers them to LLVM's bit-count
intrinsics, single instructions on both backends (popc/clz on NVPTX).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from heron.compiler import Target, compile_fusion, fusions_of
from heron.harness import CheckOptions, check_file
from heron.hlo import parse_module

MODULE = """
HloModule bit_counts
ENTRY main {{
  p = {t}[256] parameter(0)
  c = {t}[256] popcnt(p)
  z = {t}[256] count-leading-zeros(p)
  ROOT r = ({t}[256], {t}[256]) tuple(c, z)
}}
"""

TYPES = ["s8", "u8", "s16", "u16", "s32", "u32", "s64", "u64"]


@pytest.mark.parametrize("element", TYPES)
@pytest.mark.parametrize("target", ["h100", "mi300x"])
def test_bit_counts_agree_with_the_evaluator(tmp_path: Path, element: str, target: str) -> None:
    path = tmp_path / f"bits_{element}.hlo"
    path.write_text(MODULE.format(t=element))
    report = check_file(path, CheckOptions(target=Target.preset(target)))
    assert report.ok, report


@pytest.mark.parametrize("element", ["u8", "s32", "u64"])
def test_bit_counts_are_instructions_not_library_calls(element: str) -> None:
    module = parse_module(MODULE.format(t=element))
    (fusion,) = fusions_of(module)
    kernel = compile_fusion(fusion, Target.preset("h100"), "cuda")
    ptx = next(a.data.decode() for a in kernel.artefacts if a.extension == "ptx")
    width = "b64" if element.endswith("64") else "b32"
    assert f"popc.{width}" in ptx and f"clz.{width}" in ptx
    assert "__nv_" not in ptx
