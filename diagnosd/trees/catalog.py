"""The catalog (rules/catalog.yaml): the stable ids of every symptom and cause, and their kinds.

Trees are validated against it: a tree's id is a catalog symptom and every catalog cause of that
symptom appears in the tree (a tree may add causes, never drop one).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from diagnosd.trees.model import Id, Strict, Text

CATALOG_FILE = "catalog.yaml"


class CatalogCause(Strict):
    id: Id
    # CATALOG.md kinds: M metric, C config, D derived, H human; "H/D" and the like where it says so.
    kind: Annotated[str, Field(pattern=r"^[MCDHx](/[MCDHx])*$")]


class CatalogSymptom(Strict):
    id: Id
    title: Text
    target: list[str]
    causes: list[CatalogCause]


class Catalog(Strict):
    symptoms: list[CatalogSymptom]

    def symptom(self, symptom_id: str) -> CatalogSymptom | None:
        return next((s for s in self.symptoms if s.id == symptom_id), None)
