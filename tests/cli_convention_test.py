"""One command-line convention across declare, westonctl, draplugin, capture and simnode, held
on their click commands in process (the built PEXes' --help and --version are
pex_binaries_test.py's): the program's own name in usage lines, --version, every environment
setting named in --help, one flag per environment setting, --json on every read-only
subcommand, and help on every option."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from capture.main import cli as capture_cli
from declare.main import cli as declare_cli
from draplugin.main import cli as draplugin_cli
from libdisplay import __version__
from simnode.cli.main import cli as simnode_cli
from westonctl.main import cli as westonctl_cli

PROGRAMS: dict[str, click.Group] = {
    "declare": declare_cli,
    "westonctl": westonctl_cli,
    "draplugin": draplugin_cli,
    "capture": capture_cli,
    "simnode": simnode_cli,
}
# The subcommands that only read and print what they find: each takes --json.
READ_ONLY = {
    ("declare", "connectors"), ("declare", "edid"),
    ("westonctl", "ping"), ("westonctl", "outputs"),
    ("draplugin", "checkpoint"), ("draplugin", "cdi"), ("draplugin", "ddc"),
    ("draplugin", "dry-run", "weston-ini"), ("draplugin", "dry-run", "slice"),
    ("draplugin", "dry-run", "cdi"),
    ("capture", "outputs"),
    ("simnode", "status"),
}


def _cli(program: str) -> click.Group:
    return PROGRAMS[program]


def _commands(command: click.Command, path: tuple[str, ...]) -> Iterator[
        tuple[tuple[str, ...], click.Command]]:
    yield path, command
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            yield from _commands(sub, (*path, name))


ALL = [(path, command) for program in PROGRAMS for path, command in _commands(_cli(program),
                                                                               (program,))]
IDS = [" ".join(path) for path, _ in ALL]


def _options(command: click.Command) -> list[click.Option]:
    return [p for p in command.params if isinstance(p, click.Option) and not p.hidden]


def _run(program: str, *args: str, env: dict[str, str] | None = None) -> click.testing.Result:
    return CliRunner().invoke(_cli(program), list(args), prog_name=program, env=env)


@pytest.mark.parametrize("program", PROGRAMS)
def test_version(program: str) -> None:
    result = _run(program, "--version")
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"{program}, version {__version__}"


@pytest.mark.parametrize(("path", "command"), ALL, ids=IDS)
def test_usage_names_the_program(path: tuple[str, ...], command: click.Command) -> None:
    result = _run(path[0], *path[1:], "--help")
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"Usage: {' '.join(path)} "), result.output


@pytest.mark.parametrize(("path", "command"), ALL, ids=IDS)
def test_every_option_has_help_naming_its_environment_variable(
        path: tuple[str, ...], command: click.Command) -> None:
    for option in _options(command):
        if option.name in ("help", "version"):
            continue
        assert option.help, f"{option.opts[0]} has no help"
        if option.envvar:
            assert f"env {option.envvar}" in option.help, option.opts[0]
    shown = _run(path[0], *path[1:], "--help").output
    for option in _options(command):
        if option.envvar:
            assert str(option.envvar) in " ".join(shown.split()), option.opts[0]


@pytest.mark.parametrize("program", ["declare", "westonctl", "draplugin", "capture"])
def test_every_binary_names_log_level_in_its_help(program: str) -> None:
    assert "LOG_LEVEL" in _run(program, "--help").output


def test_one_flag_per_environment_variable() -> None:
    flags: dict[str, set[str]] = {}
    envvars: dict[str, set[str]] = {}
    for _path, command in ALL:
        for option in _options(command):
            if option.envvar:
                flags.setdefault(str(option.envvar), set()).add(option.opts[0])
                envvars.setdefault(option.opts[0], set()).add(str(option.envvar))
    assert {e: f for e, f in flags.items() if len(f) > 1} == {}
    assert {f: e for f, e in envvars.items() if len(e) > 1} == {}
    assert flags["WESTON_CONFIG"] == {"--config"}


@pytest.mark.parametrize("path", sorted(READ_ONLY), ids=[" ".join(p) for p in sorted(READ_ONLY)])
def test_every_read_only_subcommand_takes_json(path: tuple[str, ...]) -> None:
    command = dict(ALL)[path]
    assert any("--json" in option.opts for option in _options(command))


def test_the_read_only_list_is_every_subcommand_with_json() -> None:
    with_json = {path for path, command in ALL
                 if any("--json" in option.opts for option in _options(command))}
    assert with_json == READ_ONLY


def test_cdi_json_lists_each_spec(tmp_path: Path) -> None:
    from libdisplay import cdi

    uid = "4f6c2a3e-9d1b-4c1e-8f3a-2b7d5e6a9c01"
    path = cdi.spec_path(uid, cdi_dir=tmp_path)
    path.write_text("{}")
    result = _run("draplugin", "cdi", f"--cdi-root={tmp_path}", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == [{"uid": uid, "path": str(path)}]


def test_capture_outputs_json(tmp_path: Path) -> None:
    ini = tmp_path / "weston.ini"
    ini.write_text("[core]\nshell=layout-shell.so\n[output]\nname=HDMI-A-1\n"
                   "[output]\nname=DP-1\n")
    result = _run("capture", "outputs", "--json", env={"WESTON_CONFIG": str(ini)})
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == [{"name": "HDMI-A-1"}, {"name": "DP-1"}]


def test_capture_shoot_reads_the_socket_the_server_reads(tmp_path: Path) -> None:
    result = _run("capture", "shoot", "X1", str(tmp_path / "x.png"),
                  env={"CAPTURE_SOCKET": str(tmp_path / "nothing.sock")})
    assert result.exit_code == 1
    assert "nothing.sock" in result.output


def _broken_inputs(tmp: Path) -> list[tuple[str, list[str], str]]:
    """(program, argv, what the error must name): a wrong path or a broken file for each
    command that reads one."""
    (tmp / "bad.ini").write_text("[core]\ngarbage\n")
    (tmp / "bad.yaml").write_text("kind: [\n")
    (tmp / "bad.edid").write_bytes(b"\x00" * 7)
    missing = str(tmp / "missing")
    return [
        ("declare", ["connectors", f"--sysfs-root={missing}"], missing),
        ("declare", ["connectors", f"--sysfs-root={missing}", "--json"], missing),
        ("declare", ["edid", missing], missing),
        ("declare", ["edid", str(tmp / "bad.edid")], "bad.edid"),
        ("westonctl", ["outputs", f"--runtime-dir={missing}"], missing),
        ("westonctl", ["ping", f"--runtime-dir={missing}"], missing),
        ("draplugin", ["checkpoint", f"--plugin-dir={missing}"], missing),
        ("draplugin", ["checkpoint", f"--plugin-dir={tmp}"], str(tmp)),
        ("draplugin", ["cdi", f"--cdi-root={missing}"], missing),
        ("draplugin", ["ddc", "99", f"--dev-root={missing}"], missing),
        ("draplugin", ["dry-run", "weston-ini", f"--sysfs-root={missing}"], missing),
        ("draplugin", ["dry-run", "weston-ini", "--node-name=n",
                       f"--displays={tmp / 'bad.yaml'}"], "bad.yaml"),
        ("draplugin", ["dry-run", "cdi", missing, "--node-name=n"], missing),
        ("capture", ["outputs", f"--config={missing}"], missing),
        ("capture", ["outputs", f"--config={tmp / 'bad.ini'}"], "bad.ini"),
        ("capture", ["shoot", "X1", str(tmp / "x.png"), f"--capture-socket={missing}"], missing),
    ]


def test_a_wrong_path_or_a_broken_input_is_an_error_naming_it(tmp_path: Path) -> None:
    for program, argv, named in _broken_inputs(tmp_path):
        result = _run(program, *argv)
        assert result.exit_code != 0, (program, argv, result.output)
        assert named in result.output, (program, argv, result.output)
