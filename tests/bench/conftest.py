"""The benchmarks under test: bench/NAME.py as a module. They import each other by name, as
`python bench/NAME.py` runs them, so bench/ is on the path while a test that loads one runs."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
Bench = Callable[[str], ModuleType]


@pytest.fixture
def bench() -> Iterator[Bench]:
    sys.path.insert(0, str(BENCH))
    try:
        yield importlib.import_module
    finally:
        sys.path.remove(str(BENCH))
