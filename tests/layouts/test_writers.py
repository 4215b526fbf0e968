"""One writer per output: the lock held for a whole CLI run, in threads too, never stale; nothing left after a
signal; hub tokenizer names failing fast when the hub cannot be reached (issue 24, items 6 and 7)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from packing import pack
from packing._cli import main
from packing.errors import DatasetError
from packing.layouts._export import write_jsonl, write_parquet
from packing.layouts._outputs import exclusive, lock_path

PACK = ["pack", "--max-seq-length", "4", "-q", "--no-shuffle"]

# a CLI run that stops inside its read stage (once the lock is taken) until the file named by argv[2] appears
STALLED_READER = """
import sys, time, pathlib
import packing._cli as cli

real = cli.read_files

def stalled(*args, **kwargs):
    pathlib.Path(sys.argv[1]).write_text("reading")
    go = pathlib.Path(sys.argv[2])
    for _ in range(1200):
        if go.exists():
            break
        time.sleep(0.05)
    return real(*args, **kwargs)

cli.read_files = stalled
sys.exit(cli.main(["pack", sys.argv[3], "--max-seq-length", "4", "-q", "--no-shuffle", "-o", sys.argv[4]]))
"""


def _wait_for(condition: Any, what: str, process: subprocess.Popen[bytes] | None = None) -> None:
    """Poll ``condition`` (up to a minute: a guard against hanging, not a timing check)."""
    for _ in range(1200):
        if condition():
            return
        if process is not None and process.poll() is not None:
            raise AssertionError(f"the writer ended ({process.returncode}) before {what}")
        time.sleep(0.05)
    raise AssertionError(f"never saw {what}")


def _as_if_from_a_terminal() -> None:
    """A job started in the background of a script inherits SIGINT ignored, and a suite run under ``nohup`` SIGHUP
    ignored (the command line then leaves them so, as it should); a terminal's child inherits neither."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def _start_stalled_reader(tmp_path: Path, source: Path, output: Path) -> subprocess.Popen[bytes]:
    ready = tmp_path / "ready"
    process = subprocess.Popen(
        [sys.executable, "-c", STALLED_READER, str(ready), str(tmp_path / "go"), str(source), str(output)],
        preexec_fn=_as_if_from_a_terminal,
    )
    _wait_for(ready.exists, "the read stage", process)
    return process


def _jsonl(path: Path, rows: list[list[int]]) -> Path:
    path.write_text("".join(json.dumps({"input_ids": row}) + "\n" for row in rows))
    return path


def _blocks(path: Path) -> list[list[int]]:
    return pq.read_table(path).column("input_ids").to_pylist()


# ---------------------------------------------------------------- the lock covers the whole CLI run


@pytest.mark.slow
def test_a_second_run_is_refused_while_the_first_is_still_reading(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = _jsonl(tmp_path / "first.jsonl", [[1, 2, 3]])
    second = _jsonl(tmp_path / "second.jsonl", [[9, 9]])
    output = tmp_path / "out.parquet"
    process = _start_stalled_reader(tmp_path, first, output)
    try:
        code = main([*PACK, str(second), "-o", str(output)])
        err = capsys.readouterr().err.splitlines()
    finally:
        (tmp_path / "go").touch()
        first_code = process.wait(timeout=60)
    assert code == 2
    assert err == [f"packing: error: {output}: another run (process {process.pid}) is writing this file; wait for it"]
    assert first_code == 0
    assert _blocks(output) == [[1, 2, 3, 0]]  # the first run's result, not overwritten by the second
    assert not lock_path(output).exists()


def test_a_lock_file_naming_a_live_unrelated_process_does_not_block(tmp_path: Path) -> None:
    source = _jsonl(tmp_path / "in.jsonl", [[1, 2, 3]])
    output = tmp_path / "out.parquet"
    lock_path(output).write_text("1")  # PID 1 is alive, and is not a writer
    assert main([*PACK, str(source), "-o", str(output)]) == 0
    assert _blocks(output) == [[1, 2, 3, 0]]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl", "out.parquet"]


@pytest.mark.slow
def test_an_emptied_lock_file_does_not_let_a_second_writer_in(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = _jsonl(tmp_path / "first.jsonl", [[1, 2, 3]])
    second = _jsonl(tmp_path / "second.jsonl", [[9, 9]])
    output = tmp_path / "out.parquet"
    process = _start_stalled_reader(tmp_path, first, output)
    try:
        lock_path(output).write_text("")  # what the file holds does not matter, the kernel's lock does
        code = main([*PACK, str(second), "-o", str(output)])
        err = capsys.readouterr().err.splitlines()
    finally:
        (tmp_path / "go").touch()
        first_code = process.wait(timeout=60)
    assert (code, err) == (2, [f"packing: error: {output}: another run is writing this file; wait for it"])
    assert first_code == 0
    assert _blocks(output) == [[1, 2, 3, 0]]


def test_an_empty_lock_file_nobody_holds_does_not_block(tmp_path: Path) -> None:
    source = _jsonl(tmp_path / "in.jsonl", [[1, 2, 3]])
    output = tmp_path / "out.parquet"
    lock_path(output).write_text("")
    assert main([*PACK, str(source), "-o", str(output)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl", "out.parquet"]


@pytest.mark.slow
def test_the_lock_of_a_killed_run_is_not_stale(tmp_path: Path) -> None:
    source = _jsonl(tmp_path / "in.jsonl", [[1, 2, 3]])
    output = tmp_path / "out.parquet"
    process = _start_stalled_reader(tmp_path, source, output)
    process.kill()
    process.wait(timeout=60)
    assert lock_path(output).exists()  # left behind by SIGKILL, but no longer held
    assert main([*PACK, str(source), "-o", str(output)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl", "out.parquet", "ready"]


def test_a_lock_file_that_is_a_symbolic_link_is_refused_and_not_followed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = _jsonl(tmp_path / "in.jsonl", [[1, 2, 3]])
    output = tmp_path / "out.parquet"
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    lock_path(output).symlink_to(victim)
    assert main([*PACK, str(source), "-o", str(output)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"packing: error: {output}: its lock file .out.parquet.lock is a symbolic link"
    ]
    assert victim.read_text() == "keep me"
    assert not output.exists()


def test_the_same_thread_may_nest_the_lock_and_its_writes(tmp_path: Path) -> None:
    output = tmp_path / "out.jsonl"
    with exclusive(output):
        write_jsonl(pack([[1, 2]], 4), output)
        assert lock_path(output).exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl"]


# ---------------------------------------------------------------- threads of one process


def _big_batch(token: int, blocks: int) -> Any:
    return pack([[token] * 500 for _ in range(blocks)], 512, strategy="ffd")


@pytest.mark.slow
def test_a_second_thread_writing_the_same_path_is_refused_and_the_first_output_is_intact(tmp_path: Path) -> None:
    output = tmp_path / "out.jsonl"
    first, second = _big_batch(7, 2000), pack([[9, 9]], 4)
    errors: list[BaseException] = []

    def write_first() -> None:
        try:
            write_jsonl(first, output)
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    thread = threading.Thread(target=write_first)
    thread.start()
    _wait_for(lambda: any(p.name.endswith(".tmp") for p in tmp_path.iterdir()), "the first thread's write")
    with pytest.raises(DatasetError, match="another thread of this process is writing this file; wait for it"):
        write_jsonl(second, output)
    thread.join(timeout=120)
    assert errors == []
    lines = output.read_text().splitlines()
    assert len(lines) == 2000
    assert all(json.loads(line)["input_ids"] == [7] * 500 + [0] * 12 for line in lines)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl"]


def _race(batches: dict[int, Any], output: Path) -> tuple[list[int], list[int]]:
    """Two threads start ``write_parquet`` of their batch on ``output`` at the same moment: who wrote, who was
    refused."""
    barrier = threading.Barrier(len(batches))
    written: list[int] = []
    refused: list[int] = []

    def write(token: int) -> None:
        barrier.wait()
        try:
            write_parquet(batches[token], output)
            written.append(token)
        except DatasetError:
            refused.append(token)

    threads = [threading.Thread(target=write, args=(token,)) for token in batches]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return written, refused


def test_two_threads_calling_write_parquet_never_report_a_corrupt_file_as_written(tmp_path: Path) -> None:
    output = tmp_path / "out.parquet"
    batches = {7: _big_batch(7, 400), 9: _big_batch(9, 300)}
    expected = {token: batch.to_arrow().column("input_ids").to_pylist() for token, batch in batches.items()}
    for _ in range(6):
        written, refused = _race(batches, output)
        assert written and len(written) + len(refused) == 2  # no thread died of another error
        assert _blocks(output) in [expected[token] for token in written]
        assert sorted(p.name for p in tmp_path.iterdir()) == ["out.parquet"]


# ---------------------------------------------------------------- signals leave nothing behind


@pytest.fixture(scope="module")
def big_input(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2 M tokens in Parquet: quick to read, seconds to write as JSON lines."""
    path = tmp_path_factory.mktemp("big") / "big.parquet"
    rows = pa.array([[7] * 500] * 4000, type=pa.list_(pa.int32()))
    pq.write_table(pa.table({"input_ids": rows}), path)
    return path


def _pack_in_a_subprocess(source: Path, output: Path, ignore_hangup: bool = False) -> subprocess.Popen[bytes]:
    def prepare() -> None:
        _as_if_from_a_terminal()
        if ignore_hangup:
            signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as under nohup

    command = [sys.executable, "-m", "packing", "pack", str(source), "--max-seq-length", "512", "-q", "-o", str(output)]
    return subprocess.Popen(command, preexec_fn=prepare, stderr=subprocess.PIPE)


def _writing(folder: Path) -> bool:
    return any(p.name.endswith(".tmp") and p.stat().st_size > 0 for p in folder.iterdir())


@pytest.mark.slow
@pytest.mark.parametrize("name", ["SIGHUP", "SIGTERM", "SIGINT"])
def test_a_signal_mid_write_leaves_no_temporary_and_no_lock(tmp_path: Path, big_input: Path, name: str) -> None:
    output = tmp_path / "out.jsonl"
    output.write_bytes(b"previous run")
    process = _pack_in_a_subprocess(big_input, output)
    _wait_for(lambda: _writing(tmp_path), "a temporary file being written", process)
    number = getattr(signal, name)
    process.send_signal(number)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 128 + number
    assert b"Traceback" not in err
    assert output.read_bytes() == b"previous run"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl"]


@pytest.mark.slow
def test_a_hangup_while_reading_leaves_no_lock(tmp_path: Path) -> None:
    source = _jsonl(tmp_path / "in.jsonl", [[1, 2, 3]])
    output = tmp_path / "out.parquet"
    process = _start_stalled_reader(tmp_path, source, output)
    assert lock_path(output).exists()
    process.send_signal(signal.SIGHUP)
    assert process.wait(timeout=60) == 128 + signal.SIGHUP
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl", "ready"]


@pytest.mark.slow
def test_a_hangup_ignored_as_under_nohup_lets_the_run_finish(tmp_path: Path, big_input: Path) -> None:
    output = tmp_path / "out.jsonl"
    process = _pack_in_a_subprocess(big_input, output, ignore_hangup=True)
    _wait_for(lambda: _writing(tmp_path), "a temporary file being written", process)
    process.send_signal(signal.SIGHUP)
    process.communicate(timeout=120)
    assert process.returncode == 0
    assert sum(1 for _ in output.open()) == 4000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl"]


# ---------------------------------------------------------------- the host process left alone

SIGNAL_NAMES = [name for name in ("SIGTERM", "SIGHUP", "SIGINT") if hasattr(signal, name)]


def _handlers() -> dict[str, Any]:
    return {name: signal.getsignal(getattr(signal, name)) for name in SIGNAL_NAMES}


def test_writing_leaves_the_signal_handlers_as_they_were(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The library installs no handler, not even while it writes: a training process keeps its own (SIGTERM is
    not turned into an exit of the trainer); the command line alone unwinds on signals."""

    def trainers_own(signum: int, frame: Any) -> None:  # pragma: no cover - never called
        raise AssertionError("not delivered")

    previous = signal.signal(signal.SIGTERM, trainers_own)  # the host's handler (another test may have set one)
    try:
        _write_and_watch(tmp_path, monkeypatch)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _write_and_watch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = _handlers()
    assert before["SIGTERM"].__name__ == "trainers_own"
    during: list[dict[str, Any]] = []
    real = pq.ParquetWriter.write_table

    def recording(self: pq.ParquetWriter, *args: Any, **kwargs: Any) -> None:
        during.append(_handlers())
        real(self, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetWriter, "write_table", recording)
    output = tmp_path / "out.parquet"
    write_parquet(pack([[1, 2, 3]], 4), output)
    with exclusive(tmp_path / "other.txt"):
        during.append(_handlers())
    assert during and all(seen == before for seen in during)
    assert _handlers() == before
    assert _blocks(output) == [[1, 2, 3, 0]]


IMPORT_WITHOUT_FCNTL = """
import os, sys, tempfile, warnings
sys.modules["fcntl"] = None  # as on Windows: the module cannot be imported
warnings.simplefilter("ignore")  # filelock says it falls back to a marker file
import packing, packing._cli, packing.hf
import pyarrow.parquet as pq
folder = tempfile.mkdtemp()
output = os.path.join(folder, "out.parquet")
packing.write_parquet(packing.pack([[1, 2, 3]], 4), output)
print(pq.read_table(output).column("input_ids").to_pylist(), sorted(os.listdir(folder)), "fcntl" in sys.modules and sys.modules["fcntl"] is None)
"""


def test_import_packing_and_writing_work_without_fcntl() -> None:
    """``fcntl`` exists on Unix only: the library imports and writes (one writer at a time) without it."""
    done = subprocess.run([sys.executable, "-c", IMPORT_WITHOUT_FCNTL], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[0] == "[[1, 2, 3, 0]] ['out.parquet'] True"


# ---------------------------------------------------------------- hub names fail fast without a network


def _pack_with_hub_name(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    source = tmp_path / "in.jsonl"
    source.write_text('{"text": "hello"}\n')
    environment = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    environment.update(
        HF_HOME=str(tmp_path / "hf"),  # an empty cache
        TRANSFORMERS_NO_ADVISORY_WARNINGS="1",  # no "PyTorch was not found" where torch is not installed
        **env,
    )
    command = [sys.executable, "-m", "packing", "pack", str(source), "--max-seq-length", "8"]
    command += ["-o", str(tmp_path / "out.parquet"), "--tokenizer", "some-org/some-name"]
    # the timeout guards against the old behaviour's ~50 s of retries; it is not a timing check
    return subprocess.run(command, env=environment, capture_output=True, text=True, timeout=30)


UNREACHABLE = (  # the command line names its own flag
    "packing: error: --tokenizer: expected 'bytes', a folder with tokenizer files, a tokenizer.json or .tiktoken "
    "file, or a hub name, got <'some-org/some-name': not a folder, not in the local cache, and the hub cannot be "
    "reached>"
)


@pytest.mark.slow
def test_a_hub_name_fails_at_once_with_one_line_when_the_hub_refuses_connections(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    done = _pack_with_hub_name(tmp_path, HF_ENDPOINT="http://127.0.0.1:9")  # the discard port: nothing listens
    assert done.returncode == 2
    assert done.stderr.splitlines() == [UNREACHABLE]
    assert not (tmp_path / "out.parquet").exists()


@pytest.mark.slow
def test_a_hub_name_fails_at_once_with_one_line_without_a_network(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    from packing.text._tokenizers import _hub_answers

    if _hub_answers("some-org/some-name"):
        pytest.skip("the hub can be reached from here")
    done = _pack_with_hub_name(tmp_path)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [UNREACHABLE]
