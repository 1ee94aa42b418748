"""Every relative link in README.md and docs/*.md points at a file or directory the repository has."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import REPO

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
# Documents this repository does not have, which older text used to cite.
GONE = ("CATALOG.md", "DESIGN.md", "reference trap")


def _relative_links(doc: Path) -> list[str]:
    links = [m.group(1) for m in LINK.finditer(doc.read_text(encoding="utf-8"))]
    return [link for link in links if not re.match(r"[a-z][a-z0-9+.-]*:", link) and not link.startswith("#")]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(doc: Path) -> None:
    missing = [link for link in _relative_links(doc) if not (doc.parent / link.split("#")[0]).exists()]
    assert missing == [], f"{doc.name} links to missing files: {missing}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_no_document_cites_what_is_not_here(doc: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    assert [name for name in GONE if name in text] == []


def test_the_readme_links_the_seed() -> None:
    assert "docs/seed/troubleshooting-trees.zh.txt" in _relative_links(REPO / "README.md")
