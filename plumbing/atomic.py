"""Atomic file writes: a reader sees the old file or the whole new one, never a half-written file.

The new content goes to a temporary file in the destination's folder (the same file system, so the rename
is atomic), optionally flushed to disk, then ``os.replace``\\ d over the destination; on any error the
temporary file is removed and the destination is left as it was.

``tempfile.mkstemp`` creates files 0600 and ``mkdtemp`` folders 0700, private to their owner, and so do
writers that save through a temporary file of their own (safetensors 0.8); the rename keeps that mode, so an
exported model, its run.json or a checkpoint would be unreadable by a colleague sharing the folder. Before
the rename each file here is given the mode an ordinary ``open()`` gives, 0666 minus the process umask
(0644 under the usual umask 022), and each folder 0777 minus the umask.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

_UMASK_LOCK = threading.Lock()


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary file name next to ``path`` for a writer that takes a name (``safetensors.torch.save_model``);
    when the ``with`` block ends without error the file, with an ordinary file's mode, replaces ``path``.

    ``path``'s folder is created if missing. On an exception inside the block the temporary file is deleted,
    ``path`` is untouched and the exception propagates.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        os.chmod(tmp, 0o666 & ~umask())  # mkstemp's (or the writer's own) 0600 -> what open() would give
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextmanager
def atomic_open(path: str | Path, binary: bool = False, fsync: bool = False,
                encoding: str | None = "utf-8") -> Iterator[IO]:
    """A file object whose content replaces ``path`` atomically when the ``with`` block ends without error.

    Args:
        path: the destination (see :func:`atomic_path`).
        binary: open in ``"wb"`` mode (``torch.save``, ``np.savez``); otherwise text with ``encoding``.
        fsync: flush the file to disk before the rename (a checkpoint survives a power cut).
    """
    with atomic_path(path) as tmp, open(tmp, "wb" if binary else "w", encoding=None if binary else encoding) as f:
        yield f
        if fsync:
            f.flush()
            os.fsync(f.fileno())


def write_text_atomic(path: str | Path, text: str, fsync: bool = False) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically; returns ``path`` as a Path."""
    with atomic_open(path, fsync=fsync) as f:
        f.write(text)
    return Path(path)


def write_json_atomic(path: str | Path, data: Any, fsync: bool = False) -> Path:
    """Write ``data`` as indented JSON (a final newline) to ``path`` atomically."""
    return write_text_atomic(path, json.dumps(data, indent=2) + "\n", fsync=fsync)


def write_folder_atomic(root: str | Path, fill: Callable[[Path], None], is_complete: Callable[[Path], bool]) -> Path:
    """Create folder ``root`` whole or not at all: ``fill(tmp)`` writes it into a temporary sibling, which then
    replaces ``root`` (an outdated ``root`` is moved aside first and removed). If the rename fails because a
    concurrent writer just put a folder there, that folder is kept when ``is_complete(root)`` says it is whole.
    """
    root = Path(root)
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_folder(root.parent, f".{root.name}.tmp-")  # an ordinary folder's mode, not mkdtemp's 0700
    stale = root.with_name(f"{tmp.name}.stale")
    try:
        fill(tmp)
        if root.exists():  # an outdated folder: moved aside so that the rename below can happen
            os.replace(root, stale)
        try:
            os.replace(tmp, root)
        except OSError:
            if not is_complete(root):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(stale, ignore_errors=True)
    return root


def temporary_folder(parent: str | Path, prefix: str) -> Path:
    """A new empty folder ``parent/<prefix><random>`` with an ordinary folder's mode (0777 minus the umask, not
    ``mkdtemp``'s 0700), to fill and then rename into place with ``os.replace``."""
    tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    tmp.chmod(0o777 & ~umask())
    return tmp


def umask() -> int:
    """The process umask. Linux reports it in ``/proc/self/status``; elsewhere the only way to read it is to set
    it, so it is set (briefly to 0o077, the safe side for a file another thread creates meanwhile) and put back,
    under a lock."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _UMASK_LOCK:
        mask = os.umask(0o077)
        os.umask(mask)
    return mask
