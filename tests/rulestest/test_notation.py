"""promtool's expanding notation, as the series tests use it."""

from __future__ import annotations

import pytest

from diagnosd.errors import NotationError
from diagnosd.rulestest.notation import expand, series


@pytest.mark.parametrize(
    ("text", "values"),
    [
        ("1+2x3", [1, 3, 5, 7]),
        ("10-1x2", [10, 9, 8]),
        ("5x2", [5, 5, 5]),
        ("_ 1 _x2 stale", [None, 1, None, None, None]),
        ("1e3+1e3x1", [1000, 2000]),
        ("-1+1x2", [-1, 0, 1]),
        ("0.5", [0.5]),
    ],
)
def test_expand(text: str, values: list[float | None]) -> None:
    assert expand(text) == values


@pytest.mark.parametrize("text", ["1+x3", "abc", "1+2xq", "_xq"])
def test_bad_notation_names_the_token(text: str) -> None:
    with pytest.raises(NotationError, match=r"cannot read|not a number|whole number"):
        expand(text)


def test_series_parses_name_and_escaped_labels() -> None:
    assert series('vllm:x_total{pod="a\\"b",namespace="n"}') == ("vllm:x_total", {"pod": 'a"b', "namespace": "n"})
    with pytest.raises(NotationError, match="only label"):
        series('x{pod=~"a"}')
