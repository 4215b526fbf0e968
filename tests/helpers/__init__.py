"""Helpers shared by the test modules, one module per concept; no test module imports another's. Fixtures stay in
the ``conftest.py`` files."""
