"""A heron tree's benchmarking process: the A/B scripts' one side.

``compile_ab.py`` and ``pass_ab.py`` compare two source trees under the same load by
running each in a process of its own and taking turns: each side is a Python process
whose ``PYTHONPATH`` is its tree's packages, running a small program that reads one
request a line on its standard input and answers one line.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

__all__ = ["Side"]


class Side:
    """One tree's process running ``code`` (which prints ``ready`` once warm, then
    answers each request line with one line)."""

    def __init__(self, tree: Path, code: str, script: str) -> None:
        sources = sorted(str(p) for p in (tree / "packages").glob("*/src"))
        if not sources:
            raise SystemExit(f"{script}: {tree} holds no packages/*/src: not a heron checkout")
        environment = dict(os.environ, PYTHONPATH=os.pathsep.join(sources))
        self._script = script
        self.process = subprocess.Popen(
            [sys.executable, "-c", code],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=environment,
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        self._stdin, self._stdout = self.process.stdin, self.process.stdout
        if self._stdout.readline().strip() != "ready":
            raise SystemExit(f"{script}: the process for {tree} did not start")

    def ask(self, request: str) -> str:
        """The answer to one request line."""
        self._stdin.write(f"{request}\n")
        self._stdin.flush()
        answer = self._stdout.readline()
        if not answer:
            raise SystemExit(f"{self._script}: {request!r} ended its process")
        return answer.strip()

    def close(self) -> None:
        self._stdin.close()
        self.process.wait()
