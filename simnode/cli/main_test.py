"""main: what `up --help` and `claim --help` tell a user about a real cluster, and options
refused before anything starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from libdisplay import __version__
from simnode.cli.main import cli
from simnode.kubelet.node_object import SIMULATED_LABEL


def _help(command: str) -> str:
    result = CliRunner().invoke(cli, [command, "--help"], terminal_width=400)
    assert result.exit_code == 0, result.output
    return " ".join(result.output.split())


def test_up_help_says_how_the_node_is_marked_and_what_a_cluster_needs() -> None:
    text = _help("up")
    assert f"labelled {SIMULATED_LABEL}=true" in text
    assert f"tainted {SIMULATED_LABEL}=true:NoSchedule" in text
    assert "only pods that tolerate the taint" in text
    assert "`simnode prerequisites | kubectl apply -f -`" in text
    assert "a token of the manifest's ServiceAccount (TokenRequest)" in text


def test_claim_help_names_the_rights_a_real_cluster_asks() -> None:
    assert "create resourceclaims and to update resourceclaims/status" in _help("claim")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--context=prod"], "--context needs --kubeconfig"),
        (["--node-name=Sim_1"], "not a DNS-1123 subdomain"),
    ],
    ids=["context-alone", "bad-node-name"],
)
def test_up_refuses_options_before_starting(tmp_path: Path, args: list[str],
                                            expected: str) -> None:
    result = CliRunner().invoke(cli, ["up", f"--state-dir={tmp_path / 'node'}", *args])
    assert result.exit_code == 2
    assert expected in result.output
    assert not (tmp_path / "node").exists()


def test_names_itself_simnode_when_run_as_a_module() -> None:
    """`python -m simnode.cli.main --help` (the PEX runs main()) says `simnode`, not the module."""
    result = subprocess.run([sys.executable, "-m", "simnode.cli.main", "--help"],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Usage: simnode [OPTIONS] COMMAND"), result.stdout


def test_version_is_the_library_version() -> None:
    result = subprocess.run([sys.executable, "-m", "simnode.cli.main", "--version"],
                            capture_output=True, text=True, timeout=120, check=False)
    assert (result.returncode, result.stdout) == (0, f"simnode, version {__version__}\n")
