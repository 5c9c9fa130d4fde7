"""The display-operator-cli image runs every read-only subcommand an operator is promised, on
inputs mounted read-only, and its system tools agree with the project's own code:

- `declare connectors`, `draplugin dry-run weston-ini|slice|cdi` on a sysfs tree that
  libdisplay.sim.sysfs makes from corpus EDIDs, with a claim file;
- `draplugin ddc` on a simulated monitor's bus socket (libdisplay.hardware.ddc_socket), read back
as the
  simulated monitor holds its values;
- `edid-decode` against `python3 -m libdisplay.hardware.edid --json` on a sample of the corpus, on
the
  fields edid-decode's oracle (testdata/edid/oracle.json) pins;
- ddcutil's parser (libddcutil, `ddcutil_parse.py`) against libdisplay.hardware.mccs on every
  capabilities string of the corpus. ddcutil itself reaches monitors only through a kernel
  /dev/i2c-N (an I2C_RDWR ioctl): the simulated bus is a unix socket, so no ddcutil command
  can talk to it, and that comparison is not made.
"""

from __future__ import annotations

import contextlib
import json
import re
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from deploy.images.podmanrun import IMAGES, REPO, SmokeError, podman
from libdisplay.hardware import mccs
from libdisplay.hardware.ddc_socket import MonitorServer
from libdisplay.sim import sysfs as sysfs_tree
from libdisplay.sim.ddc import Feature, SimulatedMonitor

EDIDS = REPO / "testdata" / "edid"
CAPS = REPO / "testdata" / "ddc-caps"
NODE = "smoke-node"
CLAIM_UID = "c1a1m-smoke"
# Two corpus monitors: HDMI-A-1 on i2c-3 (a simulated monitor answers DDC/CI there) and DP-1.
MONITORS = (("HDMI-A", "ACI-ASUS_VS247-5f1f2af6.bin", 3),
            ("DP", "dell-up2718q-dp-28d8f761.bin", 4))
SIM_CAPS = ("(prot(monitor)type(lcd)model(SMOKE)cmds(01 02 03 0C E3 F3)"
            "vcp(02 10 12 60(0F 11 12) D6(01 04 05))mccs_ver(2.2))")
SIM_EXPECTED = {"supported": True, "capabilities": SIM_CAPS,
                "vcpCodes": [0x02, 0x10, 0x12, 0x60, 0xD6],
                "inputs": ["DisplayPort-1", "HDMI-1", "HDMI-2"], "brightness": 40,
                "contrast": 70, "input": "HDMI-1", "power": "off"}
EDID_SAMPLE_EVERY = 10
# The oracle's fields that `edid-decode -c` prints in its block 0 text.
EDID_FIELDS = ("manufacturer", "product_code", "serial_number", "edid_version",
               "manufacture_week", "manufacture_year", "model_year", "image_size_cm",
               "monitor_name", "serial_string", "digital")


def _edid_file(name: str) -> Path:
    path = EDIDS / name
    if not path.is_file():
        raise SmokeError(f"corpus EDID {name} is missing")
    return path


def write_node(root: Path) -> None:
    """A card with the two monitors, /dev/i2c-N as plain files (no DDC/CI) until one is served."""
    connectors = tuple(
        sysfs_tree.SimConnector(type=kind, edid=_edid_file(name).read_bytes(), i2c_bus=bus)
        for kind, name, bus in MONITORS)
    sysfs_tree.write_tree(root, sysfs_tree.SimCard(connectors=connectors))


def claim_yaml(device: str, *, uid: str = CLAIM_UID) -> str:
    """A ResourceClaim allocated one monitor of NODE (JSON, which is YAML)."""
    return json.dumps({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "smoke", "namespace": "default", "uid": uid},
        "status": {"allocation": {"devices": {"results": [
            {"request": "screen", "driver": "display.liken.sh", "pool": NODE,
             "device": device}], "config": []}}},
    })


@contextlib.contextmanager
def simulated_bus(root: Path, bus: int) -> Iterator[Path]:
    """A simulated monitor served at `<root>/dev/i2c-<bus>`, in place of the plain file."""
    path = sysfs_tree.dev_root(root) / f"i2c-{bus}"
    path.unlink(missing_ok=True)
    monitor = SimulatedMonitor(capabilities=SIM_CAPS, values={
        0x10: Feature(40, 100), 0x12: Feature(140, 200),
        0x60: Feature(0x11, 0x12, allowed=(0x0F, 0x11, 0x12)),
        0xD6: Feature(0x04, 0x05, allowed=(0x01, 0x04, 0x05))})
    with MonitorServer(path, monitor):
        yield path


def _cli(image: str, mounts: Sequence[tuple[Path, str]], *argv: str,
         check: bool = True) -> str:
    volumes = [arg for host, inside in mounts for arg in ("-v", f"{host}:{inside}:ro")]
    done = podman("run", "--rm", "--cap-drop=ALL", *volumes, "--entrypoint", argv[0], image,
                  *argv[1:], check=check)
    return done.stdout


def _tree_args() -> list[str]:
    return ["--sysfs-root=/node/sys", "--dev-root=/node/dev"]


def check_subcommands(image: str) -> list[str]:
    """Every read-only subcommand on the mounted tree; one line of what each showed."""
    seen = []
    with tempfile.TemporaryDirectory(prefix="smoke-cli-") as tmp:
        root = Path(tmp) / "node"
        write_node(root)
        claim = Path(tmp) / "claim.yaml"
        claim.write_text(claim_yaml("card0-dp-1"))
        mounts = [(root, "/node"), (claim, "/claim.yaml")]
        with simulated_bus(root, 3):
            connectors = json.loads(_cli(image, mounts, "declare", "connectors", *_tree_args(),
                                         "--json"))
            names = sorted(row["device"] for row in connectors)
            if names != ["card0-dp-1", "card0-hdmi-a-1"]:
                raise SmokeError(f"declare connectors listed {names}")
            seen.append(f"declare connectors: {', '.join(names)}")
            probe = json.loads(_cli(image, mounts, "draplugin", "ddc", "/node/dev/i2c-3",
                                    "--json"))
            if probe != {"bus": "/node/dev/i2c-3", **SIM_EXPECTED}:
                raise SmokeError(f"draplugin ddc read {probe}, expected {SIM_EXPECTED}")
            seen.append("draplugin ddc: the simulated monitor's brightness 40 %, contrast 70 %, "
                        "HDMI-1, off")
            ini = _cli(image, mounts, "draplugin", "dry-run", "weston-ini", *_tree_args())
            for output in ("name=HDMI-A-1\n", "name=DP-1\n", "[layout]\n"):
                if output not in ini:
                    raise SmokeError(f"dry-run weston-ini lacks {output!r}:\n{ini}")
            seen.append("draplugin dry-run weston-ini: both outputs and the layout sockets")
            obj = json.loads(_cli(image, mounts, "draplugin", "dry-run", "slice", *_tree_args(),
                                  f"--node-name={NODE}"))
            ddc = {d["name"]: d["attributes"]["ddc"]["bool"] for d in obj["spec"]["devices"]}
            if ddc != {"card0-hdmi-a-1": True, "card0-dp-1": False}:
                raise SmokeError(f"dry-run slice: ddc attributes {ddc}")
            seen.append("draplugin dry-run slice: two devices, ddc true where the monitor "
                        "answers")
        spec = json.loads(_cli(image, mounts, "draplugin", "dry-run", "cdi", "/claim.yaml",
                               *_tree_args(), f"--node-name={NODE}"))
        names = [d["name"] for d in spec["devices"]]
        if names != [f"{CLAIM_UID}-card0-dp-1"]:
            raise SmokeError(f"dry-run cdi: devices {names}")
        seen.append(f"draplugin dry-run cdi: device {names[0]}")
        if any(root.rglob("*.ini")) or any(root.rglob("*.yaml")):
            raise SmokeError("a dry run wrote into the tree")
    return seen


# --- edid-decode ---------------------------------------------------------------------------

_LINES = {
    "edid_version": re.compile(r"^  EDID Structure Version & Revision: (\S+)$", re.M),
    "manufacturer": re.compile(r"^    Manufacturer: (\S+)$", re.M),
    "product_code": re.compile(r"^    Model: (\d+)$", re.M),
    "serial_number": re.compile(r"^    Serial Number: (\d+)", re.M),
    "monitor_name": re.compile(r"^    Display Product Name: '(.*)'$", re.M),
    "serial_string": re.compile(r"^    Display Product Serial Number: '(.*)'$", re.M),
}
_MADE_WEEK = re.compile(r"^    Made in: week (\d+) of (\d+)$", re.M)
_MADE_YEAR = re.compile(r"^    Made in: (\d+)$", re.M)
_MODEL_YEAR = re.compile(r"^    Model year: (\d+)$", re.M)
_SIZE = re.compile(r"^    Maximum image size: (\d+) cm x (\d+) cm$", re.M)


def parse_edid_decode(text: str) -> dict[str, object]:
    """The oracle's fields from `edid-decode -c` text, where it prints them."""
    block0 = text.split("\nBlock 1,", 1)[0]
    found: dict[str, object] = {"serial_number": 0, "monitor_name": None,
                                "serial_string": None, "manufacture_week": None,
                                "manufacture_year": None, "model_year": None,
                                "image_size_cm": None}
    for field, pattern in _LINES.items():
        match = pattern.search(block0)
        if match:
            value = match.group(1)
            found[field] = int(value) if field in ("product_code", "serial_number") else value
    if (week := _MADE_WEEK.search(block0)) is not None:
        found["manufacture_week"], found["manufacture_year"] = int(week[1]), int(week[2])
    elif (year := _MADE_YEAR.search(block0)) is not None:
        # edid-decode leaves the week out when its byte is 0 ("week unspecified").
        found["manufacture_week"], found["manufacture_year"] = 0, int(year[1])
    if (model := _MODEL_YEAR.search(block0)) is not None:
        found["model_year"] = model[1]
    if (size := _SIZE.search(block0)) is not None:
        found["image_size_cm"] = [int(size[1]), int(size[2])]
    found["digital"] = "    Digital display" in block0
    return found


def check_edid_decode(image: str) -> str:
    """edid-decode in the image, the project's decode in the image and the oracle agree."""
    oracle = {e["file"]: e for e in json.loads((EDIDS / "oracle.json").read_text())["files"]}
    sample = sorted(oracle)[::EDID_SAMPLE_EVERY]
    mounts = [(EDIDS, "/edid")]
    ours = json.loads(_cli(image, mounts, "/opt/display/declare/bin/python", "-m",
                           "libdisplay.hardware.edid", "--json", *(f"/edid/{f}" for f in sample)))
    loop = "for f in \"$@\"; do echo \"=== $f\"; edid-decode -c \"/edid/$f\"; done; exit 0"
    text = _cli(image, mounts, "/bin/sh", "-c", loop, "sh", *sample)
    theirs = {chunk.split("\n", 1)[0]: chunk for chunk in text.split("=== ")[1:]}
    mismatches = []
    for name, record in zip(sample, ours, strict=True):
        decoded = parse_edid_decode(theirs.get(name, ""))
        for field in EDID_FIELDS:
            values = (record.get(field), decoded.get(field), oracle[name].get(field))
            if len({json.dumps(v) for v in values}) != 1:
                mismatches.append(f"{name} {field}: ours {values[0]!r}, edid-decode "
                                  f"{values[1]!r}, oracle {values[2]!r}")
    if mismatches:
        raise SmokeError("edid-decode and the project disagree:\n" + "\n".join(mismatches))
    return (f"edid-decode and libdisplay.hardware.edid agree with the oracle on {len(sample)} "
            f"corpus EDIDs x {len(EDID_FIELDS)} fields")


# --- ddcutil -------------------------------------------------------------------------------


def ours_caps(text: bytes) -> dict[str, object]:
    parsed = mccs.parse_capabilities(text)
    features: dict[str, list[int]] = {}
    for feature in parsed.vcp:
        features.setdefault(f"{feature.code:02X}", list(feature.allowed))
    return {"mccs_version": list(parsed.mccs_version) if parsed.mccs_version else None,
            "commands": list(parsed.cmds), "features": features,
            "warnings": list(parsed.warnings)}


COMPARED = ("features", "mccs_version", "commands")


def check_ddcutil_parse(image: str) -> list[str]:
    """libddcutil's parse of each corpus string against libdisplay.hardware.mccs. Where neither
    parser flags the string, features with their values, the MCCS version and the commands must be
    equal; where one flags it, a difference is reported (ddcutil gives up on a string with a
    malformed segment, libdisplay.hardware.mccs keeps what still parses), not failed."""
    files = sorted(p.relative_to(CAPS).as_posix() for p in CAPS.rglob("*.txt"))
    mounts = [(CAPS, "/caps"), (IMAGES / "ddcutil_parse.py", "/ddcutil_parse.py")]
    theirs = json.loads(_cli(image, mounts, "/usr/bin/python3.11", "/ddcutil_parse.py",
                             *(f"/caps/{f}" for f in files)))
    same = 0
    flagged: list[str] = []
    wrong: list[str] = []
    for name in files:
        ddcutil = theirs[f"/caps/{name}"]
        ours = ours_caps((CAPS / name).read_bytes())
        if ddcutil["status"] != 0:
            flagged.append(f"{name}: ddcutil refused it (status {ddcutil['status']})")
            continue
        differ = [k for k in COMPARED if ddcutil[k] != ours[k]]
        if not differ:
            same += 1
            continue
        warnings = ours["warnings"]
        assert isinstance(warnings, list)
        notes = [*(f"ddcutil: {m}" for m in ddcutil["messages"]),
                 *(f"ours: {w}" for w in warnings)]
        line = f"{name}: {', '.join(differ)} differ ({'; '.join(notes)[:200] or 'unflagged'})"
        (flagged if notes else wrong).append(line)
    if wrong:
        raise SmokeError("ddcutil and libdisplay.hardware.mccs parse strings neither flags "
                         "differently:\n" + "\n".join(wrong))
    return [f"ddcutil's parser (libddcutil 1.4) and libdisplay.hardware.mccs agree on {same} of "
            f"{len(files)} capabilities strings (features and values, version, commands)",
            *(f"  differ where a parser flags the string: {f}" for f in flagged)]
