"""The capture server end to end: real weston with the layout module, real ffmpeg, the server as
a subprocess over HTTPS, reviews answered by the fake apiserver.

X1 (1920x1080) shows a red client and belongs to Display node-a.card0-hdmi-a-1; X2 (320x240)
shows a green one and belongs to node-a.card0-dp-1. alice may capture X1 only; bob nothing.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import ssl
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from capture import auth, testing
from capture.main import cli
from capture.testing import Compositor, Server
from fakekube.server import FakeKube
from libdisplay import fsutil
from libdisplay.compositor.layout import LayoutControl
from tests.support import layout as layout_client
from tests.support.layout import SolidClient
from tests.support.layout_build import build_layout

RED = (255, 0, 0)
GREEN = (0, 255, 0)
X1 = (1920, 1080)
X2 = (320, 240)
DEVICES = "X1=card0-hdmi-a-1,X2=card0-dp-1"
X1_DISPLAY = "node-a.card0-hdmi-a-1"
WAIT_S = 30.0


@pytest.fixture(scope="module")
def comp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Compositor]:
    layout_so = build_layout(tmp_path_factory.mktemp("layout"))
    with testing.showing(layout_so, [(X1, RED), (X2, GREEN)]) as compositor:
        yield compositor


@pytest.fixture(scope="module")
def kube() -> Iterator[FakeKube]:
    with FakeKube() as fake:
        fake.policy.add_token("alice-token", "alice", groups=("viewers",),
                              audiences=(auth.AUDIENCE,))
        fake.policy.add_token("bob-token", "bob", audiences=(auth.AUDIENCE,))
        fake.allow(
            "get",
            "displays",
            user="alice",
            api_group="display.liken.sh",
            subresource="capture",
            name=X1_DISPLAY,
        )
        yield fake


@pytest.fixture(scope="module")
def srv(comp: Compositor, kube: FakeKube) -> Iterator[Server]:
    with testing.server(comp, kube_url=kube.url, devices=DEVICES) as server:
        yield server


# ---------- MP4 reader ----------


def ffprobe(data: bytes) -> dict[str, object]:
    with tempfile.NamedTemporaryFile(suffix=".mp4") as file:
        file.write(data)
        file.flush()
        result = subprocess.run(
            [
                "ffprobe",
                "-v",
                "error",
                "-count_frames",
                "-select_streams",
                "v:0",
                "-show_entries",
                "stream=codec_name,width,height,nb_read_frames",
                "-of",
                "json",
                file.name,
            ],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
    stream: dict[str, object] = json.loads(result.stdout)["streams"][0]
    return stream


def rgb24(data: bytes, suffix: str) -> bytes:
    """The first frame of a PNG or MP4 as packed RGB bytes, decoded by ffmpeg."""
    with tempfile.NamedTemporaryFile(suffix=suffix) as file:
        file.write(data)
        file.flush()
        return subprocess.run(
            ["ffmpeg", "-hide_banner", "-loglevel", "error", "-i", file.name, "-frames:v", "1",
             "-f", "rawvideo", "-pix_fmt", "rgb24", "pipe:1"],
            capture_output=True, check=True, timeout=60,
        ).stdout


# ---------- serving, health, metrics ----------


def test_healthz_answers_over_https_and_says_frames_can_be_had(srv: Server) -> None:
    status, _, body = srv.get("/healthz")
    assert status == 200
    assert json.loads(body) == {"frames": True}
    assert "display_capture_tls_mounted_certificate 0.0" in srv.get("/metrics")[2].decode()


def test_vaapi_probe_failing_here_gives_software_in_header_metric_and_log(srv: Server) -> None:
    status, headers, body = srv.get("/api/v1/outputs/X1/clip.mp4?seconds=1", token="alice-token")
    assert status == 200, body
    assert headers["X-Display-Encoder"] == "software"
    assert "VA-API probe on /dev/dri/renderD128 failed" in headers["X-Display-Encoder-Reason"]
    _, _, metrics = srv.get("/metrics")
    text = metrics.decode()
    assert 'display_capture_encoder_info{cause="probe-failed",encoder="software"}' in text
    assert 'display_capture_encodes_total{encoder="software",kind="clip",result="ok"}' in text
    assert "clips are encoded in software (libx264): VA-API probe" in (
        srv.process.log_path.read_text()
    )


def test_metrics_pass_promtool(srv: Server) -> None:
    srv.get("/api/v1/outputs/X1/still.png", token="alice-token")
    status, _, body = srv.get("/metrics")
    assert status == 200
    result = subprocess.run(
        ["promtool", "check", "metrics"],
        input=body,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert b"display_capture_requests_total" in body


# ---------- authorization ----------


@pytest.mark.parametrize(
    ("path", "token", "status"),
    [
        ("/api/v1/outputs/X1/still.png", None, 401),
        ("/api/v1/outputs/X1/still.png", "nobody-token", 401),
        ("/api/v1/outputs/X1/still.png", "bob-token", 403),
        ("/api/v1/outputs/X9/still.png", "bob-token", 403),
        ("/api/v1/outputs/X2/still.png", "alice-token", 404),
        ("/api/v1/outputs/X2/clip.mp4", "alice-token", 404),
        ("/api/v1/outputs", None, 401),
        ("/api/v1/outputs/X9/still.png", None, 401),
    ],
    ids=[
        "no-token",
        "unknown-token",
        "bob-may-capture-nothing",
        "bob-unknown-output-alike",
        "alice-other-display",
        "clip-denied",
        "list-no-token",
        "unknown-output-no-token",
    ],
)
def test_reviews_decide(srv: Server, path: str, token: str | None, status: int) -> None:
    got, headers, body = srv.get(path, token=token)
    assert got == status, body
    assert headers["Content-Type"].startswith("application/json")
    if status == 401:
        assert headers["WWW-Authenticate"].startswith("Bearer")


def test_outputs_lists_only_what_the_caller_may_see(srv: Server) -> None:
    status, _, body = srv.get("/api/v1/outputs", token="alice-token")
    assert status == 200
    assert json.loads(body) == {
        "node": "node-a",
        "outputs": [{"name": "X1", "display": X1_DISPLAY}],
    }


def test_apiserver_unreachable_is_503(comp: Compositor) -> None:
    with testing.server(comp, kube_url="http://127.0.0.1:9", devices=DEVICES) as server:
        status, _, body = server.get("/api/v1/outputs/X1/still.png", token="alice-token")
        assert status == 503, body
        assert b"127.0.0.1:9" not in body
        assert (
            server.get("/api/v1/outputs/X1/still.png", token="alice-token")[1]["Retry-After"] == "5"
        )
        status, _, _ = server.get("/healthz")
        assert status == 200


# ---------- stills and clips ----------


def test_still_shows_what_the_client_drew(srv: Server) -> None:
    status, headers, body = srv.get("/api/v1/outputs/X1/still.png", token="alice-token")
    assert status == 200
    assert headers["Content-Type"] == "image/png"
    size, colour = testing.png_rgb(body, 960, 540)
    assert size == X1
    assert colour == RED


def test_clip_decodes_to_size_frame_count_and_codec(srv: Server) -> None:
    status, headers, body = srv.get("/api/v1/outputs/X1/clip.mp4?seconds=2", token="alice-token")
    assert status == 200, body
    assert headers["Content-Type"] == "video/mp4"
    assert ffprobe(body) == {
        "codec_name": "h264",
        "width": 1920,
        "height": 1080,
        "nb_read_frames": "60",
    }


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/api/v1/outputs/X9/still.png", 404),
        ("/api/v1/outputs/..%2F..%2Fetc%2Fpasswd/still.png", 404),
        ("/api/v1/outputs/../../etc/passwd", 404),
        ("/api/v1/outputs/X1/../X2/still.png", 404),
        ("/api/v1/outputs/X1%00/still.png", 404),
        ("/api/v1/outputs/X1/clip.mp4?seconds=0", 400),
        ("/api/v1/outputs/X1/clip.mp4?seconds=31", 400),
        ("/api/v1/outputs/X1/clip.mp4?seconds=nan", 400),
        ("/api/v1/outputs/X1/clip.mp4?seconds=abc", 400),
    ],
    ids=[
        "unknown-output",
        "encoded-dotdot",
        "dotdot",
        "dotdot-to-other-output",
        "nul",
        "zero-seconds",
        "too-long",
        "nan",
        "not-a-number",
    ],
)
def test_bad_requests(srv: Server, path: str, status: int) -> None:
    got, _, body = srv.get(path, token="alice-token")
    assert got == status, body
    if status == 400:
        assert json.loads(body)["max"] == 30.0


def test_excess_clips_get_429_with_retry_after(srv: Server) -> None:
    def fetch(_index: int) -> tuple[int, dict[str, str]]:
        status, headers, _body = srv.get(
            "/api/v1/outputs/X1/clip.mp4?seconds=3", token="alice-token"
        )
        return status, headers

    with concurrent.futures.ThreadPoolExecutor(max_workers=5) as pool:
        results = list(pool.map(fetch, range(5)))
    statuses = sorted(status for status, _ in results)
    assert statuses.count(200) >= 1 and statuses.count(429) >= 1, statuses
    assert set(statuses) == {200, 429}
    for status, headers in results:
        if status == 429:
            assert int(headers["Retry-After"]) >= 1


def test_client_going_away_stops_its_encode(srv: Server) -> None:
    connection = srv.connection()
    connection.request(
        "GET",
        "/api/v1/outputs/X1/clip.mp4?seconds=20",
        headers={"Authorization": "Bearer alice-token"},
    )
    response = connection.getresponse()
    assert response.status == 200
    response.read(1000)
    connection.close()
    deadline = time.monotonic() + WAIT_S
    while "display_capture_encode_slots_used 0.0" not in srv.get("/metrics")[2].decode():
        assert time.monotonic() < deadline, "the encode kept running after the client left"
        time.sleep(0.2)
    _, _, metrics = srv.get("/metrics")
    assert 'result="disconnected"' in metrics.decode()


# ---------- certificate switch ----------


def _make_ca_and_leaf(directory: Path) -> tuple[Path, bytes, bytes]:
    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)

    ca_key, ca_crt = directory / "ca.key", directory / "ca.crt"
    key, csr, crt = directory / "leaf.key", directory / "leaf.csr", directory / "leaf.crt"
    ext = directory / "ext.cnf"
    ext.write_text("subjectAltName=IP:127.0.0.1\n")
    openssl(
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=test-ca",
        "-keyout",
        str(ca_key),
        "-out",
        str(ca_crt),
    )
    openssl(
        "req",
        "-new",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-subj",
        "/CN=display-capture",
        "-keyout",
        str(key),
        "-out",
        str(csr),
    )
    openssl(
        "x509",
        "-req",
        "-in",
        str(csr),
        "-CA",
        str(ca_crt),
        "-CAkey",
        str(ca_key),
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        str(ext),
        "-out",
        str(crt),
    )
    return ca_crt, crt.read_bytes(), key.read_bytes()


def _pinned_ok(srv: Server, ca: Path) -> bool:
    try:
        return srv.get("/healthz", ca=ca)[0] == 200
    except ssl.SSLError:
        return False


def test_mounted_certificate_replaces_self_signed_without_restart(
    comp: Compositor, kube: FakeKube, tmp_path: Path
) -> None:
    ca, crt, key = _make_ca_and_leaf(tmp_path)
    with testing.server(comp, kube_url=kube.url, devices=DEVICES) as server:
        assert not _pinned_ok(server, ca)
        fsutil.atomic_write(server.tls_dir / "tls.key", key, mode=0o600)
        fsutil.atomic_write(server.tls_dir / "tls.crt", crt)
        deadline = time.monotonic() + WAIT_S
        while not _pinned_ok(server, ca):
            assert time.monotonic() < deadline, "the mounted certificate was never served"
            time.sleep(0.2)
        assert server.process.returncode is None
        assert "display_capture_tls_mounted_certificate 1.0" in server.get("/metrics")[2].decode()


def test_live_page_is_served_without_screen_content(srv: Server) -> None:
    status, headers, body = srv.get("/")
    assert status == 200
    assert headers["Content-Type"].startswith("text/html")
    assert b"/api/v1/outputs" in body and b"Authorization" in body


# ---------- memory under a flood ----------

MEMORY_LIMIT_MIB = 384.0


def test_flood_of_50_clips_stays_under_the_memory_limit_with_429s(srv: Server) -> None:
    peak = 0.0
    done = False

    def sample() -> None:
        nonlocal peak
        while not done:
            peak = max(peak, testing.tree_rss_mib(srv.process.pid))
            time.sleep(0.05)

    def fetch(index: int) -> int:
        # Ten addresses, five clients each: inside the per-address connection bound, so every
        # request reaches the encode bound.
        status, _headers, body = srv.get(
            "/api/v1/outputs/X1/clip.mp4?seconds=2", token="alice-token",
            source=f"127.0.0.{2 + index % 10}",
        )
        if status == 200:
            assert ffprobe(body)["nb_read_frames"] == "60"
        return status

    with concurrent.futures.ThreadPoolExecutor(max_workers=51) as pool:
        sampler = pool.submit(sample)
        try:
            statuses = list(pool.map(fetch, range(50)))
        finally:
            done = True
            sampler.result()
    print(f"flood: peak process-tree RSS {peak:.0f} MiB, statuses {sorted(statuses)}")
    assert set(statuses) <= {200, 429}
    assert statuses.count(200) >= 1 and statuses.count(429) >= 40, statuses
    assert peak < MEMORY_LIMIT_MIB


# ---------- diagnosis ----------


def test_shoot_writes_a_png_of_the_output(comp: Compositor, tmp_path: Path) -> None:
    out = tmp_path / "x2.png"
    result = CliRunner().invoke(
        cli, ["shoot", "X2", str(out), "--socket", str(comp.capture)], prog_name="capture"
    )
    assert result.exit_code == 0, result.output
    assert testing.png_rgb(out.read_bytes(), 5, 5) == (X2, GREEN)


def test_shoot_unknown_output_fails_clearly(comp: Compositor, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli, ["shoot", "X9", str(tmp_path / "x.png"), "--socket", str(comp.capture)]
    )
    assert result.exit_code == 1
    assert "no-output" in result.output
    assert not (tmp_path / "x.png").exists()


# ---------- 4K comes at 1080p ----------


def test_4k_output_comes_at_1080p_and_each_clip_holds_one_slot(
    tmp_path: Path, kube: FakeKube
) -> None:
    layout_so = build_layout(tmp_path)
    with (
        testing.showing(layout_so, [((3840, 2160), RED)]) as comp4k,
        testing.server(comp4k, kube_url=kube.url, devices=DEVICES) as server,
    ):
        status, _, body = server.get("/api/v1/outputs/X1/still.png", token="alice-token")
        assert status == 200
        assert testing.png_rgb(body, 1900, 1000) == (X1, RED)

        def fetch(_index: int) -> tuple[int, bytes]:
            got, _, data = server.get("/api/v1/outputs/X1/clip.mp4?seconds=3", token="alice-token")
            return got, data

        # Two encode slots: two 4K clips at once are both served (a 4K frame used to cost two).
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            results = list(pool.map(fetch, range(2)))
        for status, body in results:
            assert status == 200, body[:200]
            assert ffprobe(body) == {
                "codec_name": "h264",
                "width": 1920,
                "height": 1080,
                "nb_read_frames": "90",
            }


class CornerClient(SolidClient):
    """A fullscreen client of `colour` with a blue top-left quarter: no turn or mirror of the
    screen maps it onto itself."""

    def _buffer(self, width: int, height: int) -> int:
        red, green, blue = self.colour
        row = (bytes((255, 0, 0, 255)) * (width // 2)
               + bytes((blue, green, red, 255)) * (width - width // 2))
        rest = bytes((blue, green, red, 255)) * width
        pixels = row * (height // 2) + rest * (height - height // 2)
        stride = width * 4
        fd = os.memfd_create("corner", os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, len(pixels))
            os.pwrite(fd, pixels, 0)
            pool = self._new()
            self._send(self._ids["shm"], layout_client._SHM_CREATE_POOL, pool, len(pixels), fd=fd)
        finally:
            os.close(fd)
        buffer = self._new()
        self._send(pool, layout_client._POOL_CREATE_BUFFER, buffer, 0, width, height, stride,
                   layout_client._XRGB8888)
        return buffer


def test_a_clip_frame_is_the_still_within_the_encoder_s_error(
    tmp_path: Path, kube: FakeKube
) -> None:
    # A 4K output (frames come box-filtered to 1080p), red with a blue top-left quarter: a
    # clip frame turned, mirrored or scaled otherwise than the still differs from it over a
    # quarter of the screen, far beyond x264's error.
    layout_so = build_layout(tmp_path)
    with (
        testing.compositor(layout_so, [(3840, 2160)]) as comp4k,
        testing.server(comp4k, kube_url=kube.url, devices=DEVICES) as server,
    ):
        path = comp4k.sockets / "corner.sock"
        with LayoutControl(comp4k.control) as control:
            control.create_claim_socket(path, "X1", "claim-corner")
        with CornerClient(path, colour=RED) as client:
            assert client.shown.wait(WAIT_S)
            deadline = time.monotonic() + WAIT_S
            while True:
                status, _, png = server.get("/api/v1/outputs/X1/still.png", token="alice-token")
                assert status == 200
                if testing.png_rgb(png, 1900, 1000)[1] == RED:
                    break
                assert time.monotonic() < deadline, "the client never filled the screen"
            status, _, mp4 = server.get("/api/v1/outputs/X1/clip.mp4?seconds=1",
                                        token="alice-token")
            assert status == 200, mp4[:200]
    still, frame = rgb24(png, ".png"), rgb24(mp4, ".mp4")
    assert len(still) == len(frame) == 1920 * 1080 * 3
    assert testing.png_rgb(png, 10, 10)[1] == (0, 0, 255)
    differences = [abs(a - b) for a, b in zip(still[::7], frame[::7], strict=True)]
    # x264 ultrafast at its default quality: a few levels on flat colour, more only where
    # 4:2:0 chroma straddles the quarter's two edges.
    assert sum(differences) / len(differences) < 2.0
    assert sum(d > 48 for d in differences) < len(differences) // 200
