"""Settings from the environment: defaults, and a clear error naming each bad variable."""

from __future__ import annotations

from pathlib import Path

import pytest

from capture import settings
from capture.environment import ENVIRONMENT
from capture.settings import SettingsError


def test_defaults_match_the_pod() -> None:
    got = settings.from_env({"NODE_NAME": "kiosk-3"})
    assert (got.host, got.port) == ("0.0.0.0", 9201)
    assert got.capture_socket == Path("/etc/weston/capture.sock")
    assert got.tls_dir == Path("/var/run/display-capture-tls")
    assert got.kube_url is None and got.render_node is None
    assert got.max_encodes == 2
    assert got.token_audience == "display-capture"
    assert (got.max_connections, got.max_connections_per_source) == (128, 16)
    assert (got.handshake_timeout_s, got.idle_timeout_s) == (5.0, 15.0)


def test_everything_can_be_set() -> None:
    got = settings.from_env({
        "NODE_NAME": "n", "CAPTURE_ADDR": "127.0.0.1:0", "CAPTURE_WESTON_INI": "/w/weston.ini",
        "CAPTURE_DEVICES": "X1=card0-hdmi-a-1, X2=card0-dp-1", "CAPTURE_MAX_ENCODES": "3",
        "CAPTURE_KUBE_URL": "http://127.0.0.1:1", "CAPTURE_RENDER_NODE": "/dev/dri/renderD129",
    })
    assert (got.host, got.port) == ("127.0.0.1", 0)
    assert got.capture_socket == Path("/w/capture.sock")
    assert got.devices == {"X1": "card0-hdmi-a-1", "X2": "card0-dp-1"}
    assert got.max_encodes == 3
    assert got.render_node == Path("/dev/dri/renderD129")


@pytest.mark.parametrize(
    ("env", "names"),
    [
        ({}, "NODE_NAME"),
        ({"NODE_NAME": "n", "CAPTURE_ADDR": "9201"}, "CAPTURE_ADDR"),
        ({"NODE_NAME": "n", "CAPTURE_ADDR": ":99999"}, "CAPTURE_ADDR"),
        ({"NODE_NAME": "n", "CAPTURE_DEVICES": "X1"}, "CAPTURE_DEVICES"),
        ({"NODE_NAME": "n", "CAPTURE_MAX_ENCODES": "0"}, "CAPTURE_MAX_ENCODES"),
        ({"NODE_NAME": "n", "CAPTURE_IDLE_TIMEOUT_S": "inf"}, "CAPTURE_IDLE_TIMEOUT_S"),
        ({"NODE_NAME": "n", "CAPTURE_IDLE_TIMEOUT_S": "x"}, "CAPTURE_IDLE_TIMEOUT_S"),
        ({"NODE_NAME": "n", "CAPTURE_MAX_CONNECTIONS": "-1"}, "CAPTURE_MAX_CONNECTIONS"),
    ],
    ids=["no-node", "no-colon", "port-range", "device-without-equals", "zero-encodes",
         "infinite-idle", "idle-not-a-number", "negative-connections"],
)
def test_bad_values_name_the_variable(env: dict[str, str], names: str) -> None:
    with pytest.raises(SettingsError, match=names):
        settings.from_env(env)


class _Recording(dict[str, str]):
    """An environment that remembers every name looked up in it."""

    def __init__(self, *args: object, **kwargs: str) -> None:
        super().__init__(*args, **kwargs)
        self.read: set[str] = set()

    def get(self, key: str, default: object = None) -> object:  # type: ignore[override]
        self.read.add(key)
        return super().get(key, default)

    def __getitem__(self, key: str) -> str:
        self.read.add(key)
        return super().__getitem__(key)


def test_help_lists_exactly_the_variables_read() -> None:
    env = _Recording({"NODE_NAME": "n", "KUBECONFIG": "/k"})
    settings.from_env(env)
    assert env.read == {name for name, _, _ in ENVIRONMENT}


def test_help_shows_the_defaults_from_env_uses() -> None:
    shown = {name: default for name, default, _ in ENVIRONMENT}
    got = settings.from_env({"NODE_NAME": "n"})
    assert shown["CAPTURE_ADDR"] == settings.DEFAULT_ADDR
    assert shown["CAPTURE_WESTON_INI"] == str(got.weston_ini)
    assert shown["CAPTURE_TLS_DIR"] == str(got.tls_dir)
    assert shown["CAPTURE_CARD"] == got.card
    assert shown["CAPTURE_TOKEN_AUDIENCE"] == got.token_audience
    assert [int(shown[n]) for n in ("CAPTURE_MAX_ENCODES", "CAPTURE_MAX_CONNECTIONS",
                                    "CAPTURE_MAX_CONNECTIONS_PER_SOURCE", "CAPTURE_IDLE_TIMEOUT_S",
                                    "CAPTURE_UNAUTHENTICATED_BURST")] == [
        got.max_encodes, got.max_connections, got.max_connections_per_source,
        got.idle_timeout_s, got.unauthenticated_burst]
