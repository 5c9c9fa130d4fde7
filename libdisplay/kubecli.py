"""The API server options every binary that talks to Kubernetes shares, and their endpoint.

With none of them, in a pod, the endpoint is the pod's own service account
(`libdisplay.kubeaccess.discover`). Kept light: only click, no TLS or YAML until discovery.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from libdisplay import kubeaccess

F = TypeVar("F", bound=Callable[..., Any])

_OPTIONS = (
    click.option(
        "--api-server",
        envvar="KUBE_API_SERVER",
        help="API server URL (http or https); default: --kubeconfig, else the pod's "
        "in-cluster service account (env KUBE_API_SERVER).",
    ),
    click.option(
        "--api-token-file",
        envvar="KUBE_API_TOKEN_FILE",
        type=click.Path(dir_okay=False, path_type=Path),
        help="With --api-server: a bearer token file, re-read when it changes "
        "(env KUBE_API_TOKEN_FILE).",
    ),
    click.option(
        "--api-ca-file",
        envvar="KUBE_API_CA_FILE",
        type=click.Path(dir_okay=False, path_type=Path),
        help="With an https --api-server: the CA that signed its certificate; default: the "
        "system's CAs (env KUBE_API_CA_FILE).",
    ),
    click.option(
        "--kubeconfig",
        envvar="KUBECONFIG",
        type=click.Path(dir_okay=False, path_type=Path),
        help="A kubeconfig, to reach a cluster from outside it (env KUBECONFIG).",
    ),
)


def api_options(command: F) -> F:
    """Add --api-server, --api-token-file, --api-ca-file and --kubeconfig to `command`."""
    for option in reversed(_OPTIONS):
        command = option(command)
    return command


def endpoint(options: dict[str, Any]) -> kubeaccess.Endpoint:
    """The endpoint `api_options`' values name (NoEndpointError when none applies)."""
    return kubeaccess.discover(**access_arguments(options))


def access_arguments(options: dict[str, Any]) -> dict[str, Any]:
    """`api_options`' values as `kubeaccess.discover`'s keyword arguments."""
    return {
        "api_server": options.get("api_server"),
        "token_file": options.get("api_token_file"),
        "ca_file": options.get("api_ca_file"),
        "kubeconfig": options.get("kubeconfig"),
    }
