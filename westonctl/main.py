"""westonctl: the compositor's container. Runs weston as its child, restarts it on an
order, and exits on any exit no order names."""

from __future__ import annotations

import click

from libdisplay.cli import VERSION, setup_logging


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(VERSION, prog_name="westonctl")
@click.option("-v", "--verbose", count=True, help="Log at debug level.")
def cli(verbose: int) -> None:
    """Supervise the Weston compositor and diagnose its socket."""
    setup_logging(verbose)


if __name__ == "__main__":
    cli(prog_name="westonctl")
