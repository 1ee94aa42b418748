"""The concrete fleet a scenario describes: pod names, IPs, nodes, GPU UUIDs, gateway ids, key hashes.

Identities are derived from names only (never from the seed), so the same scenario names the
same pods in every run; pods follow the Deployment pattern `<deployment>-<replicaset hash>-<id>`.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from diagnosd.sim.scenario import TARGET, Deployment, Fleet, Group, Key

# Kubernetes' rand.SafeEncodeString alphabet (no vowels, no look-alikes).
_SAFE = "bcdfghjklmnpqrstvwxz2456789"


@dataclass(frozen=True)
class Gpu:
    index: int
    uuid: str
    pci_bus_id: str


@dataclass(frozen=True)
class Pod:
    key: str  # pod/<deployment>/<index>
    deployment: Deployment
    replica: int
    name: str
    namespace: str
    uid: str
    ip: str
    node: str
    node_ip: str
    gpus: tuple[Gpu, ...]
    # The LiteLLM deployment this pod backs (one per pod).
    model_id: str
    api_base: str

    @property
    def litellm_model(self) -> str:
        # kwargs["model"] after get_llm_provider: LiteLLM strips the provider prefix of the
        # configured hosted_vllm/<name>, so `model` / `litellm_model_name` read the served name.
        return self.deployment.model_name


@dataclass(frozen=True)
class ApiKey:
    spec: Key
    hashed: str


@dataclass(frozen=True)
class Layout:
    fleet: Fleet
    pods: tuple[Pod, ...]
    keys: tuple[ApiKey, ...]

    def pod(self, key: str) -> Pod:
        return next(p for p in self.pods if p.key == key)

    def group_of(self, pod: Pod) -> Group | None:
        if self.fleet.gateway is None:
            return None
        return next((g for g in self.fleet.gateway.groups if pod.deployment.name in g.deployments), None)

    def group_pods(self, group: Group) -> list[Pod]:
        return [p for p in self.pods if p.deployment.name in group.deployments]

    def labels(self, target: str, names: Mapping[str, str] | None = None) -> dict[str, str]:
        """The diagnosis target labels of a scenario target (pod/…, served/…, group/…, key/…, model/…).

        `names` gives the current name of pods replaced during the run (by pod key).
        """
        match = TARGET.match(target)
        assert match is not None
        kind, name = match.group("kind"), match.group("name")
        if kind == "pod":
            pod = self.pod(target)
            return {"namespace": pod.namespace, "pod": (names or {}).get(pod.key, pod.name)}
        if kind == "group":
            return {"model_group": name}
        if kind == "key":
            return {"hashed_api_key": next(k.hashed for k in self.keys if k.spec.alias == name)}
        if kind == "served":
            deployment = next(d for d in self.fleet.deployments if d.name == name)
            return {"namespace": self.fleet.namespace, "model_name": deployment.model_name}
        if kind == "model":
            model = next(p.litellm_model for p in self.pods if p.deployment.model_name.split("/")[-1] == name)
            return {"model": model}
        return {"namespace": self.fleet.namespace, "deployment": name}


def layout(fleet: Fleet) -> Layout:
    pods: list[Pod] = []
    for deployment in fleet.deployments:
        for replica in range(deployment.replicas):
            n = len(pods) + 1
            name = pod_name(deployment.name, replica, 0)
            node = f"gpu-node-{n:02d}"
            gpus = tuple(
                Gpu(i, f"GPU-{uuid.UUID(bytes=_digest(f'{node}/{i}', 16))}", f"00000000:{0x18 + 0x10 * i:02X}:00.0")
                for i in range(deployment.gpu.count)
            )
            pods.append(
                Pod(
                    key=f"pod/{deployment.name}/{replica}",
                    deployment=deployment,
                    replica=replica,
                    name=name,
                    namespace=fleet.namespace,
                    uid=pod_uid(name),
                    ip=f"10.42.{n}.{10 + replica}",
                    node=node,
                    node_ip=f"10.0.1.{10 + n}",
                    gpus=gpus,
                    model_id=hashlib.sha256(f"deployment/{name}".encode()).hexdigest(),
                    api_base=f"http://{name}.{deployment.name}.{fleet.namespace}.svc:8000/v1",
                )
            )
    keys: tuple[ApiKey, ...] = ()
    if fleet.gateway is not None:
        keys = tuple(
            ApiKey(k, hashlib.sha256(f"sk-{_safe(k.alias, 22)}".encode()).hexdigest()) for k in fleet.gateway.keys
        )
    return Layout(fleet, tuple(pods), keys)


def pod_name(deployment: str, replica: int, generation: int) -> str:
    """`<deployment>-<replicaset hash>-<5 characters>`; a replaced pod gets new characters."""
    suffix = f"{deployment}/{replica}" + (f"/{generation}" if generation else "")
    return f"{deployment}-{_safe(deployment, 10)}-{_safe(suffix, 5)}"


def pod_uid(name: str) -> str:
    return str(uuid.UUID(bytes=_digest(f"uid/{name}", 16)))


def _digest(text: str, size: int) -> bytes:
    return hashlib.blake2b(text.encode(), digest_size=size).digest()


def _safe(text: str, length: int) -> str:
    raw = _digest(text, length)
    return "".join(_SAFE[b % len(_SAFE)] for b in raw)
