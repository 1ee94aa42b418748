"""A tree's params with per-deployment overrides applied, and the values they turn into."""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import timedelta

from diagnosd.errors import ParamError
from diagnosd.trees import promql
from diagnosd.trees.model import DURATION, Tree
from diagnosd.trees.promql import refs

Params = dict[str, float | str]


def effective(tree: Tree, overrides: Mapping[str, float | str] | None = None) -> Params:
    """Defaults overridden by `overrides`; each override keeps the kind (number or duration) of its default."""
    values: Params = {name: p.default for name, p in tree.params.items()}
    for name, raw in (overrides or {}).items():
        if name not in tree.params:
            raise ParamError(tree.id, name, f"no such param (known: {', '.join(sorted(tree.params)) or 'none'})")
        values[name] = _coerce(tree.id, name, raw, tree.params[name].default)
    return values


def _coerce(tree: str, name: str, raw: float | str, default: float | str) -> float | str:
    if isinstance(default, str):
        text = str(raw)
        if not DURATION.match(text):
            raise ParamError(tree, name, f"{raw!r} is not a duration such as 10m or 1d")
        return text
    try:
        return float(raw)
    except (TypeError, ValueError):
        raise ParamError(tree, name, f"{raw!r} is not a number") from None


def resolve(value: float | str, params: Mapping[str, float | str]) -> float | str:
    """A literal, or the value of the `$param` it names (validated at load time to exist)."""
    if isinstance(value, str) and value.startswith("$"):
        return params[value[1:]]
    return value


def number(value: float | str, params: Mapping[str, float | str]) -> float:
    """A threshold: a literal number or `$param` (validated at load time to name a number)."""
    return float(resolve(value, params))


def duration(value: str, params: Mapping[str, float | str]) -> timedelta:
    """A window or baseline: a literal duration or `$param`."""
    return promql.parse_duration(str(resolve(value, params)))


def assumed_in(text: str, tree: Tree, params: Mapping[str, float | str]) -> dict[str, float | str]:
    """The assumed params (no exporter publishes them) that a query or threshold mentions.

    An infinite value is a limit left unset (`max_num_seqs: .inf`: decided from the data): nothing
    was assumed, so it is not listed.
    """
    mentioned = refs(text)
    return {
        name: params[name]
        for name, spec in tree.params.items()
        if spec.assumed and name in mentioned and not _unset(params[name])
    }


def _unset(value: float | str) -> bool:
    return isinstance(value, float) and math.isinf(value)
