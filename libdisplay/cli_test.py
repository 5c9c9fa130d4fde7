"""cli: the node options every binary deriving weston.ini takes, and `compose`'s order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from click.testing import CliRunner

from libdisplay.cli import compose, node_options


@click.command()
@node_options
def _show(**values: Any) -> None:
    click.echo(repr(sorted(values.items())))


def test_node_options_are_the_five_flags_with_their_variables_and_defaults() -> None:
    flags = {p.name: (p.opts, p.envvar) for p in _show.params}
    assert flags == {
        "sysfs_root": (["--sysfs-root"], "SYSFS_ROOT"),
        "dev_root": (["--dev-root"], "DEV_ROOT"),
        "output_alias": (["--output-alias"], "WESTON_OUTPUT_ALIASES"),
        "shell": (["--shell"], "WESTON_SHELL"),
        "runtime_dir": (["--runtime-dir"], "WESTON_RUNTIME_DIR"),
    }
    defaults = {p.name: p.default for p in _show.params if p.name != "output_alias"}
    assert defaults == {"sysfs_root": "/sys", "dev_root": "/dev", "shell": "layout-shell.so",
                        "runtime_dir": "/var/run/display.liken.sh"}


def test_node_options_read_the_pods_environment() -> None:
    env = {"SYSFS_ROOT": "/host/sys", "WESTON_OUTPUT_ALIASES": "HDMI-A-1=X1 DP-1=X2"}
    shown = CliRunner().invoke(_show, [], env=env)
    assert shown.exit_code == 0, shown.output
    assert "('sysfs_root', PosixPath('/host/sys'))" in shown.output
    assert "('output_alias', ('HDMI-A-1=X1', 'DP-1=X2'))" in shown.output
    assert f"('dev_root', {Path('/dev')!r})" in shown.output


def test_compose_applies_options_as_stacked_first_on_top() -> None:
    @click.command()
    @compose(click.option("--first"), click.option("--second"))
    def both(**_: Any) -> None:
        pass

    assert [p.name for p in both.params] == ["first", "second"]
