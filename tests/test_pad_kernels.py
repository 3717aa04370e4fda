"""Pads with interior and negative padding: the kernel writes the padding value in the gaps.

The program corpus's pad_interior_negative (``1_-1_1x-2_2_0``) read the operand
in the gaps between interior-padded rows: the pad lowering checked the map's
``(d0 - 1) mod 2 in [0, 0]`` constraint with an apply_indexing that carried
that same constraint, and simplify-indexing folded the check to true.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from heron.compiler import Target
from heron.harness import CheckOptions, check_file

PADDINGS = [
    "1_-1_1x-2_2_0",
    "0_0_2x0_0_0",
    "-1_2_1x1_-1_3",
    "2_2_2x-1_-1_1",
    "-3_0_1x0_0_0",
]


@pytest.mark.parametrize("padding", PADDINGS)
@pytest.mark.parametrize("target", ["h100", "mi300x"])
def test_pad_agrees_with_the_evaluator(tmp_path: Path, padding: str, target: str) -> None:
    dims = []
    for size, spec in zip((6, 6), padding.split("x"), strict=True):
        low, high, interior = (int(v) for v in spec.split("_"))
        dims.append(low + high + size + (size - 1) * interior)
    path = tmp_path / "pad.hlo"
    path.write_text(
        "HloModule m\nENTRY main {\n  x = f32[6,6] parameter(0)\n  c = f32[] constant(-1)\n"
        f"  ROOT p = f32[{dims[0]},{dims[1]}] pad(x, c), padding={padding}\n}}\n"
    )
    report = check_file(path, CheckOptions(target=Target.preset(target)))
    assert report.ok, report.text()
