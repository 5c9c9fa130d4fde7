"""Runs each image build.sh made, as a cluster owner's node would start it, and checks it.

    python3 deploy/images/smoke.py [--registry R] [--tag T] [--skip-consumer]

- Image facts (facts.py): each image's size, base and packages, and the pod's weight; the four
  pod images and their variants hold no shell (`/bin/sh` cannot be run), and their binary
  answers `--version`, by its entry point and by name on PATH; the operator image runs
  `draplugin checkpoint` by name, as the README's `kubectl exec` line does.
- The capture image starts with no Secret (an empty read-only mount), answers HTTPS /healthz
  from its self-signed leaf, and serves a Secret projected later without a restart
  (capture_tls.py); its ffmpeg encodes raw frames from stdin as a clip does (capture_clip.py).
- The -cli image runs every read-only subcommand on mounted inputs, and its edid-decode and
  ddcutil's parser agree with the project's decode (cli_checks.py).
- A consumer from its own image, under podman with the claim's CDI device, draws on the
  claimed output only (cdi_consumer.py; needs weston from the trixie root and Xvfb).
Exits 1 naming the first check that failed.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the repo's packages by their names
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from deploy.images import capture_clip, capture_tls, cdi_consumer, cli_checks, facts
from deploy.images.podmanrun import SmokeError, image_name, podman

CLI_IMAGE = facts.CLI_IMAGE
POD_IMAGES = facts.POD_IMAGES


def check_version(image: str) -> str:
    done = podman("run", "--rm", "--cap-drop=ALL", image, "--version")
    return done.stdout.strip()


# The binary each pod image runs: on PATH by name, as `kubectl exec ... -- <binary>` needs it.
BINARY_OF = {"display-declare": "declare", "display-weston": "westonctl",
             "display-weston-pixman": "westonctl", "display-operator": "draplugin",
             "display-capture": "capture", "display-capture-amd": "capture"}
PLUGIN_DIR = "/var/lib/kubelet/plugins/display.liken.sh"


def check_on_path(image: str, binary: str) -> str:
    done = podman("run", "--rm", "--cap-drop=ALL", "--entrypoint", binary, image, "--version")
    return done.stdout.strip()


def check_exec_checkpoint(image: str) -> str:
    """The README's `kubectl exec POD -c operator -- draplugin checkpoint`, on a plugin dir
    holding a dra.sock and no claim yet: an empty checkpoint, exit 0."""
    with tempfile.TemporaryDirectory(prefix="smoke-plugin-") as tmp:
        (Path(tmp) / "dra.sock").touch()
        done = podman("run", "--rm", "--cap-drop=ALL", "-v", f"{tmp}:{PLUGIN_DIR}:ro",
                      "--entrypoint", "draplugin", image, "checkpoint")
    if '"claims"' not in done.stdout:
        raise SmokeError(f"draplugin checkpoint printed no checkpoint: {done.stdout!r}")
    return "draplugin checkpoint by name: an empty checkpoint"


def _say(line: str) -> None:
    print(line, flush=True)


def run(registry: str, tag: str, *, consumer: bool) -> None:
    found = facts.all_facts(registry, tag)
    _say(facts.render(found))
    for line in facts.pod_weight(found):
        _say(line)
    for f in found:
        repository = facts.repository(f)
        if repository in POD_IMAGES or repository in facts.VARIANT_IMAGES:
            if f.has_shell:
                raise SmokeError(f"{f.image} runs /bin/sh: a pod image must hold no shell")
            _say(f"{repository}: no shell; --version: {check_version(f.image)}")
            _say(f"{repository}: on PATH: {check_on_path(f.image, BINARY_OF[repository])}")
    operator = image_name(registry, "display-operator", tag)
    _say(f"display-operator: {check_exec_checkpoint(operator)}")
    capture = image_name(registry, "display-capture", tag)
    for line in capture_tls.check_secret_rotation(capture):
        _say(f"display-capture: {line}")
    for line in capture_clip.check_clip(capture):
        _say(f"display-capture: {line}")
    cli = image_name(registry, CLI_IMAGE, tag)
    for line in cli_checks.check_subcommands(cli):
        _say(f"{CLI_IMAGE}: {line}")
    _say(f"{CLI_IMAGE}: {cli_checks.check_edid_decode(cli)}")
    for line in cli_checks.check_ddcutil_parse(cli):
        _say(f"{CLI_IMAGE}: {line}")
    _say(f"{CLI_IMAGE}: ddcutil itself not run: it reaches monitors only through a kernel "
         "/dev/i2c-N, and the simulated bus is a unix socket")
    if consumer:
        weston = image_name(registry, "display-weston", tag)
        for line in cdi_consumer.check_consumer(cli, weston):
            _say(f"consumer: {line}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--registry", default="ghcr.io/liken-sh")
    parser.add_argument("--tag", default=None, help="default: the binaries' version")
    parser.add_argument("--skip-consumer", action="store_true",
                        help="Leave out the CDI consumer (it needs weston and Xvfb).")
    args = parser.parse_args(argv)
    try:
        run(args.registry, args.tag or facts.version(), consumer=not args.skip_consumer)
    except (SmokeError, subprocess.SubprocessError, OSError) as err:
        print(f"smoke: FAILED: {err}", file=sys.stderr)
        return 1
    print("smoke: every image passed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
