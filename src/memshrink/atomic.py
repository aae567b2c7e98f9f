"""Atomic output files: write to a hidden temp file in the target folder, then rename.

A killed or interrupted save leaves the previous output (or nothing) in place, never a
half-written model. SIGTERM is turned into an exception while a save is running so the
temp files are removed, and both signals are held back during the final renames.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

from memshrink.errors import ModelSaveError

_DISK_FULL = {errno.ENOSPC, errno.EFBIG, errno.EDQUOT}


class SaveInterrupted(ModelSaveError):
    """A signal arrived while saving; temp files were removed. Exits 128 + the signal number,
    as shells report a process ended by that signal (130 for SIGINT, 143 for SIGTERM)."""

    def __init__(self, message: str, signum: int = signal.SIGINT) -> None:
        super().__init__(message)
        self.exit_code = 128 + int(signum)


def temp_path_for(final: Path) -> Path:
    return final.with_name(f".{final.name}.tmp-{os.getpid()}-{threading.get_ident() % 100000}")


def is_disk_full(exc: BaseException) -> bool:
    """Out of space, over a quota or over the file-size limit (``ulimit -f``)."""
    return isinstance(exc, OSError) and exc.errno in _DISK_FULL


@contextlib.contextmanager
def disk_full_in(folder: str | os.PathLike, what: str) -> Iterator[None]:
    """Turn a full disk while writing into ``folder`` into one line, exit 7.

    Why: ``verify`` and ``profile`` write their feeds, specs and the children's results into
    a temp folder; a full ``TMPDIR`` printed "internal error: OSError: [Errno 28]" (exit 1)
    (QA session 15). ``what`` says whose files they are."""
    try:
        yield
    except OSError as exc:
        if not is_disk_full(exc):
            raise
        raise ModelSaveError(
            f"out of disk space (or file size limit) in {folder} while writing {what}; free "
            "space there or set TMPDIR to a folder with room"
        ) from exc


def describe_os_error(exc: OSError, path: Path) -> ModelSaveError:
    if exc.errno in _DISK_FULL:
        return ModelSaveError(f"out of disk space (or file size limit) while writing {path}")
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return ModelSaveError(f"cannot write to {path.parent}: permission denied")
    if exc.errno == errno.ENOENT:
        return ModelSaveError(f"output folder {path.parent} does not exist")
    return ModelSaveError(f"cannot write {path}: {exc.strerror or exc}")


@contextlib.contextmanager
def sigterm_as_exception(
    make: Callable[[int], BaseException] | None = None,
) -> Iterator[None]:
    """Turn SIGTERM into an exception (main thread only) so cleanup code runs: by default
    SaveInterrupted; ``make(signum)`` builds another (``verify`` stops its children)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        if make is not None:
            raise make(signum)
        raise SaveInterrupted(
            f"interrupted by signal {signal.Signals(signum).name}; nothing written", signum
        )

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def signals_blocked() -> Iterator[None]:
    """Hold SIGINT/SIGTERM back while files are renamed into place; one that came is raised
    again at the end, to the handler that was in place before.

    Why Python-level handlers, not only ``pthread_sigmask``: the mask is per thread, and a
    Ctrl-C is sent to the process, so the kernel hands it to any thread that does not block
    it (OpenBLAS's, ONNX Runtime's): Python then raised KeyboardInterrupt in the main thread
    between the renames (QA session 11). Python runs its handlers in the main thread only."""
    sigs = (signal.SIGINT, signal.SIGTERM)
    if threading.current_thread() is not threading.main_thread():
        old = signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
        try:
            yield
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
        return
    pending: list[int] = []

    def hold(signum: int, frame: object) -> None:
        pending.append(signum)

    previous = {s: signal.signal(s, hold) for s in sigs}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if pending:
            signal.raise_signal(pending[0])


def fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_quietly(*paths: Path | None) -> None:
    for p in paths:
        if p is not None:
            with contextlib.suppress(FileNotFoundError):
                os.remove(p)


def write_atomic(path: str | os.PathLike, write: Callable[[IO[bytes]], object]) -> None:
    """Write a report file (JSON, PNG) through a temp file in its folder, then rename.

    Why: a report written in place on a full disk or under a file-size limit stayed behind
    truncated (newcomer audit, docs/reliability.md); now the old file, or nothing, stays. An
    ``OSError`` becomes a ``ModelSaveError`` (exit 7) that says what could not be written.
    """
    final = Path(path)
    tmp = temp_path_for(final)
    try:
        with open(tmp, "wb") as f:
            write(f)
        os.replace(tmp, final)
    except OSError as exc:
        raise describe_os_error(exc, final) from exc
    finally:
        remove_quietly(tmp)
