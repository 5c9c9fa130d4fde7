"""What every binary's command line shares: logging a person can read, and the version.

Kept free of heavy imports: `--help` of every binary goes through here.
"""

from __future__ import annotations

import logging
import os
import sys

from libdisplay import __version__

VERSION = __version__

_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"


def setup_logging(verbosity: int = 0, *, stream: object = None) -> None:
    """Log to stderr; `-v` is debug. LOG_LEVEL (a level name) wins when set."""
    level_name = os.environ.get("LOG_LEVEL", "").upper()
    level = getattr(logging, level_name, None) if level_name else None
    if not isinstance(level, int):
        level = logging.DEBUG if verbosity > 0 else logging.INFO
    logging.basicConfig(
        level=level,
        format=_FORMAT,
        datefmt="%Y-%m-%dT%H:%M:%S",
        stream=stream or sys.stderr,  # type: ignore[arg-type]
        force=True,
    )
