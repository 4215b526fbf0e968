"""Output files: one writer at a time, written atomically, nothing left behind.

:func:`exclusive` holds an output's lock, ``.NAME.lock`` next to it, for as long as a run
needs (the command line holds it from before reading its input to after writing): a
``filelock.FileLock`` (the operating system's lock on that file, which it drops with the
process, so a killed run leaves no lock that blocks the next one, whatever the file holds;
a marker file where the system has no such lock). A second writer of the same output, in
another process or another thread of this one, is refused at once with a
:class:`~packing.errors.DatasetError` naming the output.

:func:`atomic_path` gives a temporary file of a unique name (process, thread, random) next to
the target, moved onto it (``os.replace``) only once complete. A failure or Ctrl-C leaves the old
output as it was, no temporary file and no lock file; temporary files of writers that were
killed are removed by the next writer. Nothing here touches the process's signal handlers: the
command line alone turns SIGTERM and SIGHUP into the same clean exit (``packing._cli``).

>>> import os, tempfile
>>> target = os.path.join(tempfile.mkdtemp(), "out.txt")
>>> with exclusive(target):
...     with atomic_path(target) as temporary:  # the same thread may nest
...         _ = temporary.write_text("done")
>>> open(target).read(), sorted(os.listdir(os.path.dirname(target)))
('done', ['out.txt'])

Internal: the public names are in ``packing`` and ``packing.layouts``.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import os
import secrets
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import filelock

from packing.errors import DatasetError

PathType = str | os.PathLike[str]

_ATTEMPTS = 8
_HOLDERS: dict[str, tuple[int, int]] = {}
"""Locks this process holds: lock file -> (thread holding it, depth of nested ``exclusive`` blocks)."""
_HOLDERS_GUARD = threading.Lock()
_NATIVE = not issubclass(filelock.FileLock, filelock.SoftFileLock)
"""Whether the system locks files (``flock``, Windows' locks); else filelock keeps a marker file."""


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


def _owner(lock: Path) -> str:
    """Who holds a lock, from the process id its holder wrote first in the file (it may not have yet)."""
    text = ""
    with contextlib.suppress(OSError):  # gone, or not readable while held: nobody named
        descriptor = os.open(lock, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
        try:
            text = os.read(descriptor, 64).decode("ascii", "replace")
        finally:
            os.close(descriptor)
    first = text.split()[0] if text.split() else ""
    if not first.isdigit() or int(first) <= 0:
        return "another run"
    if int(first) == os.getpid():
        return "another writer in this process"
    return f"another run (process {int(first)})"


def _is_current(descriptor: int, lock: Path) -> bool:
    """Whether ``descriptor`` is still the file at ``lock`` (not removed or replaced)."""
    try:
        return os.path.samestat(os.fstat(descriptor), os.stat(lock, follow_symlinks=False))
    except OSError:
        return False


class _Lock:
    """One held lock: filelock's, and (with a system lock) the descriptor it holds, to write this process's id
    in the file and to remove the file while still holding it."""

    def __init__(self, lock: Path, target: Path) -> None:
        self.lock, self.target = lock, target
        self.descriptor: int | None = None
        mark = self._mark if _NATIVE else None  # a marker file holds filelock's own record
        self.held = filelock.FileLock(lock, timeout=0, on_acquired=mark)

    def _mark(self, descriptor: int) -> None:
        """Refuse a lock file that is not a regular file; write this process's id in it. O(1)."""
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise DatasetError(os.fspath(self.target), None, f"its lock file {self.lock.name} is not a regular file")
        os.ftruncate(descriptor, 0)
        os.lseek(descriptor, 0, os.SEEK_SET)
        os.write(descriptor, str(os.getpid()).encode())
        self.descriptor = descriptor

    def acquire(self) -> bool:
        """Take the lock at once (True), or find it held (False). An ``OSError`` names the output."""
        try:
            self.held.acquire()
        except filelock.Timeout:
            return False
        except DatasetError:
            raise
        except OSError as error:
            if error.errno == errno.ELOOP:
                reason = f"its lock file {self.lock.name} is a symbolic link"
                raise DatasetError(os.fspath(self.target), None, reason) from None
            raise type(error)(error.errno, error.strerror, os.fspath(self.target)) from None
        return True

    def release(self) -> None:
        """Remove the lock file while still holding it (where the system allows), then let go of it."""
        try:
            if self.descriptor is not None and _is_current(self.descriptor, self.lock):
                with contextlib.suppress(OSError):  # Windows removes no open file: filelock's release does
                    self.lock.unlink()
        finally:
            self.descriptor = None
            self.held.release()


def _acquire(lock: Path, target: Path) -> _Lock:
    """The lock of ``target``, taken at once; a held lock is refused naming its holder. A lock file its
    holder removed just as this tried is tried again. A missing folder is a ``FileNotFoundError`` naming the output
    (filelock would create it). O(1)."""
    if not lock.parent.is_dir():
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), os.fspath(target))
    for _ in range(_ATTEMPTS):
        held = _Lock(lock, target)
        if held.acquire():
            return held
        if os.path.lexists(lock):
            raise _busy(target, _owner(lock))
    raise _busy(target, "another run")  # pragma: no cover - a race lost eight times


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

    The same thread may nest blocks for one path; another thread or process is refused. The lock file is removed
    on the way out; signal handlers are left as they are. O(1) plus the removal of stale temporary files.
    """
    target = Path(path)
    lock = lock_path(target)
    key = os.path.join(os.path.realpath(lock.parent), lock.name)
    nested = _enter(key, target)
    try:
        if nested:
            yield
            return
        held = _acquire(lock, target)
        try:
            _remove_stale_temporaries(target)
            yield
        finally:
            try:
                _remove_stale_temporaries(target)  # one an interruption cut off between its creation and its ``try``
            finally:
                held.release()
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
            os.close(os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666))
        except FileExistsError:  # pragma: no cover - 32 random bits taken
            continue
        return candidate


@contextmanager
def atomic_path(path: PathType) -> Iterator[Path]:
    """A temporary path next to ``path``, renamed onto it when the block succeeds, removed otherwise.

    Held under :func:`exclusive`: a second writer of the same path is refused while this one runs.
    On any failure, Ctrl-C included, the old file stays as it was and no temporary file is left. O(1).
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
