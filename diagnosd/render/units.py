"""Numbers as a person reads them: units, human magnitudes, yes/no, singular and plural, en and zh.

The `unit` of a check, detect or context in rules/*.yaml is one of UNITS (docs/rules.md lists them);
tests/render checks that every shipped rule uses a known one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Unit:
    kind: str  # count, rate, seconds, percent, ratio, factor, bool, bytes, plain
    en: str = ""  # plural (or symbol) in English
    en_one: str = ""  # singular in English, where it differs
    zh: str = ""
    scale: float = 1.0  # to the base of its kind (MB -> bytes)


def _count(plural: str, one: str, zh: str) -> Unit:
    return Unit("count", plural, one, zh)


UNITS: dict[str, Unit] = {
    "s": Unit("seconds"),
    "%": Unit("percent"),
    "ratio": Unit("ratio"),  # a share 0-1, shown as a percentage
    "x": Unit("factor"),  # one quantity over a like one (2.5 = 2.5 times), shown as ×2.5
    "bool": Unit("bool"),  # 1 = yes, 0 = no
    "tokens": _count("tokens", "token", "token"),
    "requests": _count("requests", "request", "个请求"),
    "restarts": _count("restarts", "restart", "次重启"),
    "GPUs": _count("GPUs", "GPU", "块 GPU"),
    "errors": _count("errors", "error", "个错误"),
    "events": _count("events", "event", "个事件"),
    "cooldowns": _count("cooldowns", "cooldown", "次冷却"),
    "failures": _count("failures", "failure", "次失败"),
    "cores": _count("CPU cores", "CPU core", "个 CPU 核"),
    "models": _count("models", "model", "个模型"),
    "replicas": _count("replicas", "replica", "个副本"),
    "tokens/s": Unit("rate", "tokens/s", "", "token/秒"),
    "req/s": Unit("rate", "req/s", "", "请求/秒"),
    "req/min": Unit("rate", "req/min", "", "请求/分钟"),
    "USD/h": Unit("rate", "USD/h", "", "美元/小时"),
    "W": Unit("rate", "W", "", "W"),
    "°C": Unit("rate", "°C", "", "°C"),
    "B": Unit("bytes", "", "", "", 1.0),
    "MiB": Unit("bytes", "", "", "", 1024.0**2),
    "B/s": Unit("bytes", "/s", "", "/秒", 1.0),
    "MB/s": Unit("bytes", "/s", "", "/秒", 1e6),
}
PLAIN = Unit("plain")

WORDS = {
    "yes": {"en": "yes", "zh": "是"},
    "no": {"en": "no", "zh": "否"},
    "pp": {"en": "pp", "zh": "个百分点"},
}


def unit_of(name: str | None) -> Unit:
    return UNITS.get(name or "", PLAIN)


def number(value: float) -> str:
    """3 significant digits, whole numbers up to 9999 in full, k/M/G/T above: 13.2k, 0.0273, 8192."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "∞" if value > 0 else "-∞"
    magnitude = abs(value)
    if magnitude >= 1e4:
        for suffix, scale in (("k", 1e3), ("M", 1e6), ("G", 1e9), ("T", 1e12)):
            scaled = _significant(value / scale)
            if abs(float(scaled)) < 1000 or suffix == "T":
                return scaled + suffix
    if magnitude >= 1000:
        return str(round(value))
    return _significant(value)


def _significant(value: float, digits: int = 3) -> str:
    if value == 0:
        return "0"
    places = digits - math.floor(math.log10(abs(value))) - 1
    rounded = round(value, places)
    if places <= 0:
        return str(int(rounded))
    return f"{rounded:.{places}f}".rstrip("0").rstrip(".")


def quantity(value: float | None, unit: str | None, lang: str = "en", signed: bool = False) -> str:
    """One value with its unit: 51 %, 13.2k tokens, 1 request, 350 ms, 1.2 GB/s, yes."""
    if value is None:
        return "n/a" if lang != "zh" else "无"
    u = unit_of(unit)
    sign = "+" if signed and value >= 0 else ""
    if u.kind == "bool":
        return WORDS["yes" if value > 0 else "no"][lang]
    if math.isnan(value) or math.isinf(value):
        return sign + number(value)
    if u.kind == "seconds":
        return sign + seconds(value, lang)
    if u.kind in ("percent", "ratio"):
        pct = value * 100 if u.kind == "ratio" else value
        if signed:  # a difference of two percentages
            return f"{sign}{number(pct)} {WORDS['pp'][lang]}"
        return f"{number(pct)} %"
    if u.kind == "factor":
        return f"{sign}×{number(value)}"
    if u.kind == "bytes":
        return sign + size(value * u.scale) + (u.zh if lang == "zh" else u.en)
    if u.kind == "count":
        if lang == "zh":
            return f"{sign}{number(value)} {u.zh}"
        return f"{sign}{number(value)} {u.en_one if value == 1 else u.en}"
    if u.kind == "rate":
        return f"{sign}{number(value)} {u.zh if lang == 'zh' else u.en}"
    return sign + number(value)


def seconds(value: float, lang: str = "en") -> str:
    magnitude = abs(value)
    if magnitude == 0:
        return "0 s"
    if magnitude < 1:
        return f"{number(value * 1000)} ms"
    if magnitude < 120:
        return f"{number(value)} s"
    if magnitude < 7200:
        return f"{number(value / 60)} min"
    if magnitude < 172800:
        return f"{number(value / 3600)} h"
    return f"{number(value / 86400)} d"


def size(value: float) -> str:
    for suffix, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(value) >= scale:
            return f"{_significant(value / scale)} {suffix}"
    return f"{number(value)} B"


def factor(value: float | None) -> str:
    return "n/a" if value is None else f"×{number(value)}"
