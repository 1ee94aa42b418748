"""The engine: walks a Tree for a Scope at a time through an injected QuerySource. No I/O of its own."""

from diagnosd.engine.evaluator import Evaluator, Looking
from diagnosd.engine.scope import Scope

__all__ = ["Evaluator", "Looking", "Scope"]
