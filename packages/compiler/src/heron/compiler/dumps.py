"""Writing every compilation stage of a fusion to a directory (``--dump-dir``).

Files are named ``<fusion>.<NN>.<stage>.<ext>``: ``NN`` counts the stages of
that fusion from 00 (``emitted``), so a directory listing reads in pipeline
order; the extension says what the text is (MLIR, LLVM IR, PTX, AMDGPU
assembly).
"""

from __future__ import annotations

from pathlib import Path

from heron.partitioner import function_name

__all__ = ["DumpWriter", "stage_file_name"]

_EXTENSIONS = {
    "llvm-ir": "ll",
    "llvm-ir-optimised": "ll",
    "ptx": "ptx",
    "amdgcn-asm": "s",
}


def stage_file_name(fusion: str, number: int, stage: str) -> str:
    """``<fusion>.<NN>.<stage>.<ext>`` with the fusion name made a safe file name."""
    extension = _EXTENSIONS.get(stage, "mlir")
    return f"{function_name(fusion)}.{number:02d}.{stage}.{extension}"


class DumpWriter:
    """A ``dump(stage, text)`` callback writing one fusion's stages into ``directory``."""

    def __init__(self, directory: Path | str, fusion: str) -> None:
        self.directory = Path(directory)
        self.fusion = fusion
        self.count = 0
        self.written: list[Path] = []
        self.directory.mkdir(parents=True, exist_ok=True)

    def __call__(self, stage: str, text: str) -> None:
        path = self.directory / stage_file_name(self.fusion, self.count, stage)
        path.write_text(text)
        self.written.append(path)
        self.count += 1
