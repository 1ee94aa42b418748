"""The diagnosd container as the chart and the Dockerfile define it, laid out on this machine.

Volumes become directories under a scratch root (ConfigMap and Secret items as files, emptyDir and
PVC as empty directories, the image's COPY sources as the repository's own), and container paths in
the environment and arguments are rewritten to them. What runs is then the same command, settings
and files as in the pod, with the interpreter of this checkout instead of the image's virtualenv.
"""

from __future__ import annotations

import base64
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.conftest import REPO
from tests.deploy import dockerfile
from tests.deploy.chart import container, one

# External ConfigMaps the chart only refers to (rules.configMap): what a user would put there.
EXTERNAL_CONFIGMAPS = {"diagnosd-rules": REPO / "rules"}


@dataclass(frozen=True)
class Pod:
    argv: list[str]
    env: dict[str, str]
    cwd: Path
    mounts: dict[str, Path]  # container path -> directory or file here

    def host(self, container_path: str) -> Path:
        return Path(_rewrite(container_path, self.mounts))


def lay_out(manifests: list[dict[str, Any]], root: Path) -> Pod:
    spec = one(manifests, "Deployment")["spec"]["template"]["spec"]
    main = container(manifests)
    volumes = {v["name"]: v for v in spec["volumes"]}
    runtime = dockerfile.stages()[-1]
    mounts: dict[str, Path] = {}
    for copy in runtime.copies():
        if copy.stage is None:  # from the build context: the repository itself
            mounts[copy.destination.rstrip("/")] = REPO / copy.sources[0].rstrip("/")
    for mount in main["volumeMounts"]:
        target = root / mount["mountPath"].lstrip("/")
        _materialize(volumes[mount["name"]], mount.get("subPath"), target, manifests)
        mounts[mount["mountPath"]] = target
    image_env = {k: v for k, v in runtime.env().items() if k.startswith("DIAGNOSD_")}
    pod_env = {e["name"]: e["value"] for e in main.get("env", [])}
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIAGNOSD_")}
    env.update({k: _rewrite(v, mounts) for k, v in {**image_env, **pod_env}.items()})
    workdir = runtime.all("WORKDIR")[-1].text
    argv = [sys.executable, "-m", "diagnosd", *(_rewrite(a, mounts) for a in main["args"])]
    return Pod(argv, env, Path(_rewrite(workdir, mounts)), mounts)


def _materialize(volume: dict[str, Any], sub_path: str | None, target: Path, manifests: list[dict[str, Any]]) -> None:
    if "configMap" in volume:
        files = _configmap(volume["configMap"]["name"], manifests)
    elif "secret" in volume:
        files = _secret(volume["secret"], manifests)
    else:  # emptyDir, persistentVolumeClaim
        target.mkdir(parents=True, exist_ok=True)
        return
    if sub_path is not None:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(files[sub_path])
        return
    target.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        (target / name).write_bytes(content)


def _configmap(name: str, manifests: list[dict[str, Any]]) -> dict[str, bytes]:
    for manifest in manifests:
        if manifest["kind"] == "ConfigMap" and manifest["metadata"]["name"] == name:
            return {k: v.encode() for k, v in manifest["data"].items()}
    source = EXTERNAL_CONFIGMAPS[name]
    return {p.name: p.read_bytes() for p in sorted(source.glob("*.yaml"))}


def secret_files(manifests: list[dict[str, Any]], name: str) -> dict[str, bytes]:
    """The rendered Secret `name`, decoded: key -> content."""
    secret = next(m for m in manifests if m["kind"] == "Secret" and m["metadata"]["name"] == name)
    return {k: base64.b64decode(v) for k, v in secret["data"].items()}


def _secret(volume: dict[str, Any], manifests: list[dict[str, Any]]) -> dict[str, bytes]:
    data = secret_files(manifests, volume["secretName"])
    items = volume.get("items")
    return {i["path"]: data[i["key"]] for i in items} if items else data


def _rewrite(value: str, mounts: dict[str, Path]) -> str:
    """A container path under a mount (longest first) becomes the path here; other values stay."""
    for prefix in sorted(mounts, key=len, reverse=True):
        if value == prefix or value.startswith(prefix + "/"):
            return str(mounts[prefix]) + value[len(prefix) :]
    return value
