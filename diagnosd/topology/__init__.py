"""Topology: which series name a target, and the named joins that reach everything else.

Scope matchers narrow only series that identify the diagnosed target (`levels`); node, GPU,
workload and autoscaler series are joined to it through the recipes of `recipes`, written once
and referenced from rules as `@name` or `@name(expr)`.
"""

from diagnosd.topology.levels import Level, exporter_labels_renamed, level_of
from diagnosd.topology.recipes import DEFAULT, JOIN_MARK, RECIPES, UNSCOPED_MARK, Topology, expand, recipe_refs

__all__ = [
    "DEFAULT",
    "JOIN_MARK",
    "RECIPES",
    "UNSCOPED_MARK",
    "Level",
    "Topology",
    "expand",
    "exporter_labels_renamed",
    "level_of",
    "recipe_refs",
]
