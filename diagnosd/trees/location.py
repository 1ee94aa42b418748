"""Where the trees are: $DIAGNOSD_RULES_DIR when set, else the package diagnosd.rules shipped with diagnosd.

pyproject.toml maps diagnosd.rules onto the top-level rules/ of the source tree, its one copy: a
checkout and an editable install read rules/ itself, a wheel its copy in site-packages, found with
importlib.resources wherever diagnosd is installed and whatever the working directory.
"""

from __future__ import annotations

import atexit
import functools
import tempfile
from collections.abc import Mapping
from importlib import resources
from importlib.abc import Traversable
from pathlib import Path

RULES_ENV = "DIAGNOSD_RULES_DIR"
RULES_PACKAGE = "diagnosd.rules"


def rules_dir_variable(environ: Mapping[str, str]) -> Path | None:
    """$DIAGNOSD_RULES_DIR, or None when it is unset or empty.

    Its one reader: the command line (daemon.compose.default_rules_dir) and the daemon's settings
    (daemon.settings.loader) both ask here, so they agree.
    """
    value = environ.get(RULES_ENV, "")
    return Path(value) if value else None


@functools.cache
def shipped_rules_dir() -> Path:
    """The trees installed with diagnosd, as a directory.

    Imported from a source tree that was never installed (PYTHONPATH=.), the package cannot be
    found: that tree's own rules/ is used.
    """
    try:
        found = resources.files(RULES_PACKAGE)
    except ModuleNotFoundError:
        return Path(__file__).resolve().parents[2] / "rules"
    if isinstance(found, Path):
        return found
    return _extracted(found)


def _extracted(found: Traversable) -> Path:
    """A package that is not plain files (in a zip, or a namespace): its YAML copied once to a
    temporary directory, removed at exit (resources.as_file extracts directories only from 3.12)."""
    holder = tempfile.TemporaryDirectory(prefix="diagnosd-rules-")
    atexit.register(holder.cleanup)
    directory = Path(holder.name)
    for item in found.iterdir():
        if item.is_file() and item.name.endswith(".yaml"):
            (directory / item.name).write_bytes(item.read_bytes())
    return directory
