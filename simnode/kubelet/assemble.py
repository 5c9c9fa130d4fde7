"""A container's `LaunchSpec` from the manifest, its image, the Pod object and the claim.

Its argv is the image's (`simnode.kubelet.images`: the entrypoint's PEX, the manifest's `args` for
CMD); its env is the manifest's (downward-API fields resolved from the Pod object), what the
kubelet and the runtime add (the API's Service variables, HOSTNAME, the image's PATH, HOME) and
the CDI edits of the claim's devices the container names; its mounts are its volumeMounts, the
service account's projection and those CDI mounts. Nothing else: no flag, path or node name
the manifest does not state.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from simnode.kubelet import images
from simnode.kubelet.launcher import Bind, LaunchSpec, Rootfs
from simnode.kubelet.manifest import Container, ManifestError, PodTemplate
from simnode.kubelet.volumes import PodVolumes

SERVICE_ACCOUNT_DIR: Final = "/var/run/secrets/kubernetes.io/serviceaccount"
# Where the PEXes unpack themselves, as the image's venv install would at build time: one
# cache for every pod on the machine, so a container's start does not unpack again.
PEX_ROOT_IN_CONTAINER: Final = "/root/.pex"
_IMAGE_PATH: Final = re.compile(r"ENV PATH=(?P<path>[^' ]+)")


@dataclass(frozen=True, slots=True)
class CdiEdits:
    """A CDI device's containerEdits, as the runner applies them."""

    env: Mapping[str, str] = field(default_factory=dict)
    mounts: tuple[Bind, ...] = ()


@dataclass(frozen=True, slots=True)
class Machine:
    """What the node provides every pod: the repo's images and PEXes, the trixie root, and
    the PEX cache."""

    repo: Path
    dist: Path
    trixie_root: Path | None
    pex_root: Path
    extra_usr: Mapping[str, Path] = field(default_factory=dict)
    """Suite -> a directory laid over the image's /usr (the weston image's layout module)."""


def image_path(images_dir: Path) -> str:
    """The PATH build.sh gives every base (`podman import --change 'ENV PATH=...'`)."""
    match = _IMAGE_PATH.search((images_dir / "build.sh").read_text())
    if match is None:
        raise images.ImageError(f"{images_dir / 'build.sh'}: no ENV PATH= for the bases")
    return match["path"]


def field_value(pod: Mapping[str, Any], path: str) -> str:
    """A downward-API `fieldPath` of the Pod object."""
    node: Any = pod
    for part in path.split("."):
        node = node.get(part) if isinstance(node, Mapping) else None
    if node is None:
        raise ManifestError(f"env fieldRef {path!r}: the Pod has no such field")
    return str(node)


def service_env(api_host: str, api_port: int) -> dict[str, str]:
    """The `kubernetes` Service's variables every container gets."""
    return {"KUBERNETES_SERVICE_HOST": api_host, "KUBERNETES_SERVICE_PORT": str(api_port),
            "KUBERNETES_SERVICE_PORT_HTTPS": str(api_port),
            "KUBERNETES_PORT": f"tcp://{api_host}:{api_port}",
            "KUBERNETES_PORT_443_TCP": f"tcp://{api_host}:{api_port}",
            "KUBERNETES_PORT_443_TCP_PROTO": "tcp",
            "KUBERNETES_PORT_443_TCP_ADDR": api_host,
            "KUBERNETES_PORT_443_TCP_PORT": str(api_port)}


class Assembler:
    """Builds each container's LaunchSpec of one pod."""

    def __init__(self, template: PodTemplate, *, machine: Machine, pod: Mapping[str, Any],
                 volumes: PodVolumes, service_account: Path | None,
                 api: tuple[str, int] | None, cdi: Mapping[str, Sequence[CdiEdits]],
                 logs: Path, scratch: Path) -> None:
        self.template = template
        self.machine = machine
        self.pod = pod
        self.volumes = volumes
        self.service_account = service_account
        self.api = api
        self.cdi = cdi
        """Claim name -> request name ("" for the whole claim) -> edits, flattened by key
        `claim/request`."""
        self.logs = logs
        self.scratch = scratch
        images_dir = machine.repo / "deploy" / "images"
        self.builds = images.load(images_dir)
        self.path = image_path(images_dir)

    def image(self, container: Container) -> images.Image:
        return images.find(self.builds, container.image)

    def argv(self, container: Container) -> list[str]:
        return self.image(container).argv(command=container.command, args=container.args)

    def env(self, container: Container) -> dict[str, str]:
        env = {"PATH": self.path, "HOME": "/root",
               "HOSTNAME": str(self.pod["metadata"]["name"])}
        if self.api is not None:
            env.update(service_env(*self.api))
        for edits in self._edits(container):
            env.update(edits.env)
        for var in container.env:
            env[var.name] = (var.value if var.field_path is None
                             else field_value(self.pod, var.field_path)) or ""
        return env

    def _edits(self, container: Container) -> list[CdiEdits]:
        found: list[CdiEdits] = []
        for use in container.claims:
            found += self.cdi.get(f"{use.claim}/{use.request or ''}", ())
        return found

    def rootfs(self, image: images.Image) -> Rootfs:
        if image.suite == "bookworm":
            return Rootfs()
        if self.machine.trixie_root is None:
            raise images.ImageError(f"image {image.ref} is {image.suite}-based: the node needs"
                                    " the trixie root (build-support/trixie-root)")
        extra = self.machine.extra_usr.get(image.suite)
        layers = (*((extra,) if extra else ()), self.machine.trixie_root / "usr")
        return Rootfs(usr_layers=layers, etc=self.machine.trixie_root / "etc")

    def spec(self, container: Container) -> LaunchSpec:
        image = self.image(container)
        binds = []
        self.machine.pex_root.mkdir(parents=True, exist_ok=True)
        if container.command is None:
            # The entrypoint runs: the PEX it is installed from, and the cache it unpacks to.
            binds += [Bind(self.machine.dist.joinpath(*image.pex.parts[1:]),
                           str(image.pex_in_image)),
                      Bind(self.machine.pex_root, PEX_ROOT_IN_CONTAINER, read_only=False)]
        binds += self.volumes.binds(container)
        if self.service_account is not None:
            binds.append(Bind(self.service_account, SERVICE_ACCOUNT_DIR))
        for edits in self._edits(container):
            binds += edits.mounts
        return LaunchSpec(
            name=container.name, argv=tuple(self.argv(container)), env=self.env(container),
            binds=tuple(binds), log_path=self.logs / f"{container.name}.log",
            scratch=self.scratch / container.name, rootfs=self.rootfs(image),
            drop_all_capabilities=container.drop_all_capabilities,
            image=container.image, command=container.command, args=container.args,
            memory_limit=container.memory_limit, pod=str(self.pod["metadata"]["name"]),
        )

    def warm_spec(self, container: Container) -> LaunchSpec:
        """The image build's last step (`RUN [entrypoint, "--version"]`): the PEX unpacks
        itself into the cache once, so no container's start pays for it (or is measured
        with it against its memory limit)."""
        image = self.image(container)
        self.machine.pex_root.mkdir(parents=True, exist_ok=True)
        binds = (Bind(self.machine.dist.joinpath(*image.pex.parts[1:]), str(image.pex_in_image)),
                 Bind(self.machine.pex_root, PEX_ROOT_IN_CONTAINER, read_only=False))
        return LaunchSpec(name=f"build-{container.name}", argv=(str(image.pex_in_image),
                                                                 "--version"),
                          env={"PATH": self.path, "HOME": "/root"}, binds=binds,
                          log_path=self.logs / f"build-{container.name}.log",
                          scratch=self.scratch / f"build-{container.name}",
                          rootfs=self.rootfs(image))
