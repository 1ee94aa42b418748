"""Every name the simulator serves is a name a real exporter publishes (diagnosd/sim/known_metrics.txt).

The list is derived from the reference notes; where those notes are present (the project's shared
reference directory), the engine part of the list is re-derived from them and must match.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from diagnosd.sim import scenario
from diagnosd.sim.exporters import families
from diagnosd.sim.simulator import Simulator
from tests.sim.conftest import ANCHOR

KNOWN_FILE = Path(__file__).resolve().parents[2] / "diagnosd" / "sim" / "known_metrics.txt"
# The shared reference directory sits beside the repository when it is there at all.
REFERENCE = Path(__file__).resolve().parents[3] / "shared" / "reference" / "metrics-engines-inventory.md"
# Scenarios that switch on families the healthy fleet does not show (LoRA, restarts, PD, fallbacks...).
EXTRA = (
    "unused_lora_loaded",
    "kernel_launch_overhead",
    "autoscaling_lagging",
    "requests_not_released",
    "healthy_pd",
    "healthy_moe",
)


def known() -> set[str]:
    lines = KNOWN_FILE.read_text(encoding="utf-8").splitlines()
    return {line.strip() for line in lines if line.strip() and not line.startswith("#")}


def served(flavour: str | None) -> set[str]:
    names: set[str] = set()
    for name in ("healthy", *EXTRA):
        loaded = scenario.load(name)
        if flavour:
            loaded = scenario.with_names(loaded, flavour)
        sim = Simulator(loaded, anchor=ANCHOR, history=3600.0, coarse=900.0)
        sim.run(ANCHOR)
        names |= {s.name for family in families(sim) for s in family.samples}
    return names


def stored_form(name: str) -> str:
    """An underscore-stored engine name (trap 1) back to the colon name the exporter defines."""
    return re.sub(r"^(vllm|sglang|lmcache)_", r"\1:", name)


@pytest.mark.parametrize("flavour", [None, "v0", "sglang", "underscore"])
def test_every_served_name_is_a_known_exporter_name(flavour: str | None) -> None:
    names = served(flavour)
    unknown = sorted(n for n in names if n not in known() and stored_form(n) not in known())
    assert not unknown
    assert len(names) > 100


def test_the_underscore_flavour_serves_no_colon_names() -> None:
    assert not any(":" in n for n in served("underscore"))


@pytest.mark.skipif(not REFERENCE.is_file(), reason="the shared reference notes are not on this machine")
def test_the_engine_part_of_the_list_matches_the_reference_inventory() -> None:
    derived: set[str] = set()
    for line in REFERENCE.read_text(encoding="utf-8").splitlines():
        cols = [c.strip() for c in line.strip("|").split("|")]
        if not line.startswith("| ") or len(cols) < 3 or cols[0] == "name (as defined)":
            continue
        found = re.match(r"^([A-Za-z_:][A-Za-z0-9_:]*)( \(_bucket/_sum/_count\))?", cols[2])
        if not found:
            continue
        base = found.group(1)
        if found.group(2) or cols[1] == "histogram":
            derived |= {base + "_bucket", base + "_sum", base + "_count"}
        elif cols[1] == "summary":
            derived |= {base + "_sum", base + "_count"}
        else:
            derived.add(base)
    engines = {n for n in known() if n.startswith(("vllm:", "sglang:", "lmcache:"))}
    assert engines == {n for n in derived if n.startswith(("vllm:", "sglang:", "lmcache:"))}
