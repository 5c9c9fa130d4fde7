"""A consumer started the way containerd starts a pod's container that holds a claim: podman
with `--device <the claim's CDI id>` (podman and containerd share the CDI library), from its own
image, running a real Wayland client whose pixels appear on the claimed output only.

On the host: weston 14 from the trixie root with the layout shell, on Xvfb with two outputs
(X1, X2; weston's headless backend has one output only), the claim's socket made as the
operator's layout delivery makes it (`<runtime>/claims/<uid>/wayland-0`, bound to X1). The
claim's CDI spec is the one `draplugin dry-run cdi` prints from the -cli image for a sysfs tree
whose HDMI-A-1 is X1 (the operator's own code path). podman 4.3 reads specs only from
/etc/cdi and /var/run/cdi (it has no --cdi-spec-dir and no cdi_spec_dirs setting), so the spec
is written to /var/run/cdi under this run's claim UID and removed afterwards. The consumer is
the weston image's `weston-simple-shm`; both outputs are read through the layout module's
capture socket, and the -cli image's `capture shoot` takes a PNG of X1 from it.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from deploy.images.cli_checks import claim_yaml, write_node
from deploy.images.podmanrun import REPO, SmokeError, podman
from libdisplay import cdi
from libdisplay.compositor.layout import Frame, LayoutCapture, LayoutControl

SIZES = ((320, 240), (400, 300))
CLAIMED, OTHER = "X1", "X2"
DEVICE = "card0-hdmi-a-1"
CONTAINER_RUNTIME_DIR = "/run/display"
CDI_DIR = Path("/var/run/cdi")
WITHIN_S = 60.0
BLACK = (0, 0, 0)


def _trixie_path() -> None:
    """weston, its clients and the layout build run from the trixie root, as under ./pants."""
    os.environ["PATH"] = os.pathsep.join(
        [str(REPO / "build-support" / "trixie" / "bin"), str(REPO / "build-support"),
         os.environ.get("PATH", os.defpath)])


def lit(frame: Frame) -> bool:
    header = frame.header
    return any(frame.rgb(x, y) != BLACK for y in range(0, header.height, 4)
               for x in range(0, header.width, 4))


def _frame_until(capture: Path, output: str, *, want_lit: bool) -> Frame:
    deadline = time.monotonic() + WITHIN_S
    with LayoutCapture(capture, timeout=WITHIN_S) as reader:
        while True:
            frame = reader.frame(output)
            if lit(frame) == want_lit or time.monotonic() > deadline:
                return frame
            time.sleep(0.1)


@contextlib.contextmanager
def _compositor(work: Path) -> Iterator[tuple[Path, Path]]:
    """weston with the layout shell; yields (runtime dir, sockets dir)."""
    from tests.support import weston as weston_support
    from tests.support.layout_build import build_layout, layout_ini

    layout_so = build_layout(work)
    sockets = Path(tempfile.mkdtemp(prefix="lay-"))
    runtime = Path(tempfile.mkdtemp(prefix="rt-"))
    (runtime / "claims").mkdir(mode=0o755)
    config = layout_ini(sockets) + f"claims-dir={runtime / 'claims'}\n"
    try:
        with weston_support.x11(list(SIZES), config=config, args=[f"--shell={layout_so}"],
                                log_dir=work):
            yield runtime, sockets
    finally:
        for path in (sockets, runtime):
            with contextlib.suppress(OSError):
                for child in sorted(path.rglob("*"), reverse=True):
                    child.unlink() if not child.is_dir() else child.rmdir()
                path.rmdir()


def _spec_from_cli(cli: str, work: Path, uid: str, runtime: Path) -> dict[str, object]:
    node = work / "node"
    write_node(node)
    claim = work / "claim.yaml"
    claim.write_text(claim_yaml(DEVICE, uid=uid))
    done = podman("run", "--rm", "--cap-drop=ALL", "-v", f"{node}:/node:ro",
                  "-v", f"{claim}:/claim.yaml:ro", "--entrypoint", "draplugin", cli,
                  "dry-run", "cdi", "/claim.yaml", "--sysfs-root=/node/sys",
                  "--dev-root=/node/dev", "--node-name=smoke-node",
                  "--output-alias=HDMI-A-1=X1", "--output-alias=DP-1=X2",
                  f"--runtime-dir={runtime}", f"--container-runtime-dir={CONTAINER_RUNTIME_DIR}")
    spec: dict[str, object] = json.loads(done.stdout)
    return spec


def check_consumer(cli: str, weston_image: str) -> list[str]:
    _trixie_path()
    uid = f"smoke{os.getpid()}"
    with tempfile.TemporaryDirectory(prefix="smoke-cdi-") as tmp:
        work = Path(tmp)
        with _compositor(work) as (runtime, sockets):
            claim_dir = runtime / "claims" / uid
            claim_dir.mkdir(mode=0o755)
            with LayoutControl(sockets / "control.sock") as control:
                control.create_claim_socket(claim_dir / "wayland-0", CLAIMED, f"{uid}.{DEVICE}")
            spec = _spec_from_cli(cli, work, uid, runtime)
            spec_path = cdi.spec_path(uid, cdi_dir=CDI_DIR)
            CDI_DIR.mkdir(parents=True, exist_ok=True)
            spec_path.write_text(json.dumps(spec))
            device_id = f"{cdi.KIND}={uid}-{DEVICE}"
            name = f"display-smoke-consumer-{os.getpid()}"
            try:
                podman("run", "-d", "--name", name, "--cap-drop=ALL",
                       "--security-opt=no-new-privileges", "--device", device_id,
                       "--entrypoint", "/usr/bin/weston-simple-shm", weston_image)
                claimed = _frame_until(sockets / "capture.sock", CLAIMED, want_lit=True)
                if not lit(claimed):
                    logs = podman("logs", name, check=False)
                    raise SmokeError(f"consumer: no pixels on {CLAIMED} within {WITHIN_S:g} s; "
                                     f"its log:\n{logs.stdout}{logs.stderr}")
                other = _frame_until(sockets / "capture.sock", OTHER, want_lit=False)
                if lit(other):
                    raise SmokeError(f"consumer: its pixels reached {OTHER}, which it did not "
                                     "claim")
                shot = _shoot(cli, sockets, work)
            finally:
                podman("rm", "-f", name, check=False)
                spec_path.unlink(missing_ok=True)
    return [f"podman --device {device_id}: weston-simple-shm's pixels on {CLAIMED}, none on "
            f"{OTHER} (layout capture)", shot]


def _shoot(cli: str, sockets: Path, work: Path) -> str:
    """The -cli image's `capture shoot` of the claimed output, through the capture socket."""
    out = work / "shot"
    out.mkdir()
    podman("run", "--rm", "--cap-drop=ALL", "-v", f"{sockets}:/sockets:ro",
           "-v", f"{out}:/out", "--entrypoint", "capture", cli, "shoot", CLAIMED,
           "/out/x1.png", "--socket=/sockets/capture.sock")
    png = (out / "x1.png").read_bytes()
    if not png.startswith(b"\x89PNG\r\n\x1a\n"):
        raise SmokeError("capture shoot from the -cli image wrote no PNG")
    return f"capture shoot {CLAIMED} from the -cli image: a {len(png)} B PNG"
