"""declare: the init container. Enumerates the claimed card's connectors, reads each
monitor's Display, and writes weston.ini, so the compositor starts at the right modes."""

from __future__ import annotations

import click

from libdisplay.cli import VERSION, setup_logging


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(VERSION, prog_name="declare")
@click.option("-v", "--verbose", count=True, help="Log at debug level.")
def cli(verbose: int) -> None:
    """Write weston's config for the monitors on the claimed card."""
    setup_logging(verbose)


if __name__ == "__main__":
    cli(prog_name="declare")
