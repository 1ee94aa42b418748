"""Named join recipes, expanded in a tree's query text before it is parsed.

A rule writes `@pod_node` (a recipe without argument) or `@node(EXPR)` (a recipe over an
expression) where it would otherwise re-derive a join by hand with `label_replace`. `@` followed
by a name is never valid PromQL (the `@` modifier takes a number, `start()` or `end()`), so an
unexpanded reference cannot slip through: the loader rejects unknown names and wrong arities.

The recipes and the label conventions they accept:

- `@pod_node`: one series per pod (`namespace`, `pod`, `node`) from `kube_pod_info{node}` (or
  the `node` of its `kube_pod_container_resource_requests`).
- `@node(EXPR)`: EXPR with a `node` label naming the Kubernetes node, whichever way the node
  series name it: a `node` label; `instance` holding the node name (kube-prometheus-stack
  relabels node_exporter's instance so), with or without `:port`; or `instance` as `ip:port`,
  mapped to the node through `kube_pod_info{host_ip}` and `kube_node_info{internal_ip}`. A
  series whose key names no node keeps it as `node` and joins nothing.
- `@pod_deployment`, `@pod_statefulset`: (`namespace`, `pod`, `deployment` / `statefulset`) from
  `kube_pod_owner` and `kube_replicaset_owner`; `@pod_workload` is either, as (`workload_kind`,
  `workload`).
- `@pod_hpa`: (`namespace`, `pod`, `horizontalpodautoscaler`) through the pod's workload and
  `kube_horizontalpodautoscaler_info{scaletargetref_kind, scaletargetref_name}` (KEDA's
  `keda-hpa-*` objects included).
- `@canary`, `@stable`: label matchers, written inside a selector's braces
  (`vllm:x{@canary}`): the canary by a label (`track="canary"` by default) or by a pod-name
  pattern (`Topology.canary_pod_pattern`).
- `@unscoped(EXPR)`: EXPR is the population the target is compared with (a share's
  denominator, "every other tenant"): the diagnosis scope does not narrow its selectors.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import promql_parser as pp

# A label matcher that matches every series (none carries the label): marks the selectors of an
# `@unscoped(...)` part. The engine removes it and adds no scope matcher there.
UNSCOPED_MARK = "__diagnosd_unscoped__"
# Marks the selectors a recipe brings in itself (kube-state-metrics joins), as opposed to the
# rule's own: one of several alternative sources missing is no "metric absent" for the check.
JOIN_MARK = "__diagnosd_join__"
_KSM_SELECTOR = re.compile(r"\b(kube_[a-z_]+)(?:\{([^}]*)\})?")


def _joined(template: str) -> str:
    """`template` (recipe text without a rule's expression in it) with its selectors marked."""

    def one(match: re.Match[str]) -> str:
        inner = match.group(2)
        return f'{match.group(1)}{{{inner + ", " if inner else ""}{JOIN_MARK}=""}}'

    return _KSM_SELECTOR.sub(one, template)


REF = re.compile(r"@([a-z][a-z0-9_]*)")


@dataclass(frozen=True)
class Topology:
    """Deployment conventions the recipes read."""

    canary_label: str = "track"
    canary_value: str = "canary"
    # A regex over the pod name (e.g. ".+-canary-.+"); when set it decides instead of the label.
    canary_pod_pattern: str | None = None


DEFAULT = Topology()

# The node name a node series names in `node` (or, failing that, in `instance` without its port).
_NODE_KEY = (
    'label_replace(label_replace(label_join({e}, "node_key_", ";", "node", "instance"), '
    '"node", "$1", "node_key_", ";([^:]+)(:[0-9]+)?"), "node_key_", "", "", "")'
)
# host IP -> node name: every node's kube_node_info{internal_ip}, else the host_ip of the pods that
# run there (one node per IP: a node re-created under another name keeps its IP for a while).
_NODE_IPS = (
    'group by (host_ip, node) (label_replace(kube_node_info{internal_ip!=""}, "host_ip", "$1", "internal_ip", "(.+)"))'
)
_HOST_MAP = _joined(
    f"@unscoped({_NODE_IPS} or topk by (host_ip) (1, group by (host_ip, node) "
    f'(kube_pod_info{{host_ip!="", node!=""}}) unless on (host_ip) {_NODE_IPS}))'
)
_IPV4 = "([0-9]+[.][0-9]+[.][0-9]+[.][0-9]+)"


def _node(arg: str, _: Topology) -> str:
    keyed = _NODE_KEY.format(e=f"({arg})")
    return (
        f'(label_replace({keyed}, "host_ip", "$1", "node", "{_IPV4}") * on (host_ip) group_left (node) ({_HOST_MAP})'
        f" or {keyed})"
    )


def _pod_node(_: str, __: Topology) -> str:
    return (
        'group by (namespace, pod, node) (kube_pod_info{node!=""})'
        ' or group by (namespace, pod, node) (kube_pod_container_resource_requests{node!=""})'
    )


def _owned(kind: str, label: str) -> str:
    """(namespace, pod, LABEL) for pods whose controller is a `kind`."""
    return (
        f"group by (namespace, pod, {label}) ("
        f'label_replace(kube_pod_owner{{owner_kind="{kind}"}},'
        f' "{label}", "$1", "owner_name", "(.+)"))'
    )


def _pod_deployment(_: str, __: Topology) -> str:
    return (
        "group by (namespace, pod, deployment) (label_replace("
        f"{_owned('ReplicaSet', 'replicaset')}"
        " * on (namespace, replicaset) group_left (owner_name)"
        ' group by (namespace, replicaset, owner_name) (kube_replicaset_owner{owner_kind="Deployment"}),'
        ' "deployment", "$1", "owner_name", "(.+)"))'
    )


def _pod_statefulset(_: str, __: Topology) -> str:
    return _owned("StatefulSet", "statefulset")


def _as_workload(recipe: str, label: str, kind: str) -> str:
    copied = f'label_replace(@{recipe}, "workload", "$1", "{label}", "(.+)")'
    return f'label_replace({copied}, "workload_kind", "{kind}", "", "")'


def _pod_workload(_: str, __: Topology) -> str:
    return (
        "group by (namespace, pod, workload_kind, workload) ("
        f"{_as_workload('pod_deployment', 'deployment', 'Deployment')}"
        f" or {_as_workload('pod_statefulset', 'statefulset', 'StatefulSet')})"
    )


def _pod_hpa(_: str, __: Topology) -> str:
    return (
        "group by (namespace, pod, horizontalpodautoscaler) ("
        "@pod_workload * on (namespace, workload_kind, workload) group_left (horizontalpodautoscaler)"
        " group by (namespace, workload_kind, workload, horizontalpodautoscaler) (label_replace(label_replace("
        'kube_horizontalpodautoscaler_info, "workload", "$1", "scaletargetref_name", "(.+)"),'
        ' "workload_kind", "$1", "scaletargetref_kind", "(.+)")))'
    )


def _canary(_: str, topology: Topology) -> str:
    if topology.canary_pod_pattern is not None:
        return f"pod=~{_quote(topology.canary_pod_pattern)}"
    return f"{topology.canary_label}={_quote(topology.canary_value)}"


def _stable(_: str, topology: Topology) -> str:
    if topology.canary_pod_pattern is not None:
        return f"pod!~{_quote(topology.canary_pod_pattern)}"
    return f"{topology.canary_label}!={_quote(topology.canary_value)}"


def _unscoped(arg: str, _: Topology) -> str:
    def visit(node: pp.Expr) -> pp.Expr | None:
        if not isinstance(node, pp.VectorSelector):
            return None
        if any(m.name == UNSCOPED_MARK for m in node.matchers.matchers):
            return None
        node.matchers = pp.Matchers([*node.matchers.matchers, pp.Matcher(pp.MatchOp.Equal, UNSCOPED_MARK, "")])
        return pp.parse(str(node))

    try:
        expr = pp.parse(arg)
    except ValueError as error:
        raise ValueError(f"@unscoped(...): {error}") from error
    return f"({pp.transform(expr, pre_visit=visit)})"


@dataclass(frozen=True)
class Recipe:
    takes_expr: bool
    build: Callable[[str, Topology], str]
    doc: str
    matchers: bool = False  # expands to label matchers (inside braces), not to an expression


RECIPES: Mapping[str, Recipe] = {
    "pod_node": Recipe(False, _pod_node, "pods with their node (namespace, pod, node)"),
    "node": Recipe(True, _node, "an expression over node series, keyed by the node's name in `node`"),
    "pod_deployment": Recipe(False, _pod_deployment, "pods with their Deployment (namespace, pod, deployment)"),
    "pod_statefulset": Recipe(False, _pod_statefulset, "pods with their StatefulSet (namespace, pod, statefulset)"),
    "pod_workload": Recipe(False, _pod_workload, "pods with their workload (namespace, pod, workload_kind, workload)"),
    "pod_hpa": Recipe(
        False, _pod_hpa, "pods with the HPA that scales their workload (namespace, pod, horizontalpodautoscaler)"
    ),
    "canary": Recipe(False, _canary, "matchers selecting the canary (inside a selector's braces)", matchers=True),
    "stable": Recipe(False, _stable, "matchers selecting everything but the canary (inside braces)", matchers=True),
    "unscoped": Recipe(True, _unscoped, "an expression the diagnosis scope does not narrow"),
}


def recipe_refs(text: str) -> set[str]:
    """The recipe names a query mentions."""
    return set(REF.findall(_without_strings(text)))


def expand(text: str, topology: Topology | None = None) -> str:
    """`text` with every recipe reference replaced by its PromQL; ValueError on a bad reference."""
    topology = topology or DEFAULT
    for _ in range(16):  # recipes may use recipes; a fixed depth bounds a mistake
        out = _expand_once(text, topology)
        if out == text:
            return out
        text = out
    raise ValueError("recipes nest too deep")


def _expand_once(text: str, topology: Topology) -> str:
    out: list[str] = []
    pos = 0
    strings = _string_spans(text)
    for match in REF.finditer(text):
        if match.start() < pos or any(a <= match.start() < b for a, b in strings):
            continue
        name = match.group(1)
        recipe = RECIPES.get(name)
        if recipe is None:
            raise ValueError(f"unknown recipe @{name} (known: {', '.join('@' + n for n in sorted(RECIPES))})")
        end = match.end()
        arg = ""
        if recipe.takes_expr:
            if end >= len(text) or text[end] != "(":
                raise ValueError(f"@{name} takes an expression: @{name}(...)")
            close = _closing(text, end, strings)
            arg = text[end + 1 : close]
            if not arg.strip():
                raise ValueError(f"@{name}() needs an expression")
            arg = expand(arg, topology)
            end = close + 1
        out.append(text[pos : match.start()])
        built = recipe.build(arg, topology)
        if not recipe.takes_expr and not recipe.matchers:
            built = _joined(built)
        # An expression recipe is one operand wherever it stands: `@pod_node * on (node) ...`.
        out.append(built if recipe.matchers else f"({built})")
        pos = end
    out.append(text[pos:])
    return "".join(out)


def _closing(text: str, open_at: int, strings: list[tuple[int, int]]) -> int:
    """The parenthesis closing the one at `open_at`, skipping those inside string literals."""
    depth = 0
    for i in range(open_at, len(text)):
        if text[i] not in "()" or any(a <= i < b for a, b in strings):
            continue
        depth += 1 if text[i] == "(" else -1
        if depth == 0:
            return i
    raise ValueError("unbalanced parentheses after a recipe reference")


def _string_spans(text: str) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    quote: str | None = None
    start = 0
    i = 0
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                spans.append((start, i + 1))
                quote = None
        elif ch in "\"'`":
            quote, start = ch, i
        i += 1
    return spans


def _without_strings(text: str) -> str:
    out, pos = [], 0
    for a, b in _string_spans(text):
        out.append(text[pos:a])
        pos = b
    out.append(text[pos:])
    return "".join(out)


def _quote(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)
