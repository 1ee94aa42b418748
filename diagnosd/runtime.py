"""The composition root: builds rules, sources and the engine from settings. Nothing at import time."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from diagnosd.engine import Evaluator
from diagnosd.sources import PrometheusConfig, PrometheusSource
from diagnosd.trees import RuleSet, load_rules
from diagnosd.trees.aliases import Aliases, load_aliases

RULES_ENV = "DIAGNOSD_RULES_DIR"


def default_rules_dir() -> Path:
    """$DIAGNOSD_RULES_DIR, the checkout's rules/, or the rules installed with the package."""
    if os.environ.get(RULES_ENV):
        return Path(os.environ[RULES_ENV])
    checkout = Path(__file__).resolve().parent.parent / "rules"
    if checkout.is_dir():
        return checkout
    return Path(sys.prefix) / "share" / "diagnosd" / "rules"


@dataclass(frozen=True)
class Rules:
    ruleset: RuleSet
    aliases: Aliases
    directory: Path


def load(directory: Path | None = None) -> Rules:
    """Load and validate rules; raises RulesError with every problem."""
    where = directory or default_rules_dir()
    return Rules(load_rules(where), load_aliases(where), where)


@asynccontextmanager
async def evaluator(
    config: PrometheusConfig, rules: Rules, strict_labels: tuple[str, ...] = ()
) -> AsyncIterator[Evaluator]:
    """An Evaluator on a PrometheusSource whose HTTP client lives as long as the context."""
    async with config.client() as client:
        yield Evaluator(PrometheusSource(config, client), rules.aliases, strict_labels=strict_labels)
