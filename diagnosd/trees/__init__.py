"""Trees as data: the YAML format, its validation, and the catalog of stable ids."""

from diagnosd.trees.catalog import Catalog
from diagnosd.trees.loader import RuleSet, load_rules
from diagnosd.trees.model import (
    AnyNode,
    Basis,
    CheckNode,
    Compare,
    Conclusion,
    GroupNode,
    ManualNode,
    Severity,
    Text,
    Tree,
    walk,
)

__all__ = [
    "AnyNode",
    "Basis",
    "Catalog",
    "CheckNode",
    "Compare",
    "Conclusion",
    "GroupNode",
    "ManualNode",
    "RuleSet",
    "Severity",
    "Text",
    "Tree",
    "load_rules",
    "walk",
]
