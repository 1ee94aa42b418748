"""promtool's expanding notation for test series: `1+2x3` is 1 3 5 7, `_x2` two missing samples."""

from __future__ import annotations

import re

import promql_parser as pp

from diagnosd.errors import NotationError

# a+bxN, a-bxN, axN; `a` may carry its own sign and exponent (1e+3), so split on the last +/-
# that does not follow an `e`.
STEP = re.compile(r"^(?P<a>.+?)(?:(?P<op>(?<![eE])[+-])(?P<b>[^+-]+))?x(?P<n>\d+)$")


def expand(values: str) -> list[float | None]:
    """The sample values, `None` where a sample is missing (`_`, `stale`)."""
    out: list[float | None] = []
    for token in values.split():
        out.extend(_token(token))
    return out


def _token(token: str) -> list[float | None]:
    if token in ("_", "stale"):
        return [None]
    if token.startswith("_x"):
        return [None] * _count(token[2:], token)
    if "x" not in token:
        return [_float(token, token)]
    match = STEP.match(token)
    if not match:
        raise NotationError(f"cannot read {token!r}: expected a, a+bxN, a-bxN, axN, _ or _xN")
    start = _float(match.group("a"), token)
    step = _float(match.group("b"), token) if match.group("b") else 0.0
    if match.group("op") == "-":
        step = -step
    return [start + step * i for i in range(_count(match.group("n"), token) + 1)]


def _float(text: str, token: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise NotationError(f"{text!r} in {token!r} is not a number") from None


def _count(text: str, token: str) -> int:
    if not text.isdigit():
        raise NotationError(f"{token!r}: the count after x must be a whole number")
    return int(text)


def series(text: str) -> tuple[str, dict[str, str]]:
    """`name{a="b"}` into its metric name and labels (only `=` matchers make sense here)."""
    try:
        expr = pp.parse(text)
    except ValueError as error:
        raise NotationError(f"series {text!r} does not parse: {error}") from None
    if not isinstance(expr, pp.VectorSelector) or not expr.name:
        raise NotationError(f'series {text!r} must be a metric name with optional {{label="value"}}')
    labels: dict[str, str] = {}
    for matcher in expr.matchers.matchers:
        if str(matcher.op) != "MatchOp.Equal":
            raise NotationError(f'series {text!r}: only label="value" pairs are allowed')
        labels[matcher.name] = matcher.value
    return expr.name, labels
