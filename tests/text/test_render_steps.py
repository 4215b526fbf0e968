"""Chat templates that work without writing: loops with an empty body, loop filters that reject everything,
exponential macros, values built past any output (``*``, ``+``, ``~``, integer arguments, ``**``). Each is stopped
by the steps and sizes the rendering may take, counted as the template runs: no clock and no signal, so the same in
any thread, in the library and at the command line; transformers' own compiler is read, never changed."""

from __future__ import annotations

import json
import resource
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import packing
from packing._cli import main
from packing.errors import SampleError
from packing.text._templates import RENDER_FACTOR, RENDER_SLACK, STEP_FACTOR

pytest.importorskip("transformers")

from tests.helpers.text_fixtures import CHATML, MARKED, save_tokenizer

ROOT = Path(__file__).resolve().parents[2]
CHAT = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
STEPS = r"a chat template that renders in at most [\d,]+ steps \(loop iterations and calls\)"
SIZE = r"a chat template rendering of at most [\d,]+ characters"
SILENT = "{%- for a in range(90000) -%}{%- for b in range(90000) -%}{%- endfor -%}{%- endfor -%}"
HOSTILE = {
    "empty loops": (SILENT, STEPS),
    "a filter rejecting everything": (
        "{%- for a in range(90000) -%}{%- for b in range(90000) if false -%}x{%- endfor -%}{%- endfor -%}",
        STEPS,
    ),
    "an exponential macro": (
        "{%- macro f(n) -%}{%- if n > 0 -%}{{ f(n - 1) }}{{ f(n - 1) }}{%- endif -%}{%- endmacro -%}{{ f(40) }}",
        STEPS,
    ),
    "a power": ("{%- set x = 7 ** (10 ** 9) -%}", STEPS),
    "a filter over a range in a loop": (
        "{%- for i in range(99999) -%}{%- set x = range(99999) | sum -%}{%- endfor -%}",
        STEPS,
    ),
    "a lazy filter's items": (
        "{%- for i in range(99999) -%}{%- set x = range(99999) | map('abs') | sum -%}{%- endfor -%}",
        STEPS,
    ),
    "a method over a list in a loop": (
        "{%- set big = range(99999) | list -%}{%- for i in range(99999) -%}{%- set x = big.count(3) -%}{%- endfor -%}",
        STEPS,
    ),
    "a repeated string": ("{%- set x = 'a' * 10 ** 10 -%}", SIZE),
    "a filter's width": ("{%- set x = 'a' | center(10 ** 10) -%}", SIZE),
    "a method's width": ("{%- set x = 'a'.center(10 ** 10) -%}", SIZE),
    "doubling with ~": (
        "{%- set ns = namespace(s='ab') -%}{%- for i in range(64) -%}{%- set ns.s = ns.s ~ ns.s -%}{%- endfor -%}",
        SIZE,
    ),
    "doubling with +": (
        "{%- set ns = namespace(s=[1]) -%}{%- for i in range(64) -%}{%- set ns.s = ns.s + ns.s -%}{%- endfor -%}",
        SIZE,
    ),
}


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("templates")
    made = {name: save_tokenizer(root / f"t{i}", template) for i, (name, (template, _)) in enumerate(HOSTILE.items())}
    made["chatml"] = save_tokenizer(root / "chatml", CHATML)
    made["marked"] = save_tokenizer(root / "marked", MARKED)
    return made


def _virtual_size() -> int:
    """The test process's address space now, in bytes (``VmSize``: the libraries loaded, every thread's stack)."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) << 10 for line in status if line.startswith("VmSize:"))


def _memory_capped(room: int = 6 << 30) -> Any:
    """A value past its size is refused before it is built; should that fail, the test fails with a MemoryError
    rather than the machine swapping. The cap is ``room`` bytes more than the process's address space now (a whole
    run's process maps 10 GB and more: an absolute cap would starve every allocation of the test itself)."""
    limit = _virtual_size() + room
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (limit if hard == resource.RLIM_INFINITY else min(limit, hard), hard))
    return soft, hard


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.slow) if n == "an exponential macro" else n for n in HOSTILE]
)
def test_a_template_that_works_without_writing_is_stopped(folders: dict[str, Path], name: str) -> None:
    tokenizer = packing.load_tokenizer(str(folders[name]))
    handlers = {number: signal.getsignal(number) for number in (signal.SIGALRM, signal.SIGINT, signal.SIGTERM)}
    limits = _memory_capped()
    try:
        with pytest.raises(SampleError, match=rf"^sample 0, 'messages': expected {HOSTILE[name][1]}"):
            packing.encode_rows([{"messages": CHAT}], tokenizer)
    finally:
        resource.setrlimit(resource.RLIMIT_AS, limits)
    assert {number: signal.getsignal(number) for number in handlers} == handlers  # the host process is untouched


@pytest.mark.parametrize(("count", "cap"), [(1_990, 1_000), (2_010, 1_000), (19_990, 10_000), (20_010, 10_000)])
def test_the_steps_are_twice_the_size_a_rendering_may_have(count: int, cap: int) -> None:
    """``STEP_FACTOR`` steps a character of the cap (``RENDER_FACTOR`` × the messages' characters + ``RENDER_SLACK``):
    each iteration is one."""
    from packing.text._templates import _bounded, _counting_template, _RenderTooLong

    template = _counting_template("{%- for i in items -%}{%- endfor -%}.")
    assert STEP_FACTOR == 2 and RENDER_FACTOR == 16 and RENDER_SLACK == 1 << 20
    items = list(range(count))
    if count <= STEP_FACTOR * cap:
        assert _bounded(template, {"items": items}, cap, False) == (".", [])
    else:
        with pytest.raises(_RenderTooLong):
            _bounded(template, {"items": items}, cap, False)


def test_other_threads_and_plain_templates_are_not_disturbed(folders: dict[str, Path]) -> None:
    """Each rendering counts its own steps (a context variable): a hostile template stopped in one thread leaves
    another thread's renderings and their generation spans as transformers makes them."""
    plain = packing.load_tokenizer(str(folders["marked"]))
    hostile = packing.load_tokenizer(str(folders["empty loops"]))
    expected = packing.encode_rows([{"messages": CHAT}] * 3, plain)
    outcomes: dict[str, Any] = {}

    def run(name: str, tokenizer: Any) -> None:
        try:
            outcomes[name] = packing.encode_rows([{"messages": CHAT}] * 3, tokenizer)
        except SampleError as error:
            outcomes[name] = error

    threads = [threading.Thread(target=run, args=(n, t)) for n, t in (("plain", plain), ("hostile", hostile))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert isinstance(outcomes["hostile"], SampleError)
    assert [a.tolist() for a in outcomes["plain"]] == [a.tolist() for a in expected]
    rendered = plain.apply_chat_template(CHAT, tokenize=False, return_assistant_tokens_mask=False)
    assert packing.decode_documents(packing.pack([{"messages": CHAT}], 256, tokenizer=plain), plain) == [rendered]


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_the_command_line_stops_it_in_one_line(folders: dict[str, Path], tmp_path: Path) -> None:
    data = tmp_path / "chats.jsonl"
    data.write_text(json.dumps({"messages": CHAT}) + "\n")
    result = subprocess.run(
        [sys.executable, "-m", "packing", "pack", str(data), "--tokenizer", str(folders["empty loops"]),
         "--max-seq-length", "64", "--output", str(tmp_path / "out.parquet")],
        capture_output=True, text=True, timeout=200, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines()[-1].startswith(f"packing: error: {data}, line 1, 'messages': expected a chat")
    assert "Traceback" not in result.stderr


def test_the_library_door_in_process(
    folders: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "chats.jsonl"
    data.write_text(json.dumps({"messages": CHAT}) + "\n")
    code = main(["compare", str(data), "--tokenizer", str(folders["empty loops"]), "--max-seq-length", "64"])
    assert code == 2
    assert "steps (loop iterations and calls)" in capsys.readouterr().err
