"""heron.jax's compile cache on disk: one verified artefact file per compiled program.

The key is the sha256 of everything the executable depends on: the HLO text
jax printed, the Target's name and fields, the backends whose kernel images it
holds, and heron itself: its version and a fingerprint of the source of every
heron module installed (:func:`heron_fingerprint`), so that a heron whose code
changed compiles again even where its version did not (an editable checkout,
a fix released under the same number). A cached file is an
ordinary artefact (docs/runtime.md): loading it verifies it (its manifest, the
sha256 of every member), so a damaged or foreign file in the cache is not
run; it is compiled again and replaced.

The folder is ``HERON_CACHE_DIR`` when set, else ``~/.cache/heron/jax``
(``$XDG_CACHE_HOME`` honoured); ``cache_dir=False`` turns the disk cache off.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from heron.compiler.fingerprint import heron_fingerprint, source_fingerprint
from heron.runtime.core.artefact import Artefact, ArtefactError

__all__ = [
    "DiskCache",
    "cache_key",
    "default_cache_dir",
    "heron_fingerprint",
    "source_fingerprint",
]

CACHE_ENV = "HERON_CACHE_DIR"


def default_cache_dir() -> Path:
    """Where compiled programs are kept (see the module docstring)."""
    explicit = os.environ.get(CACHE_ENV, "").strip()
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or str(Path.home() / ".cache")
    return Path(base) / "heron" / "jax"


def cache_key(
    hlo_text: str,
    target: object,
    backends: tuple[str, ...],
    version: str,
    *,
    deterministic: bool = False,
    gemm_library: str | None = None,
) -> str:
    """The sha256 (hex) naming one compiled program (see the module docstring).
    ``gemm_library``: the device's GEMM library, which decides whether heron's kernels
    beside the GEMM calls are compiled."""
    description = json.dumps(
        {
            "hlo": hlo_text,
            "target": repr(target),
            "backends": list(backends),
            "heron": version,
            # Only when set: keys of programs compiled before the option stay valid.
            **({"deterministic": True} if deterministic else {}),
            **({"gemm_library": gemm_library} if gemm_library else {}),
        },
        sort_keys=True,
    )
    return hashlib.sha256(description.encode()).hexdigest()


class DiskCache:
    """Artefact files in one folder, by key; reads verify, writes are atomic."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)

    def path(self, key: str) -> Path:
        return self.folder / f"{key}.heron"

    def get(self, key: str) -> Artefact | None:
        """The cached artefact, or None when absent or when it does not verify."""
        path = self.path(key)
        if not path.is_file():
            return None
        try:
            return Artefact.load(path)
        except ArtefactError:
            return None

    def put(self, key: str, artefact: Artefact) -> Path:
        """Keep ``artefact`` under ``key`` (``Artefact.save`` writes atomically)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.path(key)
        artefact.save(path)
        return path
