"""`--help` and the read-only diagnosis commands of every built PEX import only what they use.

The last test starts each PEX as the images do (its venv, `pex --help`) and reads what the whole
start imported: the entry point is a function, so PEX imports the module rather than running it
through runpy, and no `--help` loads logging, json or pathlib (paths are converted when a
command runs: libdisplay.cli.PathParam).

Each case runs inside the PEX's own interpreter (`PEX_INTERPRETER=1`, so the locked versions of
click and the rest) and lists the modules the command loaded beyond what click and pathlib load
themselves: click 8.2+ imports uuid (and so platform) and datetime, and Python 3.11.4+'s pathlib
imports urllib.parse and with it ipaddress, so those are the framework's cost, not ours. What is
left must hold none of HEAVY: the Kubernetes access layer, the API and RPC stacks, TLS, YAML.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

import capture.main
import declare.main
import draplugin.main
import westonctl.main
from libdisplay.sim.edid import EdidParams, build_edid
from tests.binaries import pex_env, pex_path

# Module names, or prefixes ending in ".", that a `--help` or a diagnosis never needs.
HEAVY = (
    "libdisplay.kube.access", "libdisplay.kube.stdlib_client", "libdisplay.kube.aiohttp_client",
    "libdisplay.kube.config", "libdisplay.kube.errors", "libdisplay.kube.lightkube_client",
    "libdisplay.kube.tls", "libdisplay.kube.lightkube_errors",
    "lightkube", "lightkube.", "kubernetes", "kubernetes.", "aiohttp", "aiohttp.",
    "grpc", "grpc.", "google.protobuf", "google.protobuf.", "yaml", "yaml.",
    "prometheus_client", "prometheus_client.", "pyudev", "pyudev.", "httpx", "httpx.",
    "httpcore", "httpcore.", "anyio", "anyio.",
    "ssl", "asyncio", "asyncio.", "concurrent.futures", "http.client", "urllib.request",
    "email", "email.", "ipaddress", "uuid", "multiprocessing", "multiprocessing.",
)

# What a `--help` started as the images start it never needs (click does not import them).
HELP_AVOIDS = ("runpy", "importlib.util", "logging", "json", "pathlib")

# Runs in the PEX's interpreter: the command with standalone_mode=False (so a failing
# diagnosis, e.g. no compositor to ping, still reports), then the modules it added.
_PROBE = """
import json, sys
import click, pathlib
framework = set(sys.modules)
module, prog, args = sys.argv[1], sys.argv[2], sys.argv[3:]
cli = __import__(module, fromlist=["cli"]).cli
try:
    cli.main(args=args, prog_name=prog, standalone_mode=False)
except (Exception, SystemExit):
    pass
print(json.dumps(sorted(set(sys.modules) - framework)))
"""

BINARIES = {"declare": declare.main.cli, "westonctl": westonctl.main.cli,
            "draplugin": draplugin.main.cli, "capture": capture.main.cli}


def command_paths(command: click.Command, path: tuple[str, ...] = ()) -> Iterator[str]:
    """Every command under `command`, itself first, as its words on the command line."""
    yield " ".join(path)
    if isinstance(command, click.Group):
        for name, sub in sorted(command.commands.items()):
            yield from command_paths(sub, (*path, name))


# Every command's --help, found in the binaries' command trees so that a new one is covered.
HELP_CASES = [(binary, f"{path} --help".strip())
              for binary, cli in BINARIES.items() for path in command_paths(cli)]
# The read-only diagnoses that run without a node (each fails fast on an empty directory).
DIAGNOSIS_CASES = [
    ("declare", "connectors --sysfs-root={empty} --dev-root={empty}"),
    ("declare", "edid {empty}/monitor.bin"),
    ("westonctl", "ping --runtime-dir={empty}"),
    ("westonctl", "outputs --runtime-dir={empty}"),
    ("draplugin", "checkpoint --plugin-dir={empty}"),
    ("draplugin", "cdi --cdi-root={empty}"),
]
CASES = HELP_CASES + DIAGNOSIS_CASES


def test_the_help_cases_reach_every_subcommand() -> None:
    # A guard on the enumeration itself: nested groups (draplugin's dry-run) are walked.
    assert ("draplugin", "dry-run weston-ini --help") in HELP_CASES
    assert ("declare", "declare --help") in HELP_CASES
    assert ("capture", "--help") in HELP_CASES


def heavy(modules: list[str]) -> list[str]:
    return [m for m in modules
            if any(m.startswith(h) if h.endswith(".") else m == h for h in HEAVY)]


def loaded_by(binary: str, args: list[str], pex_root: Path, cwd: Path) -> list[str]:
    # Not in the sandbox's root: `-c` puts the working directory first on sys.path, and the
    # sandbox's partial source tree would shadow the PEX's own packages.
    done = subprocess.run(
        [str(pex_path(binary)), "-c", _PROBE, f"{binary}.main", binary, *args],
        capture_output=True, text=True, timeout=300, check=False, cwd=cwd,
        env=pex_env(pex_root, PEX_INTERPRETER="1"),
    )
    assert done.returncode == 0, done.stderr
    modules: list[str] = json.loads(done.stdout.splitlines()[-1])
    return modules


@pytest.mark.parametrize(("binary", "command"), CASES, ids=[f"{b} {c}" for b, c in CASES])
def test_command_imports_nothing_heavy(binary: str, command: str, pex_root: Path,
                                       tmp_path: Path) -> None:
    (tmp_path / "monitor.bin").write_bytes(build_edid(EdidParams()))
    args = command.format(empty=tmp_path).split()
    modules = loaded_by(binary, args, pex_root, tmp_path)
    assert f"{binary}.main" in modules, f"the probe did not load {binary}.main: {modules}"
    assert heavy(modules) == [], f"`{binary} {command}` imported {heavy(modules)}"



def imported_by_a_start(binary: str, pex_root: Path, tmp_path: Path) -> list[str]:
    """Every module `pex --help` imports, started from the venv the image installs."""
    venv = tmp_path / "venv"
    subprocess.run([str(pex_path(binary)), "venv", "--compile", str(venv)], check=True,
                   capture_output=True, timeout=300, env=pex_env(pex_root, PEX_TOOLS="1"))
    python = next((venv / "bin").glob("python3.*"))
    done = subprocess.run([str(python), "-sE", "-X", "importtime", str(venv / "pex"), "--help"],
                          capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path,
                          env=pex_env(pex_root))
    assert done.returncode == 0, done.stderr
    # `import time: self [us] | cumulative | <indent>module`
    return [line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines()
            if line.startswith("import time:") and not line.endswith("imported package")]


@pytest.mark.parametrize("binary", list(BINARIES))
def test_a_start_imports_no_runpy_logging_json_or_pathlib(binary: str, pex_root: Path,
                                                   tmp_path: Path) -> None:
    modules = imported_by_a_start(binary, pex_root, tmp_path)
    # importtime reports `import` statements, not importlib.import_module (how PEX loads the
    # entry point's module), so the binary's own imports show that its code ran.
    assert "libdisplay.cli" in modules, modules
    avoidable = [m for m in modules if m in HELP_AVOIDS]
    assert avoidable == [], f"`{binary} --help` started from its venv imported {avoidable}"
