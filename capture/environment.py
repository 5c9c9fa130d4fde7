"""The capture server's environment settings, by name, with their defaults as `--help` shows
them. Plain strings only: `capture --help` imports this and nothing heavier.
capture/settings.py reads exactly these names (settings_test.py holds the two together)."""

from __future__ import annotations

from typing import Final

# (variable, default as shown, what it sets)
ENVIRONMENT: Final[tuple[tuple[str, str, str], ...]] = (
    ("NODE_NAME", "(required)", "this node's name; the Displays are <node>.<device>"),
    ("CAPTURE_ADDR", ":9201", "where HTTPS listens, [HOST]:PORT"),
    ("CAPTURE_WESTON_INI", "/etc/weston/weston.ini", "whose [output] sections name the outputs"),
    ("CAPTURE_SOCKET", "capture.sock beside CAPTURE_WESTON_INI", "the layout capture socket"),
    ("CAPTURE_TLS_DIR", "/var/run/display-capture-tls", "the serving certificate and key"),
    ("CAPTURE_CARD", "card0", "the card whose connectors the outputs are"),
    ("CAPTURE_DEVICES", "(none)", "OUTPUT=DEVICE,... for outputs not named as connectors"),
    ("CAPTURE_KUBE_URL", "(none)", "a plain-HTTP apiserver for token reviews (tests)"),
    ("KUBECONFIG", "(none: in-cluster)", "a kubeconfig for token reviews"),
    ("CAPTURE_RENDER_NODE", "(the first /dev/dri/renderD*)", "the render node for VA-API encodes"),
    ("CAPTURE_MAX_ENCODES", "2", "encodes at once"),
    ("CAPTURE_TOKEN_AUDIENCE", "display-capture", "the audience tokens are reviewed for"),
    ("CAPTURE_MAX_CONNECTIONS", "128", "connections at once"),
    ("CAPTURE_MAX_CONNECTIONS_PER_SOURCE", "16", "connections at once from one address"),
    ("CAPTURE_IDLE_TIMEOUT_S", "15", "seconds a request may take from its start"),
    ("CAPTURE_UNAUTHENTICATED_BURST", "20", "token reviews one address may start at once"),
)


def help_text() -> str:
    """The settings as an epilog click prints unwrapped (its `\\b` marker)."""
    width = max(len(name) for name, _, _ in ENVIRONMENT)
    lines = [f"  {name:<{width}}  {meaning} [default: {default}]"
             for name, default, meaning in ENVIRONMENT]
    return "\b\nEnvironment settings:\n" + "\n".join(lines)
