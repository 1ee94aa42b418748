"""Scopes: covering a set of targets or alerts' scopes with choices, and narrowing a scope to targets."""

from __future__ import annotations

import pytest

from diagnosd.engine.scope import MAX_CHOICES, Scope, covering
from diagnosd.errors import ScopeError


def test_the_covering_scope_keeps_the_labels_every_alert_holds_with_all_their_values() -> None:
    scopes = [
        {"namespace": "prod", "pod": "vllm-0", "model_name": "llama"},
        {"namespace": "prod", "pod": "vllm-1", "model_name": "llama"},
        {"namespace": "prod", "pod": "vllm-2"},
    ]
    assert covering(scopes) == {"namespace": {"prod"}, "pod": {"vllm-0", "vllm-1", "vllm-2"}}
    assert covering(scopes[:2]) == {"namespace": {"prod"}, "pod": {"vllm-0", "vllm-1"}, "model_name": {"llama"}}
    assert covering(scopes[:1]) == {name: {value} for name, value in scopes[0].items()}
    assert covering([]) == {}


def test_a_label_with_more_values_than_the_bound_is_left_out() -> None:
    scopes = [{"namespace": "prod", "pod": f"vllm-{n}"} for n in range(MAX_CHOICES + 1)]
    assert covering(scopes) == {"namespace": {"prod"}}
    assert len(covering(scopes[:MAX_CHOICES])["pod"]) == MAX_CHOICES


def test_a_scope_narrowed_to_targets_takes_their_values_and_keeps_its_own_labels() -> None:
    scope = Scope.of({"namespace": "prod", "model_name": "llama"})
    targets = [{"namespace": "prod", "pod": "vllm-3"}, {"namespace": "prod", "pod": "vllm-10"}]
    narrowed = scope.narrowed(targets)
    assert narrowed.pairs == (("model_name", "llama"), ("namespace", "prod"))
    assert narrowed.choices == (("pod", ("vllm-10", "vllm-3")),)
    assert scope.narrowed(targets[:1]) == Scope.of({"namespace": "prod", "model_name": "llama", "pod": "vllm-3"})


def test_narrowing_a_scope_of_choices_keeps_only_the_targets_values() -> None:
    scope = Scope.among({"pod": ["vllm-1", "vllm-2", "vllm-3"]})
    assert scope.narrowed([{"pod": "vllm-2"}]) == Scope.of({"pod": "vllm-2"})


def test_a_label_a_target_lacks_or_has_empty_is_not_narrowed() -> None:
    # A target keyed without one of its labels ("" for a series that lacks it) covers every value.
    scope = Scope.of({"namespace": "prod"})
    assert scope.narrowed([{"namespace": "prod", "pod": ""}, {"namespace": "prod", "pod": "vllm-1"}]) == scope
    assert scope.narrowed([{"pod": "vllm-1"}, {"namespace": "prod", "pod": "vllm-2"}]).choices == (
        ("pod", ("vllm-1", "vllm-2")),
    )


def test_past_the_bound_a_label_stays_as_the_scope_had_it() -> None:
    scope = Scope.of({"namespace": "prod"})
    many = [{"namespace": "prod", "pod": f"vllm-{n}"} for n in range(MAX_CHOICES + 1)]
    assert scope.narrowed(many) == scope


def test_a_narrowed_scope_checks_its_values_as_any_scope_does() -> None:
    with pytest.raises(ScopeError, match="longer than"):
        Scope().narrowed([{"pod": "x" * 2000}])
