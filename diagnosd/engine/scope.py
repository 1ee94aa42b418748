"""A scope: label = value pairs that narrow a diagnosis (from --match, REST query or an alert), and
for a coalesced batch of alerts, labels that may take any of several values (their targets)."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from diagnosd.errors import ScopeError
from diagnosd.trees.model import LABEL_NAME

# No label value of a real series is this long; a longer one is an attack or a mistake.
MAX_VALUE = 1024
# The most values of one label a scope of choices names (every query carries a regex of them all);
# past it the label is left out, and the scope reads more targets.
MAX_CHOICES = 256


@dataclass(frozen=True)
class Scope:
    pairs: tuple[tuple[str, str], ...] = ()
    # Labels whose value is any of several, each with its values sorted (none in `pairs`).
    choices: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @classmethod
    def of(cls, labels: Mapping[str, str]) -> Scope:
        for name, value in labels.items():
            _check(name, value)
        return cls(tuple(sorted(labels.items())))

    @classmethod
    def among(cls, labels: Mapping[str, Collection[str]]) -> Scope:
        """Each label any of its values: a label with one value is a pair, as in `of`."""
        pairs: dict[str, str] = {}
        choices: list[tuple[str, tuple[str, ...]]] = []
        for name, values in sorted(labels.items()):
            if not values:
                raise ScopeError(name, "no value to choose from")
            for value in values:
                _check(name, value)
            distinct = tuple(sorted(set(values)))
            if len(distinct) == 1:
                pairs[name] = distinct[0]
            else:
                choices.append((name, distinct))
        return cls(tuple(sorted(pairs.items())), tuple(choices))

    def values(self) -> list[tuple[str, tuple[str, ...]]]:
        """Every label with the values it may take (one for a pair), by label."""
        return sorted([*((name, (value,)) for name, value in self.pairs), *self.choices])

    @classmethod
    def parse(cls, items: Iterable[str]) -> Scope:
        """From `LABEL=VALUE` strings (the value may hold anything, `=` included)."""
        labels: dict[str, str] = {}
        for item in items:
            name, sep, value = item.partition("=")
            if not sep:
                raise ScopeError(item, "expected LABEL=VALUE")
            if name in labels:
                raise ScopeError(name, "given twice")
            labels[name] = value
        return cls.of(labels)

    def as_dict(self) -> dict[str, str]:
        """The labels with one value (what every target in scope shares)."""
        return dict(self.pairs)

    def narrowed(self, targets: Sequence[Mapping[str, str]]) -> Scope:
        """This scope narrowed to `targets` (each a target's labels): each label every one of them
        carries takes the values they carry it with (covering); the scope's other labels stay."""
        wanted: dict[str, Collection[str]] = dict(self.values())
        carried = [{name: value for name, value in target.items() if value} for target in targets]
        return Scope.among(wanted | covering(carried))


def covering(label_sets: Iterable[Mapping[str, str]]) -> dict[str, set[str]]:
    """Each label every set holds, with the values they hold it with; a label with more than
    MAX_CHOICES values is left out."""
    covered: dict[str, set[str]] | None = None
    for labels in label_sets:
        if covered is None:
            covered = {name: {value} for name, value in labels.items()}
        else:
            covered = {name: {*values, labels[name]} for name, values in covered.items() if name in labels}
    return {name: values for name, values in (covered or {}).items() if len(values) <= MAX_CHOICES}


def _check(name: str, value: str) -> None:
    if not LABEL_NAME.match(name):
        raise ScopeError(name, "label names are [a-zA-Z_][a-zA-Z0-9_]*")
    if name.startswith("__"):
        raise ScopeError(name, "labels starting with __ are reserved")
    if not isinstance(value, str):
        raise ScopeError(name, "the value must be a string")
    if len(value) > MAX_VALUE:
        raise ScopeError(name, f"the value is longer than {MAX_VALUE} characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ScopeError(name, f"the value is not valid unicode: {error.reason}") from error
