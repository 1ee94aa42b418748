"""Metric families and their text: Prometheus text format 0.0.4 for scrapes, OpenMetrics for backfill.

Written here rather than with prometheus-client, whose 0.23+ releases rewrite `vllm:x` to
`vllm_x` when Prometheus asks for OpenMetrics (client_python#1177, reference trap 1): names
keep their colons unless a pod is configured to show that very bug (`underscore: true`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from enum import StrEnum
from functools import lru_cache

Labels = tuple[tuple[str, str], ...]
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class Kind(StrEnum):
    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"
    SUMMARY = "summary"
    UNTYPED = "untyped"


class Format(StrEnum):
    """How an exporter prints numbers: prometheus-client (Python), or dcgm-exporter's Go fields."""

    PYTHON = "python"
    INT = "int"
    FIXED = "fixed"  # %f, e.g. 300.000000
    GO = "go"  # strconv 'g' as Go exporters print (kube-state-metrics, node_exporter)


@dataclass(frozen=True)
class Sample:
    name: str
    labels: Labels
    value: float


@dataclass
class Family:
    """One metric family as an exporter exposes it; `name` is the name on the # TYPE line."""

    name: str
    kind: Kind
    help: str
    fmt: Format = Format.PYTHON
    samples: list[Sample] = field(default_factory=list)
    # A family nobody asked for (history restricted to some names): it drops what it is given.
    muted: bool = False

    def add(self, labels: Mapping[str, str] | Labels, value: float, suffix: str = "") -> None:
        if self.muted:
            return
        pairs = tuple(labels.items()) if isinstance(labels, Mapping) else labels
        self.samples.append(Sample(self.name + suffix, pairs, value))


def colon_free(name: str, underscore: bool) -> str:
    """The name as stored when prometheus-client rewrote colons (trap 1), or unchanged."""
    return name.replace(":", "_") if underscore else name


def go_float(value: float) -> str:
    """prometheus_client's floatToGoString: the text Python exporters print for values and `le`."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    text = repr(float(value))
    dot = text.find(".")
    if value > 0 and dot > 6 and "e" not in text:
        mantissa = f"{text[0]}.{text[1:dot]}{text[dot + 1 :]}".rstrip("0").rstrip(".")
        return f"{mantissa}e+0{dot - 1}"
    return text


def go_g(value: float) -> str:
    """Go's strconv.FormatFloat(v, 'g', -1, 64): what client_golang and kube-state-metrics print."""
    if math.isinf(value) or math.isnan(value):
        return go_float(value)
    if value == 0:
        return "0"
    sign, digits, exponent = Decimal(repr(float(value))).normalize().as_tuple()
    assert isinstance(exponent, int)
    text = "".join(map(str, digits))
    point = len(digits) + exponent  # position of the decimal point in the digit string
    minus = "-" if sign else ""
    if point - 1 < -4 or point - 1 >= 6:
        mantissa = text[0] + ("." + text[1:] if len(text) > 1 else "")
        e = point - 1
        return f"{minus}{mantissa}e{'-' if e < 0 else '+'}{abs(e):02d}"
    if point <= 0:
        return f"{minus}0.{'0' * -point}{text}"
    if point >= len(text):
        return minus + text + "0" * (point - len(text))
    return f"{minus}{text[:point]}.{text[point:]}"


def number(value: float, fmt: Format) -> str:
    if fmt is Format.INT:
        return str(int(value))
    if fmt is Format.FIXED:
        return f"{value:f}"
    if fmt is Format.GO:
        return go_g(value)
    return go_float(value)


@lru_cache(maxsize=262144)
def render_labels(labels: Labels) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{escape(v)}"' for k, v in labels) + "}"


def escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def text(families: Iterable[Family]) -> str:
    """The exposition text format 0.0.4, families in the order given, empty families skipped."""
    out: list[str] = []
    for family in families:
        if not family.samples:
            continue
        out.append(f"# HELP {family.name} {_help(family.help)}\n")
        out.append(f"# TYPE {family.name} {family.kind}\n")
        fmt = family.fmt
        out.extend(f"{s.name}{render_labels(s.labels)} {number(s.value, fmt)}\n" for s in family.samples)
    return "".join(out)


SUFFIXES = ("", "_bucket", "_count", "_sum", "_total", "_created")


class Collector:
    """Families by name in first-seen order, so every pod's samples of a metric share one family.

    With `wanted`, families none of whose sample names are wanted are muted (history for a few trees).
    """

    def __init__(self, wanted: frozenset[str] | None = None) -> None:
        self._families: dict[str, Family] = {}
        self.wanted = wanted

    def family(self, name: str, kind: Kind, help: str, fmt: Format = Format.PYTHON) -> Family:
        found = self._families.get(name)
        if found is None:
            muted = self.wanted is not None and not any(name + s in self.wanted for s in SUFFIXES)
            found = self._families[name] = Family(name, kind, help, fmt, muted=muted)
        return found

    def families(self) -> list[Family]:
        return [f for f in self._families.values() if not f.muted]


_le: dict[int, tuple[tuple[float, ...], tuple[tuple[str, str], ...]]] = {}


def _le_labels(bounds: tuple[float, ...]) -> tuple[tuple[str, str], ...]:
    found = _le.get(id(bounds))
    if found is None or found[0] is not bounds:
        found = _le[id(bounds)] = (bounds, tuple(("le", go_float(b)) for b in bounds))
    return found[1]


def histogram(family: Family, labels: Labels, bounds: tuple[float, ...], cum: list[float], total: float) -> None:
    """The _bucket/_count/_sum samples of one histogram, counts rounded down (cumulative by construction)."""
    if family.muted:
        return
    bucket = family.name + "_bucket"
    samples = family.samples
    for le, value in zip(_le_labels(bounds), cum, strict=True):
        samples.append(Sample(bucket, (*labels, le), math.floor(value)))
    samples.append(Sample(family.name + "_count", labels, math.floor(cum[-1])))
    samples.append(Sample(family.name + "_sum", labels, total))
