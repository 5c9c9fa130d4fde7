"""capture: the capture container. Serves stills and clips of every screen over HTTPS."""

from __future__ import annotations

import click

from libdisplay.cli import VERSION, setup_logging


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(VERSION, prog_name="capture")
@click.option("-v", "--verbose", count=True, help="Log at debug level.")
def cli(verbose: int) -> None:
    """Serve screenshots and clips of this node's screens."""
    setup_logging(verbose)


if __name__ == "__main__":
    cli(prog_name="capture")
