"""The VM tier's pod as the rendered manifest states it, planned on the host for the guest.

The guest has no container runtime and no PyYAML, so the host reads what a cluster owner
applies (`kubectl kustomize deploy/base`) and the images' entrypoints (`deploy/images`) with
the simulated node's own readers (`simnode.kubelet`: manifest, images, the assembler's env) and
writes, for each container in the kubelet's order, the argv, env and volumeMounts the guest
runs it with (`tests/vm/guest/pod.py`). Nothing is added that the manifest, its image or the
kubelet would not give the container: its argv is its image's ENTRYPOINT and CMD/args, its
env the manifest's (the downward API resolved for node `vm`), the `kubernetes` Service's
variables and the CDI edits of its claim.

The entrypoint of every image is the venv the image builds from its PEX; in the guest that
venv is the one the host made in the share (`tier.venv`), run as the kernel runs the image's
venv script: its python, `-sE` (the shebang `pex venv` writes), the script.

The guest is a throwaway node without mount namespaces, so each volume is the guest's real
path at its mountPath: a hostPath whose path is not its mountPath cannot be run there and is
a `PlanError`, as is a required Secret (the guest projects none).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Final, Literal

import yaml

from libdisplay import fsutil
from simnode.cluster import control
from simnode.kubelet import images
from simnode.kubelet.assemble import Assembler, CdiEdits, Machine
from simnode.kubelet.manifest import (
    Container,
    PodTemplate,
    Volume,
    daemonset,
    load_documents,
    pod_template,
)
from simnode.kubelet.volumes import PodVolumes
from simnode.node import card_cdi as simcard
from simnode.node.checkout import render
from simnode.node.pod_node import MODULEDIR

JsonObject = dict[str, Any]
Role = Literal["init", "sidecar", "main"]
NODE: Final = "vm"
POD_NAME: Final = "display-operator-vm"
API_HOST: Final = "127.0.0.1"
API_PORT: Final = 6443
"""Where the guest's fake API listens, in the pod's network namespace (the Service's address)."""
GUEST_VENVS: Final = PurePosixPath("/share/venv")
VENV_PYTHON: Final = "bin/python3.11"
VENV_SCRIPT: Final = "pex"
LAYOUT_SHELL: Final = PurePosixPath("/") / MODULEDIR / "layout-shell.so"
"""Where the weston image puts the layout shell (its Dockerfile: weston's MODULEDIR)."""
CARD_EDITS: Final = CdiEdits()
"""What the card's CDI device (liken's, here virtio-gpu without virgl) gives the containers
naming it: nothing; its device nodes and sysfs are the guest's own."""
PLAN: Final = PurePosixPath("pod/plan.json")
OBJECTS: Final = PurePosixPath("kube/objects.yaml")


class PlanError(Exception):
    """The manifest holds something the guest cannot run as stated; names the container and
    field."""


@dataclass(frozen=True, slots=True)
class MountPlan:
    volume: str
    kind: str
    path: str
    read_only: bool


@dataclass(frozen=True, slots=True)
class ContainerPlan:
    name: str
    role: Role
    argv: tuple[str, ...]
    env: Mapping[str, str]
    mounts: tuple[MountPlan, ...]
    drop_all_capabilities: bool

    def to_json(self) -> JsonObject:
        return {**asdict(self), "argv": list(self.argv), "env": dict(self.env),
                "mounts": [asdict(m) for m in self.mounts]}


def role(container: Container, template: PodTemplate) -> Role:
    if container in template.init_containers:
        return "sidecar" if container.sidecar else "init"
    return "main"


def guest_argv(image: images.Image, container: Container) -> list[str]:
    """The container's process in the guest: the image's entrypoint (the venv of its PEX) as
    the guest's venv of that PEX, then CMD or the manifest's args."""
    if container.command is not None:
        raise PlanError(f"container {container.name}: command {list(container.command)} replaces"
                        " the image's entrypoint; the guest runs only the images' venvs")
    venv = PurePosixPath("/opt/display") / image.pex.stem
    if not image.entrypoint or not PurePosixPath(image.entrypoint[0]).is_relative_to(venv):
        raise PlanError(f"container {container.name}: image {image.ref}'s ENTRYPOINT"
                        f" {list(image.entrypoint)} is not the venv {venv} of {image.pex}")
    guest = GUEST_VENVS / image.pex.stem
    _, *rest = image.argv(command=None, args=container.args)
    return [str(guest / VENV_PYTHON), "-sE", str(guest / VENV_SCRIPT), *rest]


def mount_plan(container: Container, volumes: Mapping[str, Volume]) -> tuple[MountPlan, ...]:
    found = []
    for mount in container.mounts:
        volume = volumes[mount.volume]
        if volume.kind == "hostPath" and volume.host_path.rstrip("/") != mount.path.rstrip("/"):
            raise PlanError(f"container {container.name}: volumeMount {mount.volume} at"
                            f" {mount.path} is hostPath {volume.host_path}; the guest has no"
                            " mount namespaces, so the two must be one path")
        if volume.kind == "secret" and not volume.optional:
            raise PlanError(f"container {container.name}: volume {mount.volume} is the required"
                            f" Secret {volume.secret_name}; the guest projects no Secrets")
        found.append(MountPlan(mount.volume, volume.kind, mount.path, mount.read_only))
    return tuple(found)


def check_one_path_per_volume(plans: Sequence[ContainerPlan]) -> None:
    """An emptyDir or Secret is one directory in the guest: every container mounts it there."""
    paths: dict[str, tuple[str, str]] = {}
    for plan in plans:
        for mount in plan.mounts:
            seen = paths.setdefault(mount.volume, (mount.path, plan.name))
            if seen[0] != mount.path:
                raise PlanError(f"volume {mount.volume}: container {plan.name} mounts it at"
                                f" {mount.path}, container {seen[1]} at {seen[0]}")


def pod_object(template: PodTemplate) -> JsonObject:
    """The Pod the DaemonSet controller would create on node `vm` (a fixed name, so the
    downward API resolves here)."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": POD_NAME, "namespace": template.namespace,
                         "labels": dict(template.labels)},
            "spec": {**template.spec, "nodeName": NODE}}


def claim_edits(template: PodTemplate) -> dict[str, list[CdiEdits]]:
    """`claim/request` -> the CDI edits of the pod's card claim, as the assembler takes them."""
    devices = {name: CARD_EDITS if name == simcard.CARD_DEVICE else CdiEdits()
               for name in simcard.ALLOCATION.values()}
    edits: dict[str, list[CdiEdits]] = {}
    for claim in template.claim_templates:
        edits.update(simcard.claim_edits(claim, simcard.ALLOCATION, devices))
    return edits


def container_plans(repo: Path, template: PodTemplate, pod: JsonObject) -> list[ContainerPlan]:
    # The assembler only reads here (env, images): its node paths are never touched.
    nowhere = Path("/nonexistent")
    assembler = Assembler(
        template, machine=Machine(repo=repo, dist=repo / "dist", trixie_root=None,
                                  pex_root=nowhere),
        pod=pod, volumes=PodVolumes(template, host_root=Path("/"), pod_dir=nowhere),
        service_account=None, api=(API_HOST, API_PORT), cdi=claim_edits(template),
        logs=nowhere, scratch=nowhere)
    plans = []
    for container in template.all_containers():
        try:
            image = assembler.image(container)
        except images.ImageError as exc:
            raise PlanError(f"container {container.name}: {exc}") from exc
        plans.append(ContainerPlan(
            name=container.name, role=role(container, template),
            argv=tuple(guest_argv(image, container)),
            env=assembler.env(container),
            mounts=mount_plan(container, template.volumes),
            drop_all_capabilities=container.drop_all_capabilities))
    check_one_path_per_volume(plans)
    return plans


def plan(repo: Path, rendered: str) -> JsonObject:
    """The plan the guest runs: the Pod to create, the account whose token it mounts, the API's
    address, the volumes and each container in the kubelet's order."""
    template = pod_template(daemonset(load_documents(rendered)))
    pod = pod_object(template)
    return {
        "node": NODE, "pod": pod,
        "service_account": {"namespace": template.namespace, "name": template.service_account},
        "api": {"host": API_HOST, "port": API_PORT},
        "layout_shell": str(LAYOUT_SHELL),
        "volumes": [{"name": v.name, "kind": v.kind, "path": v.host_path,
                     "type": v.host_path_type} for v in template.volumes.values()],
        "containers": [p.to_json() for p in container_plans(repo, template, pod)],
    }


def objects(rendered: str) -> str:
    """What the guest's fake API starts with: every object of the rendered base, simnode's
    people and viewer (`simnode/cluster/rbac.yaml`) and the Node."""
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}}
    docs = [*load_documents(rendered), *load_documents(control.RBAC.read_text()), node]
    return yaml.safe_dump_all(docs)


def write(share: Path, repo: Path) -> JsonObject:
    """Render the base once and write the plan and the fake's objects into the share."""
    rendered = render(repo)
    found = plan(repo, rendered)
    fsutil.atomic_write(share / PLAN, json.dumps(found, indent=2, sort_keys=True) + "\n")
    fsutil.atomic_write(share / OBJECTS, objects(rendered))
    return found
