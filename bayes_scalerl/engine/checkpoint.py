"""Resumable batched fits: finished chunks on disk, with a fingerprint of their inputs.

A checkpoint folder holds

- ``manifest.json``: hashes of everything the draws depend on (the padded data, the
  priors, the sampler settings, the seed, the chunk size, the package versions), by
  part, plus a readable copy of the settings;
- ``chunk-000000.npz``, ...: the draws of each finished chunk, written to a temporary
  file in the same folder and moved into place with :func:`os.replace`, so a chunk file
  is either complete or absent, whenever the process is killed.

A fit started again with the same inputs loads the finished chunks and samples only the
others. A folder whose manifest does not match is **refused** (:class:`CheckpointMismatch`,
naming the parts that changed), never overwritten: delete it or pick another folder.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from ..data.files import atomic_file

__all__ = ["ChunkStore", "CheckpointMismatch"]

_FORMAT = 1


class CheckpointMismatch(ValueError):
    """The checkpoint folder holds chunks of a fit with different inputs."""


def _atomic_write(path: Path, write) -> None:
    """Write ``path`` through a temporary file in its folder and :func:`os.replace` (umask honoured)."""
    with atomic_file(path) as tmp, open(tmp, "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())


class ChunkStore:
    """Finished chunks of one fit in a folder (see the module docstring).

    Build it with :meth:`open`.
    """

    def __init__(self, path: Path, manifest: dict):
        self.path = Path(path)
        self.manifest = manifest

    @classmethod
    def open(cls, path: str | os.PathLike, manifest: dict) -> ChunkStore:
        """Open (or create) the folder for a fit described by ``manifest``.

        ``manifest["parts"]`` maps part names to hashes. A new folder gets the manifest;
        an existing one must hold the same hashes.

        Raises
        ------
        CheckpointMismatch
            If the folder holds a manifest with other hashes.
        """
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        for stale in path.glob(".chunk-*.tmp"):  # left by a process killed while writing
            stale.unlink(missing_ok=True)
        file = path / "manifest.json"
        manifest = {"format": _FORMAT, **manifest}
        if file.exists():
            try:
                old = json.loads(file.read_text())
            except (OSError, ValueError) as exc:
                raise CheckpointMismatch(f"{file}: unreadable manifest ({exc}).") from exc
            changed = sorted(
                k
                for k in set(manifest["parts"]) | set(old.get("parts", {}))
                if manifest["parts"].get(k) != old.get("parts", {}).get(k)
            )
            if old.get("format") != _FORMAT:
                changed = ["format", *changed]
            if changed:
                raise CheckpointMismatch(
                    f"{path}: this checkpoint folder holds chunks of a different fit "
                    f"({', '.join(changed)} changed); its chunks cannot be reused. Delete the folder "
                    "or choose another one to start over."
                )
            return cls(path, old)
        _atomic_write(file, lambda f: f.write(json.dumps(manifest, indent=1, default=str).encode()))
        return cls(path, manifest)

    def file(self, index: int) -> Path:
        """Path of chunk ``index``'s draws."""
        return self.path / f"chunk-{index:06d}.npz"

    def has(self, index: int) -> bool:
        """Whether chunk ``index`` is finished."""
        return self.file(index).exists()

    def done(self) -> list[int]:
        """Indices of the finished chunks."""
        return sorted(int(p.stem.split("-")[1]) for p in self.path.glob("chunk-*.npz"))

    def save(self, index: int, arrays: dict[str, np.ndarray]) -> None:
        """Write chunk ``index``'s draws atomically."""
        _atomic_write(self.file(index), lambda f: np.savez(f, **arrays))

    def load(self, index: int, *, n_runs: int | None = None) -> dict[str, np.ndarray]:
        """Read chunk ``index``'s draws (checking it holds ``n_runs`` runs)."""
        file = self.file(index)
        try:
            with np.load(file) as z:
                arrays = {k: z[k] for k in z.files}
        except Exception as exc:
            raise CheckpointMismatch(f"{file}: unreadable chunk file ({exc}); delete it to redo it.") from exc
        if n_runs is not None and any(len(v) != n_runs for v in arrays.values()):
            raise CheckpointMismatch(f"{file}: expected {n_runs} runs; delete it to redo the chunk.")
        return arrays
