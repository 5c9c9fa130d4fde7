"""draplugin: the operator container. The DRA kubelet plugin for display.liken.sh and the
node publisher of monitors."""

from __future__ import annotations

import click

from libdisplay.cli import VERSION, setup_logging


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(VERSION, prog_name="draplugin")
@click.option("-v", "--verbose", count=True, help="Log at debug level.")
def cli(verbose: int) -> None:
    """Publish this node's monitors and prepare them for claiming pods."""
    setup_logging(verbose)


if __name__ == "__main__":
    cli(prog_name="draplugin")
