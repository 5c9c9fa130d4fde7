"""The pod of the host's plan (tests/vm/podplan.py) run on the guest as a kubelet would: python3.13,
stdlib only.

The guest is a throwaway node: a hostPath is the guest's own path, an emptyDir or optional
Secret is a fresh directory at its mountPath, the service account is projected at the path
every binary reads (`token`, `ca.crt`, `namespace`), and the layout shell is put where the
weston image puts it. Without mount namespaces a `readOnly` mount is not enforced.

The cluster is the fake API in the pod's network namespace, over HTTPS with its own CA and
RBAC (`fakekube --tls --authorize`): the pod's processes authenticate with their service
account's token (a TokenRequest bound to the Pod, as the kubelet asks for it); the scenario,
playing the cluster's owner, the scheduler and the kubelet, with the admin token.

Each container runs its plan's argv and exactly its plan's env (nothing of the scenario's
environment leaks in), from `/`, without any capability when its manifest drops ALL.
"""

from __future__ import annotations

import json
import os
import shutil
import ssl
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO, Any

PLAN = Path("/share/pod/plan.json")
SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
NO_CAPS = ["setpriv", "--bounding-set=-all", "--inh-caps=-all", "--ambient-caps=-all",
           "--no-new-privs", "--"]
TOKEN_SECONDS = 3600
"""The kubelet's default token life: longer than a boot, so no renewal is needed here."""
API_TIMEOUT_S = 30.0

JsonObject = dict[str, Any]


class PodError(Exception):
    """The plan cannot be run on this guest, or the cluster refused a step; names which."""


class ApiError(PodError):
    def __init__(self, method: str, path: str, code: int, body: str) -> None:
        super().__init__(f"{method} {path}: HTTP {code}: {body[:500]}")
        self.code = code


def load(path: Path = PLAN) -> JsonObject:
    plan: JsonObject = json.loads(path.read_text())
    return plan


def container(plan: JsonObject, name: str) -> JsonObject:
    for found in plan["containers"]:
        if found["name"] == name:
            return dict(found)
    raise PodError(f"the plan has no container {name!r} (it has"
                   f" {[c['name'] for c in plan['containers']]})")


# -- the node's side: volumes, the image's files, the service account ------------------------

def volume_paths(plan: JsonObject) -> dict[str, Path]:
    """Volume name -> the guest directory that is it: the hostPath, else its mountPath."""
    paths: dict[str, Path] = {}
    for volume in plan["volumes"]:
        if volume["kind"] == "hostPath":
            paths[volume["name"]] = Path(volume["path"])
    for spec in plan["containers"]:
        for mount in spec["mounts"]:
            paths.setdefault(mount["volume"], Path(mount["path"]))
    return paths


def make_volumes(plan: JsonObject) -> dict[str, Path]:
    """Every volume's directory: hostPaths made when DirectoryOrCreate says so, the pod's own
    volumes fresh. PodError (before anything is made) for a missing `Directory`."""
    paths = volume_paths(plan)
    for volume in plan["volumes"]:
        path = paths.get(volume["name"])
        if volume["type"] == "Directory" and path is not None and not path.is_dir():
            raise PodError(f"volume {volume['name']}: hostPath {path} is not a directory")
    for volume in plan["volumes"]:
        path = paths.get(volume["name"])
        if path is None:
            continue  # no container mounts it
        if volume["kind"] != "hostPath":
            shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True, exist_ok=True)
    return paths


def atomic_write(path: Path, data: bytes, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    tmp.chmod(mode)
    os.replace(tmp, path)


def install_shell(built: Path, plan: JsonObject) -> Path:
    """The layout shell the host built, where the weston image installs it."""
    target = Path(plan["layout_shell"])
    atomic_write(target, built.read_bytes(), 0o755)
    return target


def project_account(token: str, ca_pem: bytes, namespace: str,
                    directory: Path = SERVICE_ACCOUNT) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    atomic_write(directory / "ca.crt", ca_pem)
    atomic_write(directory / "namespace", namespace.encode())
    atomic_write(directory / "token", token.encode(), 0o600)
    return directory


# -- the cluster -------------------------------------------------------------------------------

def api_argv(plan: JsonObject, objects: Path) -> list[str]:
    """fakekube's flags (after its launcher): HTTPS at the plan's address, RBAC, the objects."""
    return ["--host", plan["api"]["host"], "--port", str(plan["api"]["port"]), "--tls",
            "--authorize", "--load", os.fspath(objects)]


def api_announcement(text: str) -> tuple[str, Path, str] | None:
    """(URL, CA file, admin token) from fakekube's output once it has printed all three."""
    url = ca = token = None
    for line in text.splitlines():
        if line.startswith("https://"):
            url = line.strip()
        elif line.startswith("ca-file="):
            ca = Path(line.removeprefix("ca-file=").strip())
        elif line.startswith("admin-token="):
            token = line.removeprefix("admin-token=").strip()
    return (url, ca, token) if url and ca and token else None


class Api:
    """JSON calls to the fake API as one identity, verified with its CA."""

    def __init__(self, url: str, ca_file: Path, token: str) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self._context = ssl.create_default_context(cafile=os.fspath(ca_file))

    def call(self, method: str, path: str, body: Any = None,
             content_type: str = "application/json") -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path, data=data, method=method,
            headers={"Content-Type": content_type, "Authorization": f"Bearer {self.token}"})
        try:
            with urllib.request.urlopen(request, timeout=API_TIMEOUT_S,
                                        context=self._context) as response:
                return json.load(response)
        except urllib.error.HTTPError as err:
            raise ApiError(method, path, err.code, err.read().decode(errors="replace")) from None

    def get(self, path: str) -> Any:
        return self.call("GET", path)

    def post(self, path: str, body: Any) -> Any:
        return self.call("POST", path, body)


def create_pod(api: Api, plan: JsonObject) -> JsonObject:
    """The DaemonSet controller's part: the plan's Pod on this node."""
    pod = plan["pod"]
    created: JsonObject = api.post(f"/api/v1/namespaces/{pod['metadata']['namespace']}/pods", pod)
    return created


def token_request(api: Api, namespace: str, name: str, *, audiences: list[str] | None = None,
                  bound: JsonObject | None = None) -> str:
    """A token of ServiceAccount `namespace/name` from the TokenRequest API (`kubectl create
    token`), for `audiences` (the API server's when None), bound to the object `bound`."""
    spec: JsonObject = {"expirationSeconds": TOKEN_SECONDS}
    if audiences:
        spec["audiences"] = audiences
    if bound is not None:
        spec["boundObjectRef"] = {"apiVersion": bound["apiVersion"], "kind": bound["kind"],
                                  "name": bound["metadata"]["name"],
                                  "uid": bound["metadata"]["uid"]}
    review = api.post(f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
                      {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                       "spec": spec})
    return str(review["status"]["token"])


def pod_token(api: Api, plan: JsonObject, pod: JsonObject) -> str:
    """The kubelet's part: the token of the pod's service account, bound to the Pod."""
    account = plan["service_account"]
    return token_request(api, account["namespace"], account["name"], bound=pod)


def denials(api: Api) -> list[JsonObject]:
    """Every 401 and 403 the fake answered so far."""
    items: list[JsonObject] = api.get("/_fakekube/denials")["items"]
    return items


# -- the containers ----------------------------------------------------------------------------

def argv(spec: JsonObject) -> list[str]:
    """What runs: the plan's argv, behind setpriv when the manifest drops every capability."""
    return [*(NO_CAPS if spec["drop_all_capabilities"] else []), *spec["argv"]]


def launch(spec: JsonObject, log: IO[bytes]) -> subprocess.Popen[bytes]:
    """Start the container's process (its own session, so a stop reaches its children)."""
    return subprocess.Popen(argv(spec), stdin=subprocess.DEVNULL, stdout=log,
                            stderr=subprocess.STDOUT, env=dict(spec["env"]), cwd="/",
                            start_new_session=True)


def cmdline(pid: int) -> list[str]:
    """A process's argv as the kernel holds it."""
    raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    return raw.rstrip(b"\0").decode(errors="replace").split("\0")
