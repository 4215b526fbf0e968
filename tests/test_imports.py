"""``import packing`` stays light: optional peers are imported only when a feature that needs them is used."""

from __future__ import annotations

import subprocess
import sys

import pytest

OPTIONAL = ("torch", "transformers", "tokenizers", "ray", "highspy", "datasets", "streamlit", "plotly")


def test_importing_packing_imports_no_optional_peer() -> None:
    code = f"import sys, packing; print(*[m for m in {OPTIONAL!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == []


@pytest.mark.slow
def test_no_module_is_shadowed_by_a_function() -> None:
    code = (
        "import importlib, packing, pkgutil, types\n"
        "for info in pkgutil.iter_modules(packing.__path__):\n"
        "    importlib.import_module('packing.' + info.name)\n"
        "    value = getattr(packing, info.name)\n"
        "    assert isinstance(value, types.ModuleType), info.name\n"
        "print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "ok", out.stderr[-2000:]


def test_every_compiled_kernel_releases_the_gil() -> None:
    """The explorer serves every session from one process, and the data loaders run beside training: a kernel
    that kept the GIL would stop every other thread while it packs (``benchmarks/gil.py`` measures it)."""
    import importlib
    import pkgutil

    from numba.core.registry import CPUDispatcher

    import packing

    kernels = {}
    for info in pkgutil.walk_packages(packing.__path__, "packing."):
        try:
            module = importlib.import_module(info.name)
        except ImportError:  # an optional peer that is not installed
            continue
        for name, value in vars(module).items():
            if isinstance(value, CPUDispatcher) and value.__module__ == module.__name__:
                kernels[f"{info.name}.{name}"] = value.targetoptions.get("nogil", False)
    assert len(kernels) >= 15, sorted(kernels)
    assert [name for name, nogil in kernels.items() if not nogil] == []
