"""A small reader for the repository's Dockerfile: its instructions, stages, ENV, COPY and exec forms.

Enough for the static checks in test_dockerfile.py (no Docker engine runs here); not a general parser.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import REPO

DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
ARG_REF = re.compile(r"\$\{(\w+)\}|\$(\w+)")


@dataclass(frozen=True)
class Instruction:
    keyword: str
    text: str
    line: int


@dataclass(frozen=True)
class Copy:
    sources: list[str]
    destination: str
    stage: str | None  # --from=STAGE, or None for the build context


@dataclass
class Stage:
    image: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]

    def env(self) -> dict[str, str]:
        values: dict[str, str] = {}
        for instruction in self.all("ENV"):
            for item in shlex.split(instruction.text):
                name, _, value = item.partition("=")
                values[name] = value
        return values

    def copies(self) -> list[Copy]:
        out = []
        for instruction in self.all("COPY"):
            words = shlex.split(instruction.text)
            flags = [w for w in words if w.startswith("--")]
            paths = [w for w in words if not w.startswith("--")]
            stage = next((f.split("=", 1)[1] for f in flags if f.startswith("--from=")), None)
            out.append(Copy(paths[:-1], paths[-1], stage))
        return out


def instructions(path: Path = DOCKERFILE) -> list[Instruction]:
    """Logical instructions: comments dropped, backslash continuations joined."""
    out: list[Instruction] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if not pending:
            start = number
        pending.append(line.removesuffix("\\").strip())
        if not line.endswith("\\"):
            keyword, _, text = " ".join(pending).partition(" ")
            out.append(Instruction(keyword.upper(), text.strip(), start))
            pending = []
    assert not pending, f"{path}: the last instruction ends with a continuation"
    return out


def stages(path: Path = DOCKERFILE) -> list[Stage]:
    """The build stages in order; ARGs declared before the first FROM are substituted in FROM."""
    args: dict[str, str] = {}
    found: list[Stage] = []
    for instruction in instructions(path):
        if instruction.keyword == "ARG" and not found:
            arg, _, default = instruction.text.partition("=")
            args[arg] = default
        elif instruction.keyword == "FROM":
            words = instruction.text.split()
            image = ARG_REF.sub(lambda m: args.get(m.group(1) or m.group(2), m.group(0)), words[0])
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            found.append(Stage(image, name))
        else:
            assert found, f"{instruction.keyword} before FROM (line {instruction.line})"
            found[-1].instructions.append(instruction)
    return found


def exec_form(instruction: Instruction) -> list[str]:
    """ENTRYPOINT/CMD/VOLUME in JSON (exec) form; a shell form fails the test that asks."""
    value = json.loads(instruction.text)
    assert isinstance(value, list), instruction
    assert all(isinstance(v, str) for v in value), instruction
    return value


def ignored(relative: str, path: Path = DOCKERIGNORE) -> bool:
    """Whether .dockerignore keeps `relative` (a path in the build context) out of the context.

    Docker's rules as far as the patterns used here go: the last matching pattern wins, `!` re-includes,
    `**` spans directories, and a pattern matching a directory excludes all below it.
    """
    verdict = False
    for raw in path.read_text().splitlines():
        pattern = raw.strip()
        if not pattern or pattern.startswith("#"):
            continue
        negate = pattern.startswith("!")
        pattern = pattern.removeprefix("!").strip("/")
        if _matches(pattern, relative.strip("/")):
            verdict = not negate
    return verdict


def _matches(pattern: str, relative: str) -> bool:
    regex = re.escape(pattern).replace(r"\*\*/", "(.*/)?").replace(r"\*\*", ".*").replace(r"\*", "[^/]*")
    regex = regex.replace(r"\?", "[^/]")
    return re.fullmatch(f"{regex}(/.*)?", relative) is not None
