"""Benchmark: how often the shipped trees name the injected cause, under random cluster variations.

Run: python bench/accuracy.py [--variations K] [--healthy K] [--seed S] [--only SCENARIO ...]
[--per-run N] (default 5 variations of every fault scenario, 5 of each healthy fleet, seed 0;
needs prometheus and promtool on PATH). The cases of N scenarios at a time (every variation of a
scenario together) go into one real Prometheus (diagnosd/drills/accuracy.py), so the whole matrix
runs on a small machine slice by slice; each case is diagnosed through the real rules. Prints per
tree, side by side with the naive baseline from the same run (the cause whose own query moved most
against a day ago): AC@1 / AC@3 (the expected
first cause is the top / among the top three root causes), the false-cause rate on healthy fleets
(a (case, tree) with any root cause), the unknown rate (verdicts the engine could not establish),
then every case whose expected cause was missed, with its variations.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import pickle
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from diagnosd import sim
from diagnosd.daemon import compose
from diagnosd.drills.accuracy import Case, Outcome, Score, cases, run, scores
from diagnosd.sim import scenario

ANCHOR = datetime(2026, 11, 20, 15, 0, tzinfo=UTC).timestamp()


def _pct(part: int, whole: int) -> str:
    return f"{100.0 * part / whole:.0f} %" if whole else "–"


def table(rows: Sequence[Score]) -> list[str]:
    lines = [
        "| tree | expectations | AC@1 | AC@3 | naive AC@1 | naive AC@3 | exporter missing | wrong | healthy "
        "| false causes | unknown |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in [*rows, _total(rows)]:
        lines.append(
            f"| {r.tree} | {r.expectations} | {_pct(r.at1, r.expectations)} | {_pct(r.at3, r.expectations)} | "
            f"{_pct(r.naive_at1, r.expectations)} | {_pct(r.naive_at3, r.expectations)} | {r.degraded} | "
            f"{r.wrong} | {r.healthy} | {_pct(r.false_causes, r.healthy)} | {_pct(r.unknown, r.judged)} |"
        )
    return lines


def _total(rows: Sequence[Score]) -> Score:
    fields = [f.name for f in dataclasses.fields(Score)][1:]
    return Score("**all**", *(sum(getattr(r, name) for r in rows) for name in fields))


def misses(outcomes: Sequence[Outcome]) -> list[str]:
    """Cases where the engine did worse than naming the expected cause, and false or wrong causes."""
    out = []
    for o in outcomes:
        where = f"{o.case.id} [{o.case.variation.name}] {o.symptom} / {o.target}"
        if o.healthy and o.causes:
            out.append(f"- false cause: {where}: {', '.join(o.causes)}")
        elif not o.healthy and o.wrong:
            out.append(f"- wrong cause with an exporter missing: {where}: {o.wrong} (expected {o.expected})")
        elif not o.healthy and o.rank is None:
            state = "unknown" if o.unknown else "missed"
            out.append(f"- {state}: {where}: expected {o.expected}, root causes {', '.join(o.causes) or 'none'}")
    return out


def _slice(part: list[Case], rules: compose.Rules, seed: int, keep: Path | None) -> list[Outcome]:
    """One slice's outcomes, from `keep` when this very slice (same cases, variations, rules and
    simulator) ran before."""
    if keep is None:
        return run(part, rules, anchor=ANCHOR, seed=seed, naive=True)
    digest = hashlib.sha256(repr(([(c.id, c.variation) for c in part], seed, _inputs())).encode()).hexdigest()
    path = keep / f"slice-{digest[:16]}.pickle"
    if path.is_file():
        kept: list[Outcome] = pickle.loads(path.read_bytes())
        return kept
    outcomes = run(part, rules, anchor=ANCHOR, seed=seed, naive=True)
    keep.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps(outcomes))
    return outcomes


def _inputs() -> str:
    """What the outcomes depend on besides the cases: the shipped trees and the simulator, as text."""
    files = sorted(Path(compose.default_rules_dir()).glob("*.yaml")) + sorted(Path(sim.__file__).parent.rglob("*.*"))
    return "".join(p.read_text(encoding="utf-8") for p in files if p.suffix in (".yaml", ".py", ".txt"))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variations", type=int, default=5, help="variations per fault scenario")
    parser.add_argument("--healthy", type=int, default=5, help="variations per healthy fleet")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", action="append", default=[], help="these scenarios only (repeatable)")
    parser.add_argument("--per-run", type=int, default=10, help="scenarios per Prometheus (a slice of the matrix)")
    parser.add_argument(
        "--keep",
        type=Path,
        metavar="DIR",
        help="keep each slice's outcomes here and reuse those already kept (a long run survives a stop)",
    )
    args = parser.parse_args(argv)
    loaded = [scenario.load(n) for n in (args.only or scenario.names())]
    per = {s.name or "?": args.variations if s.expect else args.healthy for s in loaded}
    matrix = cases(loaded, per, seed=args.seed)
    rules = compose.load()
    started = time.monotonic()
    outcomes: list[Outcome] = []
    for at in range(0, len(loaded), args.per_run):
        names = {s.name for s in loaded[at : at + args.per_run]}
        part = [c for c in matrix if c.base in names]
        outcomes += _slice(part, rules, args.seed, args.keep)
        print(f"{at + len(names)}/{len(loaded)} scenarios, {time.monotonic() - started:.0f} s", file=sys.stderr)
    took = time.monotonic() - started
    scored = {c.id for c in matrix if c.twin_of is None}
    print(f"{len(scored)} cases ({len(matrix) - len(scored)} twins with every exporter), {took:.0f} s\n")
    print("\n".join(table(scores(outcomes))))
    missed = misses(outcomes)
    if missed:
        print("\nExpected cause not a root cause, false causes, wrong causes:\n")
        print("\n".join(missed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
