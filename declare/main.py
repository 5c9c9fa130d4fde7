"""declare: the init container. Enumerates the claimed card's connectors, reads each
monitor's Display, and writes weston.ini, so the compositor starts at the right modes."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from libdisplay.cli import (
    PathParam,
    binary_group,
    dev_root_option,
    echo_json,
    node_options,
    output_aliases,
    sysfs_root_option,
    weston_config_option,
)
from libdisplay.kube.cli_options import api_options

if TYPE_CHECKING:
    from pathlib import Path

cli = binary_group("declare", "Write weston's config for the monitors on the claimed card.")


@cli.command("declare")
@node_options
@weston_config_option("The weston.ini to write.")
@click.option("--node-name", envvar="NODE_NAME",
              help="This node's name: Displays are per node (env NODE_NAME).")
@api_options
@click.option(
    "--api-timeout",
    default=5.0,
    show_default=True,
    type=click.FloatRange(min=0.1),
    help="Seconds for all Display reads together; then preferred modes.",
)
@click.option("--dry-run", is_flag=True, help="Print weston.ini instead of writing it.")
def declare_cmd(
    sysfs_root: Path,
    dev_root: Path,
    config: Path,
    node_name: str | None,
    api_server: str | None,
    api_token_file: Path | None,
    api_ca_file: Path | None,
    kubeconfig: Path | None,
    api_timeout: float,
    output_alias: tuple[str, ...],
    shell: str,
    runtime_dir: Path,
    dry_run: bool,
) -> None:
    """Write weston.ini for the claimed card's connectors (the main mode); exits 0.

    Each output starts at its Display's spec.mode, or at the monitor's preferred mode when
    the API is unreachable, the Display is missing or the mode is not offered.
    """
    from declare.run import Settings, plan, write
    from libdisplay.hardware import drm
    from libdisplay.kube import access as kubeaccess
    from libdisplay.kube import cli_options as kubecli

    endpoint: kubeaccess.Endpoint | None
    try:
        endpoint = kubecli.endpoint({"api_server": api_server, "api_token_file": api_token_file,
                                     "api_ca_file": api_ca_file, "kubeconfig": kubeconfig})
    except kubeaccess.NoEndpointError as err:
        import logging

        logging.getLogger("declare").warning("%s: every monitor starts at its preferred mode", err)
        endpoint = None
    settings = Settings(
        sysfs_root=sysfs_root,
        dev_root=dev_root,
        config=config,
        node_name=node_name,
        endpoint=endpoint,
        api_timeout_s=api_timeout,
        aliases=output_aliases(output_alias),
        shell=shell,
        runtime_dir=runtime_dir,
    )
    try:
        if dry_run:
            click.echo(plan(settings)[0], nl=False)
        else:
            write(settings)
    except drm.DrmError as err:
        raise click.ClickException(str(err)) from err


@cli.command()
@sysfs_root_option
@dev_root_option
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
def connectors(sysfs_root: Path, dev_root: Path, as_json: bool) -> None:
    """List the delivered cards' connectors and the monitor on each (read-only)."""
    from libdisplay.compositor.outputs import read_monitor
    from libdisplay.hardware import drm

    try:
        cards = drm.enumerate_cards(sysfs_root=sysfs_root, dev_root=dev_root)
    except drm.DrmError as err:
        raise click.ClickException(str(err)) from err
    rows = []
    for card in cards:
        for connector in card.connectors:
            monitor = read_monitor(connector) if connector.connected else None
            edid = monitor.edid if monitor else None
            rows.append(
                {
                    "device": connector.device_name,
                    "card": card.name,
                    "pci_address": card.pci_address,
                    "status": connector.status,
                    "monitor": str(edid.identity) if edid else None,
                    "model": edid.monitor_name if edid else None,
                    "preferred": str(monitor.preferred) if monitor and monitor.preferred else None,
                    "modes": len(monitor.offered) if monitor else 0,
                    "i2c_bus": connector.i2c_bus,
                }
            )
    if as_json:
        echo_json(rows, indent=2)
        return
    for row in rows:
        click.echo(
            f"{row['device']:<20} {row['status']:<13} {row['model'] or '-':<16} "
            f"{row['preferred'] or '-':<16} {row['monitor'] or ''}"
        )


@cli.command()
@click.argument("files", nargs=-1, required=True, type=PathParam(dir_okay=False))
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON array, one object per file in argument order; a file that "
              "failed has `error`.")
def edid(files: tuple[Path, ...], as_json: bool) -> None:
    """Decode EDID files: identity, name, preferred mode and every mode offered.

    Exits 1 when a file cannot be read, is not an EDID, or is damaged (a bad checksum, an
    extension count that does not match the blocks present); the reason goes to stderr."""
    from libdisplay.hardware.edid import EdidError, json_record, read_edid, summary

    failed = False
    records: list[dict[str, object]] = []
    for path in files:
        try:
            decoded = read_edid(path)
        except (OSError, EdidError) as err:
            click.echo(f"{path}: {err}", err=True)
            records.append({"path": str(path), "error": str(err)})
            failed = True
            continue
        damage = []
        if decoded.bad_checksum_blocks:
            blocks = ", ".join(map(str, decoded.bad_checksum_blocks))
            damage.append(f"bad checksum in block(s) {blocks}")
        if decoded.extension_count_mismatch:
            damage.append(f"extension count {decoded.declared_extensions} does not match the "
                          f"{len(decoded.extensions)} extension block(s) present")
        for reason in damage:
            click.echo(f"{path}: {reason}", err=True)
        failed = failed or bool(damage)
        if as_json:
            records.append({"path": str(path), **json_record(decoded),
                            **({"error": "; ".join(damage)} if damage else {})})
        else:
            click.echo(f"{path}:\n{summary(decoded)}")
    if as_json:
        echo_json(records, indent=2)
    if failed:
        raise SystemExit(1)


def main() -> None:
    """The PEX's entry point: a function, so that the PEX imports this module (runpy, which
    running it as a script takes, costs every start its own imports)."""
    cli(prog_name="declare")


if __name__ == "__main__":
    main()
