"""Output files: one writer at a time, written atomically, nothing left behind.

:func:`exclusive` holds an output's lock, ``.NAME.lock`` next to it, for as long as a run
needs (the command line holds it from before reading its input to after writing): an
``fcntl.flock`` on that file, which the kernel drops with the process, so a killed run
leaves no lock that blocks the next one, whatever the file holds (an old PID, nothing). A
second writer of the same output, in another process or another thread of this one, is
refused at once with a :class:`~packing.errors.DatasetError` naming the output.

:func:`atomic_path` gives a temporary file of a unique name (process, thread, random) next to
the target, renamed onto it only once complete. A failure, Ctrl-C, SIGTERM or SIGHUP
leaves the old output as it was, no temporary file and no lock file; temporary files of
writers that were killed (SIGKILL) are removed by the next writer.

>>> import os, tempfile
>>> target = os.path.join(tempfile.mkdtemp(), "out.txt")
>>> with exclusive(target):
...     with atomic_path(target) as temporary:  # the same thread may nest
...         _ = temporary.write_text("done")
>>> open(target).read(), sorted(os.listdir(os.path.dirname(target)))
('done', ['out.txt'])
"""

from __future__ import annotations

import errno
import fcntl
import glob
import os
import secrets
import signal
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

from packing.errors import DatasetError

PathType = str | os.PathLike[str]

_UNWOUND_SIGNALS = ("SIGTERM", "SIGHUP", "SIGINT")
_ATTEMPTS = 8
_HOLDERS: dict[str, tuple[int, int]] = {}
"""Locks this process holds: lock file -> (thread holding it, depth of nested ``exclusive`` blocks)."""
_HOLDERS_GUARD = threading.Lock()


class _Stopped(BaseException):
    """SIGTERM or SIGHUP while an output is held: unwinds like Ctrl-C so the temporary and lock files go."""


# ---------------------------------------------------------------- signals


@contextmanager
def _signals_unwind() -> Iterator[None]:
    """While held (main thread only), SIGTERM and SIGHUP raise instead of killing the process at once, and end
    it with exit code 128 + the signal once the ``with`` blocks inside have cleaned up; Ctrl-C stays a
    ``KeyboardInterrupt``. A second signal during that clean-up is ignored. Handlers someone else set, or
    SIG_IGN (as under ``nohup``), are left alone. O(1).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    stopping = False

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        if stopping:
            return
        stopping = True
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise _Stopped(signum)

    previous = {}
    for name in _UNWOUND_SIGNALS:
        number = getattr(signal, name, None)
        if number is None:  # pragma: no cover - no SIGHUP on some systems
            continue
        default = signal.default_int_handler if number == signal.SIGINT else signal.SIG_DFL
        if signal.getsignal(number) is default:
            previous[number] = signal.signal(number, stop)
    try:
        yield
    except _Stopped as stopped:
        raise SystemExit(128 + stopped.args[0]) from None
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


# ---------------------------------------------------------------- the lock


def lock_path(path: PathType) -> Path:
    """The lock file of an output: ``.NAME.lock`` in the same folder.

    >>> lock_path("runs/blocks.parquet").as_posix()
    'runs/.blocks.parquet.lock'
    """
    target = Path(path)
    return target.with_name(f".{target.name}.lock")


def _busy(target: Path, who: str) -> DatasetError:
    """The refusal of a second writer."""
    return DatasetError(os.fspath(target), None, f"{who} is writing this file; wait for it")


def _owner(descriptor: int) -> str:
    """Who holds a lock, from the process id its holder wrote in the file (it may not have yet)."""
    text = os.pread(descriptor, 20, 0).decode("ascii", "replace").strip()
    if not text.isdigit() or int(text) <= 0:
        return "another run"
    if int(text) == os.getpid():
        return "another writer in this process"
    return f"another run (process {int(text)})"


def _is_current(descriptor: int, lock: Path) -> bool:
    """Whether ``descriptor`` is still the file at ``lock`` (not removed or replaced by the writer before)."""
    try:
        return os.path.samestat(os.fstat(descriptor), os.stat(lock, follow_symlinks=False))
    except FileNotFoundError:
        return False


def _open_lock(lock: Path, target: Path) -> int:
    """The lock file, created if missing; never through a symbolic link, never anything but a regular file.

    An ``OSError`` (a missing folder, no permission) names the output, not its lock file.
    """
    try:
        descriptor = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise DatasetError(os.fspath(target), None, f"its lock file {lock.name} is a symbolic link") from None
        raise type(error)(error.errno, error.strerror, os.fspath(target)) from None  # named by the output
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        os.close(descriptor)
        raise DatasetError(os.fspath(target), None, f"its lock file {lock.name} is not a regular file")
    return descriptor


def _acquire(lock: Path, target: Path) -> int:
    """Lock ``lock`` (non-blocking ``flock``) and write this process's id in it; a held lock is refused. O(1).

    A lock file the writer before removed (it does so while still holding it) is tried again under its new
    inode, so two writers never each hold a different file of the same name.
    """
    for _ in range(_ATTEMPTS):
        descriptor = _open_lock(lock, target)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            who = _owner(descriptor)
            os.close(descriptor)
            raise _busy(target, who) from None
        except BaseException:
            os.close(descriptor)
            raise
        try:
            if _is_current(descriptor, lock):
                os.ftruncate(descriptor, 0)
                os.pwrite(descriptor, str(os.getpid()).encode(), 0)
                return descriptor
        except BaseException:
            _release(lock, descriptor)
            raise
        os.close(descriptor)
    raise _busy(target, "another run")  # pragma: no cover - a race lost eight times


def _release(lock: Path, descriptor: int) -> None:
    """Remove the lock file while still holding it, then let go of it."""
    try:
        if _is_current(descriptor, lock):
            lock.unlink(missing_ok=True)
    finally:
        os.close(descriptor)


def _enter(key: str, target: Path) -> bool:
    """Count this thread in as holder of ``key``; True when it held it already (a nested block)."""
    me = threading.get_ident()
    with _HOLDERS_GUARD:
        holder, depth = _HOLDERS.get(key, (me, 0))
        if holder != me:
            raise _busy(target, "another thread of this process")
        _HOLDERS[key] = (me, depth + 1)
    return depth > 0


def _leave(key: str) -> None:
    """Count this thread out of ``key``."""
    with _HOLDERS_GUARD:
        holder, depth = _HOLDERS[key]
        if depth > 1:
            _HOLDERS[key] = (holder, depth - 1)
        else:
            del _HOLDERS[key]


def _remove_stale_temporaries(target: Path) -> None:
    """Temporary files of ``target`` left by killed writers (none can be alive: this one holds the lock). O(files
    in the folder)."""
    for stale in target.parent.glob(f".{glob.escape(target.name)}.*.tmp"):
        try:
            if stale.is_file() or stale.is_symlink():
                stale.unlink(missing_ok=True)
        except OSError:  # pragma: no cover - not ours to remove
            pass


@contextmanager
def exclusive(path: PathType) -> Iterator[None]:
    """Be the only writer of ``path`` for the block: its lock is taken or a :class:`DatasetError` raised at once.

    The same thread may nest blocks for one path; another thread or process is refused. In the main thread,
    SIGTERM and SIGHUP unwind the block (exit code 128 + the signal) so nothing is left behind. The lock file
    is removed on the way out. O(1) plus the removal of stale temporary files.
    """
    target = Path(path)
    lock = lock_path(target)
    key = os.path.join(os.path.realpath(lock.parent), lock.name)
    nested = _enter(key, target)
    try:
        if nested:
            yield
            return
        with _signals_unwind():
            descriptor = _acquire(lock, target)
            try:
                _remove_stale_temporaries(target)
                yield
            finally:
                try:
                    _remove_stale_temporaries(target)  # one a signal cut off between its creation and its ``try``
                finally:
                    _release(lock, descriptor)
    finally:
        _leave(key)


# ---------------------------------------------------------------- atomic writes


def _new_temporary(target: Path) -> Path:
    """A new empty file next to ``target``, ``.NAME.PID.THREAD.RANDOM.tmp``, created exclusively (like
    ``tempfile.mkstemp``, but with the permissions the umask gives, as the output will have)."""
    while True:
        name = f".{target.name}.{os.getpid()}.{threading.get_ident()}.{secrets.token_hex(4)}.tmp"
        candidate = target.with_name(name)
        try:
            os.close(os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666))
        except FileExistsError:  # pragma: no cover - 32 random bits taken
            continue
        return candidate


@contextmanager
def atomic_path(path: PathType) -> Iterator[Path]:
    """A temporary path next to ``path``, renamed onto it when the block succeeds, removed otherwise.

    Held under :func:`exclusive`: a second writer of the same path is refused while this one runs.
    Ctrl-C, SIGTERM and SIGHUP included, the old file stays as it was and no temporary file is left. O(1).
    """
    target = Path(path)
    with exclusive(target):
        temporary = _new_temporary(target)
        try:
            yield temporary
            os.replace(temporary, target)
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise
