"""The first start compiles everything the page uses, once: after ``compile_everything`` no tab, strategy or
source makes numba compile anything more (the first version compiled in pieces, at the first use of each)."""

from __future__ import annotations

import importlib
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script: the repository root

from numba.core.registry import CPUDispatcher
from streamlit.testing.v1 import AppTest

import packing
from explorer import page
from explorer.tabs import TITLES

APP = str(Path(__file__).resolve().parents[2] / "app.py")


def _signatures() -> dict[str, int]:
    counts = {}
    for info in pkgutil.iter_modules(packing.__path__):
        try:
            module = importlib.import_module(f"packing.{info.name}")
        except ImportError:  # an optional peer (torch, ...) that is not installed
            continue
        for name, value in vars(module).items():
            if isinstance(value, CPUDispatcher):
                counts[f"{info.name}.{name}"] = len(value.signatures)
    return counts


def check_in_this_process() -> dict[str, tuple[int, int]]:
    """Compile at start, then open every tab for several sources; the kernels whose signatures grew."""
    page.compile_everything()
    before = _signatures()
    assert before and any(before.values())
    links = [
        {},
        {"source": "synthetic", "count": "3000", "max_length": "512", "strategy": "first_fit_shuffle"},
        {"sequences": "5 6 7 | 8 9\n10 | 11 12", "max_seq_length": "4", "overflow": "split", "strategy": "spfhp"},
        {"source": "workload", "workload": "squad_1_1_bert_384", "sample": "2000", "overflow": "drop"},
    ]
    for params in links:
        at = AppTest.from_file(APP, default_timeout=120)
        at.query_params.update(params)
        at.run()
        for tab in TITLES:
            at.session_state["tab"] = tab
            at.run()
            assert not at.exception
    after = _signatures()
    return {name: (before.get(name, 0), count) for name, count in after.items() if count != before.get(name, 0)}


def test_no_page_compiles_anything_after_the_first_start() -> None:
    """In a fresh interpreter, so that nothing another test ran counts as compiled at start."""
    done = subprocess.run(
        [sys.executable, __file__], cwd=Path(APP).parent, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {}


if __name__ == "__main__":
    print(json.dumps(check_in_this_process()))
