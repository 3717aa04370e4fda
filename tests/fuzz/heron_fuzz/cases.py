"""What a fuzz case is: files to write, heron commands to run on them.

A case is pure data (JSON-serialisable) so that the parent process can hand it
to a worker subprocess, save it beside a finding, and replay it later without
re-deriving it from the seed.
"""

from __future__ import annotations

import base64
import random
from dataclasses import dataclass, field

#: The kinds of case, in the round-robin order the runner draws them.
KINDS = ("mutation", "generated", "npz")

#: Where each command runs: the two compile targets of the issue, the interpreter.
CUDA_TARGET = "h100"
ROCM_TARGET = "mi300x"


@dataclass
class Case:
    """One fuzz case.

    ``files`` maps a file name (relative to the case's directory) to its bytes;
    ``commands`` are heron argument lists in which ``{dir}`` stands for that
    directory. ``origin`` says how the case was made (corpus file and mutation,
    generator choices, npz damage), which is what a reader of a finding needs first.
    """

    kind: str
    seed: int
    index: int
    origin: str
    files: dict[str, bytes]
    commands: list[list[str]] = field(default_factory=list)

    @property
    def name(self) -> str:
        """A file-system-safe identifier, unique per (seed, index)."""
        return f"{self.kind}-s{self.seed}-{self.index}"

    def to_json(self) -> dict:
        return {
            "kind": self.kind,
            "seed": self.seed,
            "index": self.index,
            "origin": self.origin,
            "files": {k: base64.b64encode(v).decode("ascii") for k, v in self.files.items()},
            "commands": self.commands,
        }

    @classmethod
    def from_json(cls, data: dict) -> Case:
        return cls(
            kind=data["kind"],
            seed=data["seed"],
            index=data["index"],
            origin=data["origin"],
            files={k: base64.b64decode(v) for k, v in data["files"].items()},
            commands=data["commands"],
        )


def case_rng(seed: int, index: int, kind: str) -> random.Random:
    """The generator of one case: a function of (seed, index, kind) alone.

    A string seed is hashed with SHA-512 by ``random.Random``, so this is stable
    across processes and Python runs (unlike ``hash()``): case N of seed S is
    the same case whether it runs alone (replay) or inside a 10,000-case run.
    """
    return random.Random(f"heron-fuzz:{seed}:{index}:{kind}")


def hlo_commands(hlo: str = "{dir}/case.hlo", run: bool = True) -> list[list[str]]:
    """The commands every HLO case runs: parse, compile for CUDA and ROCm, check, run."""
    commands = [
        ["parse", hlo],
        ["compile", hlo, "--target", CUDA_TARGET, "-o", "{dir}/out-cuda/"],
        ["compile", hlo, "--target", ROCM_TARGET, "-o", "{dir}/out-rocm/"],
        ["check", hlo, "--backend", "interpreter", "--seed", "0"],
    ]
    if run:
        commands.append(["run", hlo, "--backend", "interpreter", "--seed", "0", "--check"])
    return commands
