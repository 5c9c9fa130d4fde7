"""The DaemonSet's pod template, read from rendered manifests (`kubectl kustomize`).

Only what the runner acts on is taken out, each field checked: a manifest the runner cannot run
as the kubelet would is a `ManifestError` naming the field, never a partial pod.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

import yaml

JsonObject = dict[str, Any]
VolumeKind = Literal["hostPath", "emptyDir", "secret"]
_QUANTITY: Final = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|k|M|G|T)?$")
_UNITS: Final = {None: 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
                 "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
# The kubelet's defaults for a probe's unset fields.
PROBE_DEFAULTS: Final = {"periodSeconds": 10, "timeoutSeconds": 1, "failureThreshold": 3,
                         "initialDelaySeconds": 0}
DEFAULT_GRACE_S: Final = 30


class ManifestError(Exception):
    """The manifests hold no runnable pod template; the message names the field and value."""


@dataclass(frozen=True, slots=True)
class EnvVar:
    """A literal `value`, or a downward-API `field_path` resolved from the Pod object."""

    name: str
    value: str | None = None
    field_path: str | None = None


@dataclass(frozen=True, slots=True)
class VolumeMount:
    volume: str
    path: str
    read_only: bool = False


@dataclass(frozen=True, slots=True)
class ClaimUse:
    """A container's `resources.claims` entry: the pod claim, and one request or all."""

    claim: str
    request: str | None = None


@dataclass(frozen=True, slots=True)
class HttpProbe:
    path: str
    port: int | str
    scheme: str
    period_s: float
    timeout_s: float
    failure_threshold: int
    initial_delay_s: float


@dataclass(frozen=True, slots=True)
class Container:
    name: str
    image: str
    command: tuple[str, ...] | None
    args: tuple[str, ...] | None
    env: tuple[EnvVar, ...]
    mounts: tuple[VolumeMount, ...]
    ports: Mapping[str, int]
    memory_limit: int | None
    claims: tuple[ClaimUse, ...]
    liveness: HttpProbe | None
    drop_all_capabilities: bool
    sidecar: bool
    """An init container with `restartPolicy: Always` (a native sidecar)."""


@dataclass(frozen=True, slots=True)
class Volume:
    name: str
    kind: VolumeKind
    host_path: str = ""
    host_path_type: str = ""
    secret_name: str = ""
    optional: bool = False


@dataclass(frozen=True, slots=True)
class PodTemplate:
    """The DaemonSet's pod: `spec` is the template's spec as written, for the Pod object."""

    daemonset: str
    namespace: str
    labels: Mapping[str, str]
    spec: JsonObject
    init_containers: tuple[Container, ...]
    containers: tuple[Container, ...]
    volumes: Mapping[str, Volume]
    grace_s: float
    service_account: str
    share_process_namespace: bool
    claim_templates: Mapping[str, str]
    """Pod claim name -> its ResourceClaimTemplate's name."""

    def all_containers(self) -> tuple[Container, ...]:
        return self.init_containers + self.containers


def parse_quantity(value: object, field: str) -> int:
    """`64Mi` -> bytes."""
    match = _QUANTITY.match(str(value))
    if match is None:
        raise ManifestError(f"{field}: {value!r} is not a memory quantity (like 64Mi)")
    return int(float(match.group(1)) * _UNITS[match.group(2)])


def load_documents(text: str) -> list[JsonObject]:
    """Every object of a multi-document YAML text (empty documents dropped)."""
    try:
        docs = [d for d in yaml.safe_load_all(text) if d]
    except yaml.YAMLError as exc:
        raise ManifestError(f"the manifests are not YAML: {exc}") from exc
    for i, doc in enumerate(docs):
        if not isinstance(doc, dict) or not doc.get("kind"):
            raise ManifestError(f"document {i}: not a Kubernetes object (no kind)")
    return docs


def daemonset(docs: Iterable[JsonObject], name: str | None = None) -> JsonObject:
    """The one DaemonSet of the manifests (or the one named `name`)."""
    found = [d for d in docs if d["kind"] == "DaemonSet"
             and (name is None or d.get("metadata", {}).get("name") == name)]
    if len(found) != 1:
        what = f"DaemonSet {name}" if name else "DaemonSet"
        raise ManifestError(f"the manifests hold {len(found)} {what} objects, not 1")
    return found[0]


def pod_template(ds: JsonObject) -> PodTemplate:
    meta = ds.get("metadata") or {}
    where = f"DaemonSet {meta.get('name')}"
    template = _mapping(ds.get("spec", {}).get("template"), f"{where}: spec.template")
    spec = _mapping(template.get("spec"), f"{where}: spec.template.spec")
    volumes = {v.name: v for v in (_volume(v, f"{where}: volumes[{i}]")
                                   for i, v in enumerate(spec.get("volumes") or []))}
    inits = tuple(_container(c, f"{where}: initContainers[{i}]", init=True)
                  for i, c in enumerate(spec.get("initContainers") or []))
    mains = tuple(_container(c, f"{where}: containers[{i}]", init=False)
                  for i, c in enumerate(spec.get("containers") or []))
    if not mains:
        raise ManifestError(f"{where}: spec.template.spec.containers is empty")
    names = [c.name for c in inits + mains]
    if len(set(names)) != len(names):
        raise ManifestError(f"{where}: container names repeat: {names}")
    claims = {}
    for i, rc in enumerate(spec.get("resourceClaims") or []):
        if not rc.get("name") or not rc.get("resourceClaimTemplateName"):
            raise ManifestError(f"{where}: resourceClaims[{i}] needs name and"
                                " resourceClaimTemplateName")
        claims[str(rc["name"])] = str(rc["resourceClaimTemplateName"])
    for container in inits + mains:
        _check_refs(container, volumes, claims, where)
    return PodTemplate(
        daemonset=str(meta.get("name", "")), namespace=str(meta.get("namespace") or "default"),
        labels=dict((template.get("metadata") or {}).get("labels") or {}), spec=spec,
        init_containers=inits, containers=mains, volumes=volumes,
        grace_s=float(spec.get("terminationGracePeriodSeconds", DEFAULT_GRACE_S)),
        service_account=str(spec.get("serviceAccountName") or "default"),
        share_process_namespace=bool(spec.get("shareProcessNamespace")),
        claim_templates=claims,
    )


def from_text(text: str, name: str | None = None) -> PodTemplate:
    return pod_template(daemonset(load_documents(text), name))


def _mapping(value: object, field: str) -> JsonObject:
    if not isinstance(value, dict):
        raise ManifestError(f"{field}: missing or not a mapping")
    return value


def _strings(value: object, field: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ManifestError(f"{field}: {value!r} is not a list of strings")
    return tuple(value)


def _container(c: JsonObject, field: str, *, init: bool) -> Container:
    name = c.get("name")
    if not isinstance(name, str) or not name:
        raise ManifestError(f"{field}.name: missing")
    field = f"{field} ({name})"
    if not c.get("image"):
        raise ManifestError(f"{field}.image: missing")
    policy = c.get("restartPolicy")
    if policy not in (None, "Always") or (policy and not init):
        raise ManifestError(f"{field}.restartPolicy: {policy!r} (only an init container's"
                            " Always, a native sidecar, is allowed)")
    resources = c.get("resources") or {}
    limit = (resources.get("limits") or {}).get("memory")
    caps = (c.get("securityContext") or {}).get("capabilities") or {}
    return Container(
        name=name, image=str(c["image"]),
        command=_strings(c.get("command"), f"{field}.command"),
        args=_strings(c.get("args"), f"{field}.args"),
        env=tuple(_env(e, f"{field}.env[{i}]") for i, e in enumerate(c.get("env") or [])),
        mounts=tuple(VolumeMount(str(m.get("name")), str(m.get("mountPath")),
                                 bool(m.get("readOnly", False)))
                     for m in c.get("volumeMounts") or []),
        ports={str(p["name"]): int(p["containerPort"]) for p in c.get("ports") or []
               if p.get("name")},
        memory_limit=None if limit is None else parse_quantity(
            limit, f"{field}.resources.limits.memory"),
        claims=tuple(ClaimUse(str(u.get("name")), u.get("request"))
                     for u in resources.get("claims") or []),
        liveness=_probe(c.get("livenessProbe"), f"{field}.livenessProbe"),
        drop_all_capabilities="ALL" in (caps.get("drop") or []),
        sidecar=policy == "Always",
    )


def _env(e: JsonObject, field: str) -> EnvVar:
    name = e.get("name")
    if not isinstance(name, str) or not name:
        raise ManifestError(f"{field}.name: missing")
    source = e.get("valueFrom")
    if source is None:
        return EnvVar(name, value=str(e.get("value", "")))
    path = (source.get("fieldRef") or {}).get("fieldPath")
    if not path:
        raise ManifestError(f"{field} ({name}).valueFrom: only fieldRef is supported, got"
                            f" {sorted(source)}")
    return EnvVar(name, field_path=str(path))


def _probe(p: JsonObject | None, field: str) -> HttpProbe | None:
    if p is None:
        return None
    get = p.get("httpGet")
    if not isinstance(get, dict):
        raise ManifestError(f"{field}: only httpGet probes are supported, got {sorted(p)}")
    values = {**PROBE_DEFAULTS, **{k: p[k] for k in PROBE_DEFAULTS if k in p}}
    scheme = str(get.get("scheme", "HTTP")).upper()
    if scheme not in ("HTTP", "HTTPS"):
        raise ManifestError(f"{field}.httpGet.scheme: {scheme!r} is not HTTP or HTTPS")
    if get.get("port") is None:
        raise ManifestError(f"{field}.httpGet.port: missing")
    return HttpProbe(path=str(get.get("path", "/")), port=get["port"], scheme=scheme,
                     period_s=float(values["periodSeconds"]),
                     timeout_s=float(values["timeoutSeconds"]),
                     failure_threshold=int(values["failureThreshold"]),
                     initial_delay_s=float(values["initialDelaySeconds"]))


def _volume(v: JsonObject, field: str) -> Volume:
    name = v.get("name")
    if not isinstance(name, str) or not name:
        raise ManifestError(f"{field}.name: missing")
    if "hostPath" in v:
        host = v["hostPath"] or {}
        kind = str(host.get("type", ""))
        if kind not in ("", "Directory", "DirectoryOrCreate"):
            raise ManifestError(f"{field} ({name}).hostPath.type: {kind!r} is not supported"
                                " (Directory, DirectoryOrCreate)")
        if not str(host.get("path", "")).startswith("/"):
            raise ManifestError(f"{field} ({name}).hostPath.path: {host.get('path')!r} is not"
                                " absolute")
        return Volume(name, "hostPath", host_path=str(host["path"]), host_path_type=kind)
    if "emptyDir" in v:
        return Volume(name, "emptyDir")
    if "secret" in v:
        secret = v["secret"] or {}
        if not secret.get("secretName"):
            raise ManifestError(f"{field} ({name}).secret.secretName: missing")
        return Volume(name, "secret", secret_name=str(secret["secretName"]),
                      optional=bool(secret.get("optional", False)))
    raise ManifestError(f"{field} ({name}): volume source {sorted(set(v) - {'name'})} is not"
                        " supported (hostPath, emptyDir, secret)")


def _check_refs(c: Container, volumes: Mapping[str, Volume], claims: Mapping[str, str],
                where: str) -> None:
    for m in c.mounts:
        if m.volume not in volumes:
            raise ManifestError(f"{where}: container {c.name}: volumeMount {m.volume!r} names"
                                " no volume")
        if not m.path.startswith("/"):
            raise ManifestError(f"{where}: container {c.name}: mountPath {m.path!r} is not"
                                " absolute")
    for use in c.claims:
        if use.claim not in claims:
            raise ManifestError(f"{where}: container {c.name}: resources.claims {use.claim!r}"
                                " names no pod resourceClaim")
