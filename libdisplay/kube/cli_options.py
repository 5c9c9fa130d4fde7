"""The API server options every binary that talks to Kubernetes shares, and their endpoint.

With none of them, in a pod, the endpoint is the pod's own service account
(`libdisplay.kube.access.discover`). Kept light: only click until discovery.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from libdisplay.cli import PathParam, compose

if TYPE_CHECKING:
    from libdisplay.kube import access as kubeaccess

F = TypeVar("F", bound=Callable[..., Any])

# The files that say how to reach and trust the API server: (flag, env, help).
_FILES = (
    ("--api-token-file", "KUBE_API_TOKEN_FILE",
     "With --api-server: a bearer token file, re-read when it changes"),
    ("--api-ca-file", "KUBE_API_CA_FILE",
     "With an https --api-server: the CA that signed its certificate; default: the system's CAs"),
    ("--kubeconfig", "KUBECONFIG", "A kubeconfig, to reach a cluster from outside it"),
)

_OPTIONS = compose(
    click.option(
        "--api-server",
        envvar="KUBE_API_SERVER",
        help="API server URL (http or https); default: --kubeconfig, else the pod's "
        "in-cluster service account (env KUBE_API_SERVER).",
    ),
    *(click.option(flag, envvar=envvar, type=PathParam(dir_okay=False),
                   help=f"{text} (env {envvar}).") for flag, envvar, text in _FILES),
)


def api_options(command: F) -> F:
    """Add --api-server, --api-token-file, --api-ca-file and --kubeconfig to `command`."""
    return _OPTIONS(command)


def endpoint(options: dict[str, Any]) -> kubeaccess.Endpoint:
    """The endpoint `api_options`' values name (NoEndpointError when none applies)."""
    from libdisplay.kube import (
        access as kubeaccess,  # not at import: every binary's `--help` comes here
    )

    return kubeaccess.discover(**access_arguments(options))


def access_arguments(options: dict[str, Any]) -> dict[str, Any]:
    """`api_options`' values as `kubeaccess.discover`'s keyword arguments."""
    return {
        "api_server": options.get("api_server"),
        "token_file": options.get("api_token_file"),
        "ca_file": options.get("api_ca_file"),
        "kubeconfig": options.get("kubeconfig"),
    }
