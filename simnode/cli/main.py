"""The `simnode` command: a simulated node (`up`) and the subcommands that act on it."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from libdisplay import __version__
from simnode.cli import commands, local_commands
from simnode.cli.clients import ClientError
from simnode.cli.state import NODE_NAME, Layout, StateError, load
from simnode.cluster.api import ClusterError
from simnode.cluster.prometheus import PrometheusError
from simnode.kubelet import node_object
from simnode.node import checkout
from simnode.node.card import CardError

F = TypeVar("F", bound=Callable[..., object])
USER_ERRORS = (checkout.UpError, StateError, CardError, ClientError, ClusterError,
               commands.CommandError, local_commands.LocalCommandError, PrometheusError)


def _default_state_dir() -> Path:
    # Short, so the plugin's sockets stay within AF_UNIX's 108 bytes.
    return Path("/tmp") / f"simnode-{os.getuid()}"


def state_dir_option(func: F) -> F:
    option = click.option(
        "--state-dir", type=click.Path(file_okay=False, path_type=Path),
        default=_default_state_dir, show_default="/tmp/simnode-<uid>",
        help="Where the node's files, sockets, logs and state file live.",
    )
    return option(func)

PROG = "simnode"


def _layout(state_dir: Path) -> Layout:
    return Layout(state_dir.absolute())


def _commands(state_dir: Path) -> Any:
    """The subcommands for the node there: the real cluster's (`up --cluster local`) or the
    embedded and pod-runner nodes'. `load` says what is wrong when no node runs there."""
    state = load(_layout(state_dir))
    return local_commands if state.cluster == "local" else commands


@click.group(name=PROG, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name=PROG)
@click.option("-v", "--verbose", is_flag=True, help="Log at debug level.")
def cli(verbose: bool) -> None:
    """A simulated display node: simulated card, real weston, the operator, a fake cluster."""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # Every command that starts weston or a demo client finds weston 14 this way.
    checkout.use_trixie_compositor(checkout.default_dist())
    # One line per API request is noise for a user; -v shows them.
    for name in ("httpx", "httpx2"):
        logging.getLogger(name).setLevel(logging.DEBUG if verbose else logging.WARNING)


def _node_name(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    try:
        return node_object.check_node_name(value)
    except ClusterError as exc:
        raise click.BadParameter(str(exc)) from exc


@cli.command("up")
@state_dir_option
@click.option("--monitors", type=click.IntRange(1, 16), default=3, show_default=True,
              help="How many monitors the simulated card has (1-16).")
@click.option("--dist", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where the built PEXes are (<dist>/<name>/<name>.pex); default: the dist"
                   " dir this PEX is in, else ./dist.")
@click.option("--clean", is_flag=True,
              help="Remove what a killed run left in the state dir (and stop its processes).")
@click.option("--kubeconfig", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Run the pod in the real cluster this kubeconfig reaches, instead of an"
                   " embedded fake apiserver: its binaries use their in-cluster configuration"
                   " with a token of the manifest's ServiceAccount (TokenRequest), so RBAC is"
                   " the manifest's. The cluster must hold the rendered base but its DaemonSet"
                   " (`simnode prerequisites | kubectl apply -f -`); `up` names what is"
                   " missing before it starts anything.")
@click.option("--context", default=None,
              help="The kubeconfig's context to use; default: its current context.")
@click.option("--node-name", default=NODE_NAME, show_default=True, callback=_node_name,
              help="The Node to publish the devices on; created if missing, deleted on stop.")
@click.option("--images", is_flag=True,
              help="Run each container from its built image under podman (one pod sharing a"
                   " PID namespace), not from the PEXes in bubblewrap; build them first with"
                   " deploy/images/build.sh.")
@click.option("--cluster", type=click.Choice(["embedded", "local"]), default="embedded",
              show_default=True,
              help="embedded: the fast fake API server and simnode's own kubelet. local: a"
                   " real Kubernetes 1.37 node on this machine (etcd, kube-apiserver,"
                   " controllers, scheduler, containerd, kube-proxy, the kubelet; built from"
                   " build-support/kube, cached), the images of deploy/images/build.sh, and"
                   " the base applied with kubectl; needs root.")
@click.option("--prometheus", is_flag=True,
              help="Also run Prometheus (Debian's) on 127.0.0.1:9090, scraping the node's"
                   " ports every 5 s with the alerts of deploy/overlays/monitoring: see"
                   " http://127.0.0.1:9090/classic/alerts while `simnode hang` runs.")
@click.option("--no-ddc", "no_ddc", multiple=True, metavar="DEVICE",
              help="A monitor whose DDC/CI does not answer (switched off in its menu, a TV):"
                   " its EDID reads, 0x37 acknowledges nothing. Repeatable; a device name"
                   " (card0-dp-2).")
def up_command(state_dir: Path, monitors: int, dist: Path | None, clean: bool,
               kubeconfig: Path | None, context: str | None, node_name: str,
               images: bool, cluster: str, prometheus: bool, no_ddc: tuple[str, ...]) -> None:
    """Start the node and run until Ctrl-C or SIGTERM, then stop everything it started.

    The node's Node object is labelled display.liken.sh/simulated=true and tainted
    display.liken.sh/simulated=true:NoSchedule, so only pods that tolerate the taint are
    scheduled onto it; simnode keeps it Ready while it runs. On stop it deletes the Node (if
    simnode made it) and its ResourceSlice; Displays stay, as records of monitors.
    """
    if context is not None and kubeconfig is None:
        raise click.BadParameter("--context needs --kubeconfig", param_hint="--context")
    if images and kubeconfig is not None:
        raise click.BadParameter("--images runs the embedded cluster's pod; not with"
                                 " --kubeconfig", param_hint="--images")
    from simnode.node import card  # the simulated card, only for `up`

    chosen = {m.device for m in card.monitors(monitors)}
    unknown = sorted(set(no_ddc) - chosen)
    if unknown:
        raise click.BadParameter(f"no such device on a card of {monitors}: "
                                 f"{', '.join(unknown)} (devices: {', '.join(sorted(chosen))})",
                                 param_hint="--no-ddc")
    if cluster == "local" and (kubeconfig is not None or images or prometheus or no_ddc):
        raise click.BadParameter("--cluster local runs its own cluster from the images;"
                                 " not with --kubeconfig, --images or --prometheus",
                                 param_hint="--cluster")
    from simnode.cli import up  # the node's imports, only for `up`

    options = up.Options(layout=_layout(state_dir), dist=dist or checkout.default_dist(),
                         monitors=monitors, clean=clean, node_name=node_name,
                         kubeconfig=kubeconfig, context=context, images=images,
                         prometheus=prometheus, without_ddc=tuple(no_ddc))
    if cluster == "local":
        from simnode.cli import up_local

        up_local.run(options, sys.stdout)
    else:
        up.run(options, sys.stdout)


@cli.command("prerequisites")
@click.option("--dist", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where the built PEXes are (their checkout's deploy/ is rendered); default"
                   " as for `up`.")
def prerequisites_command(dist: Path | None) -> None:
    """Print the rendered base without its DaemonSet: what `up --kubeconfig` needs in the
    cluster (CRDs, namespace, ServiceAccount, RBAC, ...), for `kubectl apply -f -`."""
    from simnode.cli import up

    sys.stdout.write(up.prerequisites(checkout.repo_of(dist or checkout.default_dist())))


@cli.command("status")
@state_dir_option
@click.option("--json", "as_json", is_flag=True,
              help="Print the same facts as one JSON object, a key per section; a section"
                   " that could not be read is {\"unavailable\": why}.")
def status_command(state_dir: Path, as_json: bool) -> None:
    """Devices, Displays, claims, compositor state and a few metrics."""
    _commands(state_dir).status(_layout(state_dir), sys.stdout, as_json=as_json)


@cli.command("claim")
@state_dir_option
@click.argument("device")
@click.option("--mode", help="The output's mode for the claim (1280x720@60).")
@click.option("--brightness", type=int, help="DDC/CI brightness 0-100.")
@click.option("--transform", help="The output's transform (normal, rotate-90, ...).")
@click.option("--scale", type=int, help="The output's scale.")
def claim_command(state_dir: Path, device: str, mode: str | None, brightness: int | None,
                  transform: str | None, scale: int | None) -> None:
    """Claim DEVICE with DisplayConfig parameters, prepare it, start a demo client; print uid.

    The claim is created in the namespace default and its allocation written as the scheduler
    would; on a real cluster (`up --kubeconfig`) that needs rights to create resourceclaims and
    to update resourceclaims/status.
    """
    given = {"mode": mode, "brightness": brightness, "transform": transform, "scale": scale}
    parameters = {k: v for k, v in given.items() if v is not None}
    _commands(state_dir).claim(_layout(state_dir), device, parameters=parameters, out=sys.stdout)


@cli.command("release")
@state_dir_option
@click.argument("claim")
def release_command(state_dir: Path, claim: str) -> None:
    """Stop CLAIM's demo client, unprepare it and delete it (by name or uid)."""
    _commands(state_dir).release(_layout(state_dir), claim, out=sys.stdout)


@cli.command("hotplug")
@state_dir_option
@click.argument("device")
@click.option("--on/--off", "connected", required=True, help="Plug the monitor in or pull it.")
def hotplug_command(state_dir: Path, device: str, connected: bool) -> None:
    """Plug DEVICE's monitor in or pull it out of the simulated card."""
    _commands(state_dir).hotplug(_layout(state_dir), device, connected=connected, out=sys.stdout)


@cli.command("hang")
@state_dir_option
def hang_command(state_dir: Path) -> None:
    """SIGSTOP the compositor, to watch the watchdog kill it and the taint come and go."""
    _commands(state_dir).hang(_layout(state_dir), out=sys.stdout)


@cli.command("shoot")
@state_dir_option
@click.argument("output")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--dist", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where the built PEXes are; default as for `up`.")
def shoot_command(state_dir: Path, output: str, file: Path, dist: Path | None) -> None:
    """Write a PNG of OUTPUT (X1, or a device) to FILE from the layout module's capture."""
    _commands(state_dir).shoot(_layout(state_dir), output, file,
                               dist=dist or checkout.default_dist(), out=sys.stdout)


@cli.command("display")
@state_dir_option
@click.argument("device")
@click.option("--mode", default=None, help="The start mode (1280x720@60, or preferred).")
@click.option("--power", type=click.Choice(["On", "Off", "Standby"]), default=None,
              help="The output's power (spec.power), applied live through KMS and DDC/CI.")
def display_command(state_dir: Path, device: str, mode: str | None, power: str | None) -> None:
    """Set DEVICE's Display spec.mode and/or spec.power, as a person does."""
    if mode is None and power is None:
        raise click.UsageError("give --mode, --power or both")
    _commands(state_dir).display(_layout(state_dir), device, mode=mode, power=power,
                                 out=sys.stdout)


@cli.command("roll")
@state_dir_option
def roll_command(state_dir: Path) -> None:
    """Replace the pod as the DaemonSet's roll does: the old one stops before the new starts."""
    _commands(state_dir).roll(_layout(state_dir), out=sys.stdout)


def main() -> None:
    try:
        # Named, or click calls it `python -m simnode.cli.main` when run as a module.
        cli(prog_name=PROG, standalone_mode=False)
    except click.exceptions.Abort:
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except USER_ERRORS as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
