"""`python3 -m fakekube` as its own process: the URL line, `--load`, the fault hooks over HTTP,
and a clean exit on SIGTERM."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from lightkube import ApiError
from lightkube.generic_resource import create_global_resource
from lightkube.resources.authentication_v1 import TokenReview
from lightkube.resources.core_v1 import Node

from fakekube import testing
from fakekube.client import sync_client
from fakekube.testing import as_dict, failure, load, names

Display = create_global_resource("display.liken.sh", "v1alpha1", "Display", "displays")
START_SECONDS = 30.0
STOP_SECONDS = 10.0


def _child_env() -> dict[str, str]:
    # The child imports fakekube and its dependencies from wherever this process does (the repo
    # checkout, or Pants' sandbox and PEX).
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}


def _url_line(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.5)
        if ready:
            return proc.stdout.readline().strip()
        if proc.poll() is not None:
            break
    raise AssertionError(f"fakekube printed no URL (exit {proc.poll()})")


def _stop(proc: subprocess.Popen[str]) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=STOP_SECONDS)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise


@pytest.fixture
def manifests(tmp_path: Path) -> Path:
    path = tmp_path / "objects.yaml"
    # The Display comes before its CRD on purpose: --load creates CRDs first.
    path.write_text(yaml.safe_dump_all([testing.display("n1-hdmi-a-1"), testing.display_crd(),
                                        testing.node("n1")]))
    return path


@pytest.fixture
def served(manifests: Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "fakekube", "--port", "0", "--load", str(manifests)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_child_env())
    try:
        yield proc, _url_line(proc)
    finally:
        _stop(proc)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def test_serves_loaded_objects_and_stops_on_sigterm(
        served: tuple[subprocess.Popen[str], str]) -> None:
    proc, url = served
    assert url.startswith("http://127.0.0.1:")
    client = sync_client(url)
    try:
        assert names(client.list(Display)) == ["n1-hdmi-a-1"]
        assert names(client.list(Node)) == ["n1"]
    finally:
        client.close()
    assert _stop(proc) == 0


def test_fault_hooks_over_http(served: tuple[subprocess.Popen[str], str]) -> None:
    _, url = served
    client = sync_client(url)
    try:
        hook = testing.call(url, "POST", "/_fakekube/fail-writes",
                            {"count": 1, "code": 429, "retryAfter": 3, "resource": "nodes"})
        assert hook.body == {"pending": 1}
        with pytest.raises(ApiError) as err:
            client.create(load(Node, testing.node("n2")))
        assert failure(err.value)["details"] == {"retryAfterSeconds": 3}
        assert testing.call(url, "POST", "/_fakekube/compact").code == 200
        assert testing.call(url, "POST", "/_fakekube/drop-watches",
                            {"abrupt": True}).body == {"dropped": 0}
        testing.call(url, "POST", "/_fakekube/token", {"token": "t", "username": "alice"})
        review = client.create(load(TokenReview, {"spec": {"token": "t"}}))
        assert as_dict(review)["status"]["user"]["username"] == "alice"
        log = testing.call(url, "GET", "/_fakekube/requests").body["items"]
        assert {"method": "POST", "path": "/api/v1/nodes", "query": "", "status": 429,
                "user": ""} in log
    finally:
        client.close()


@pytest.mark.parametrize(("body", "code"), [
    ({"count": 1, "code": 404}, 400), ({"code": 409}, 400), ("[]", 400),
], ids=["bad-code", "missing-count", "not-an-object"])
def test_bad_hook_bodies_are_400(served: tuple[subprocess.Popen[str], str], body: object,
                                 code: int) -> None:
    _, url = served
    raw = body.encode() if isinstance(body, str) else body
    assert testing.call(url, "POST", "/_fakekube/fail-writes", raw).code == code


def test_an_unloadable_file_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(testing.display("orphan")))  # no CRD serves Display
    done = subprocess.run([sys.executable, "-m", "fakekube", "--load", str(bad)],
                          capture_output=True, text=True, env=_child_env(),
                          timeout=START_SECONDS, check=False)
    assert done.returncode == 2
    assert "Display 'orphan'" in done.stderr
    assert done.stdout == ""


def test_tls_and_authorize_print_the_ca_and_the_admin_token() -> None:
    proc = subprocess.Popen([sys.executable, "-m", "fakekube", "--tls", "--authorize"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=_child_env())
    try:
        url = _url_line(proc)
        assert proc.stdout is not None
        ca_line, token_line = proc.stdout.readline().strip(), proc.stdout.readline().strip()
        assert url.startswith("https://127.0.0.1:")
        ca = Path(ca_line.removeprefix("ca-file=")).read_bytes()
        admin = token_line.removeprefix("admin-token=")
        assert testing.call(url, "GET", "/api/v1/nodes", token="unknown", ca=ca).code == 401
        assert testing.call(url, "GET", "/api/v1/nodes", token=admin, ca=ca).code == 200
        # An out-of-process caller issues a ServiceAccount token and reads the denial it caused.
        sa = testing.call(url, "POST", "/_fakekube/service-account-token",
                          {"namespace": "default", "name": "robot"}, token=admin, ca=ca)
        refused = testing.call(url, "GET", "/api/v1/nodes", token=sa.body["token"], ca=ca)
        assert refused.code == 403
        denials = testing.call(url, "GET", "/fakekube/denials", token=admin, ca=ca).body["items"]
        assert [(d["code"], d["user"]) for d in denials] == [
            (401, ""), (403, "system:serviceaccount:default:robot")]
        assert _stop(proc) == 0
        assert not Path(ca_line.removeprefix("ca-file=")).exists()
    finally:
        _stop(proc)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
