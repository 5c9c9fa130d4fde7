"""What each image's base must hold for its binary to start (build.sh --dry-run's plan)."""

from __future__ import annotations

import functools
import itertools
import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from capture import encode
from capture.encode import EncoderChoice
from deploy.images import capture_tls, cli_checks, smoke
from libdisplay.compositor.layout import FrameHeader
from tests.deploy.manifests import (
    IMAGES,
    base_packages,
    build_plan,
    container,
    dockerfile,
    env,
    json_list,
    split_image,
)


def _base(repository: str, arg: str = "BASE_IMAGE") -> set[str]:
    return base_packages(build_plan()[f"ghcr.io/liken-sh/{repository}"].build_args[arg])


def test_capture_base_has_the_openssl_command_its_start_up_leaf_needs() -> None:
    # capture/tls.py makes the self-signed leaf it serves before a Secret exists with it.
    assert "openssl" in _base("display-capture")


def test_compositor_is_trixies_weston_14_on_python_3_13() -> None:
    assert {"weston", "python3.13"} <= _base("display-weston")
    assert "libweston-14-dev" in _base("display-weston", "BUILD_IMAGE")


def test_cli_base_has_the_library_whose_parser_the_smoke_run_compares() -> None:
    # deploy/images/ddcutil_parse.py calls libddcutil's ddca_parse_capabilities_string.
    assert {"ddcutil", "libddcutil4", "edid-decode"} <= _base("display-operator-cli")


def test_edid_decode_text_is_read_as_the_oracle_records_it(testdata: Path) -> None:
    edids = testdata / "edid"
    oracle = {e["file"]: e for e in json.loads((edids / "oracle.json").read_text())["files"]}
    for name in sorted(oracle)[::7]:
        text = subprocess.run(["edid-decode", "-c", str(edids / name)], capture_output=True,
                              text=True, timeout=30, check=False).stdout
        decoded = cli_checks.parse_edid_decode(text)
        assert {f: decoded[f] for f in cli_checks.EDID_FIELDS} == {
            f: oracle[name][f] for f in cli_checks.EDID_FIELDS}, name


def test_a_secret_is_projected_as_the_kubelet_does(tmp_path: Path) -> None:
    capture_tls.project_secret(tmp_path, {"tls.crt": b"one", "tls.key": b"k1"})
    first = (tmp_path / "..data").resolve()
    capture_tls.project_secret(tmp_path, {"tls.crt": b"two", "tls.key": b"k2"})
    assert (tmp_path / "tls.crt").read_bytes() == b"two"
    assert os.readlink(tmp_path / "tls.crt") == "..data/tls.crt"
    assert (tmp_path / "..data").resolve() != first
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("..")) == [
        "tls.crt", "tls.key"]


# --- What each image holds, and the variants the overlays take ---------------------------

LIB = "/usr/lib/x86_64-linux-gnu"


def _image_base(repository: str) -> str:
    return build_plan()[f"ghcr.io/liken-sh/{repository}"].build_args["BASE_IMAGE"]


@functools.cache
def _dry_run() -> list[list[str]]:
    """The base commands of `build.sh --dry-run` (on stderr: a base's stdout is its name)."""
    done = subprocess.run(["bash", str(IMAGES / "build.sh"), "--dry-run"], capture_output=True,
                          text=True, timeout=60, check=True)
    return [shlex.split(line) for line in done.stderr.splitlines()]


def prune_args(base_image: str) -> list[str]:
    """The arguments build.sh's mmdebstrap gives images/prune.py for `base_image` ([] when the
    base is not pruned)."""
    plan = _dry_run()
    for made, imported in itertools.pairwise(plan):
        if imported[:2] == ["podman", "import"] and imported[-1] == base_image:
            hooks = [w.split("=", 1)[1] for w in made if w.startswith("--customize-hook=")]
            calls = [shlex.split(h) for h in hooks if "/tmp/prune.py" in h]
            return shlex.split(" ".join(calls[0][calls[0].index("/tmp/prune.py") + 1:])) \
                if calls else []
    raise AssertionError(f"build.sh --dry-run makes no base {base_image}")


def _option(args: list[str], option: str) -> list[str]:
    """The values after `option` up to the next --option."""
    if option not in args:
        return []
    rest = args[args.index(option) + 1:]
    return list(itertools.takewhile(lambda w: not w.startswith("--"), rest))


def _weston_image(rendering: str) -> str:
    return split_image(container("weston", rendering)["image"])[0].rsplit("/", 1)[1]


def test_the_default_compositor_runs_the_gl_renderer_on_the_image_that_keeps_mesa() -> None:
    # drm-backend's own default is GL too; the base states it, and westonctl's fallback to
    # pixman is for that value only.
    assert env(container("weston"))["WESTON_RENDERER"]["value"] == "gl"
    assert _weston_image("base") == "display-weston"
    args = prune_args(_image_base("display-weston"))
    assert not any("gl-renderer" in d for d in _option(args, "--drop"))
    assert {f"{LIB}/gbm/*.so", f"{LIB}/libEGL_mesa.so.0"} <= set(_option(args, "--keep"))


def test_the_pixman_renderer_overlay_runs_the_image_without_mesa() -> None:
    assert env(container("weston", "pixman-renderer"))["WESTON_RENDERER"]["value"] == "pixman"
    assert _weston_image("pixman-renderer") == "display-weston-pixman"
    args = prune_args(_image_base("display-weston-pixman"))
    assert f"{LIB}/libweston-14/gl-renderer.so" in _option(args, "--drop")
    assert not any("gbm" in k or "EGL" in k for k in _option(args, "--keep"))


def test_both_compositor_images_build_from_one_dockerfile_and_one_package_list() -> None:
    gl, plain = (build_plan()[f"ghcr.io/liken-sh/{r}"]
                 for r in ("display-weston", "display-weston-pixman"))
    assert plain.dockerfile == gl.dockerfile
    assert plain.build_args["BUILD_IMAGE"] == gl.build_args["BUILD_IMAGE"]
    assert _base("display-weston") == _base("display-weston-pixman")


def test_the_default_capture_image_holds_intels_va_drivers_and_amds_variant_adds_mesa() -> None:
    intel = {"intel-media-va-driver", "i965-va-driver"}
    assert intel <= _base("display-capture")
    assert "mesa-va-drivers" not in _base("display-capture")
    assert _base("display-capture-amd") == _base("display-capture") | {"mesa-va-drivers"}
    capture = split_image(container("capture", "capture-amd")["image"])[0]
    assert capture == "ghcr.io/liken-sh/display-capture-amd"


def test_no_capture_image_holds_debians_ffmpeg() -> None:
    # Debian's libavcodec links every codec library Debian builds; the images compile their own.
    for repository in ("display-capture", "display-capture-amd"):
        assert not any(p == "ffmpeg" or p.startswith("libav") for p in _base(repository))
    assert _base("display-capture", "BUILD_IMAGE") >= {"libx264-dev", "libva-dev", "nasm"}


def test_the_operator_image_keeps_weston_and_wayland_info_after_pruning() -> None:
    keep = _option(prune_args(_image_base("display-operator")), "--keep")
    assert {"/usr/bin/weston", "/usr/bin/wayland-info"} <= set(keep)


def _configured(kind: str) -> set[str]:
    """The components of `kind` (encoder, muxer...) capture/ffmpeg.sh enables."""
    text = (IMAGES / "capture" / "ffmpeg.sh").read_text()
    found = re.findall(rf"--enable-{kind}=([\w,]+)", text)
    return {name for names in found for name in names.split(",")}


def _filters(argv: list[str]) -> set[str]:
    chain = argv[argv.index("-vf") + 1] if "-vf" in argv else ""
    return {step.split("=", 1)[0] for step in chain.split(",") if step}


@pytest.mark.parametrize(
    "argv",
    [
        encode.clip_argv(FrameHeader(width=321, height=240, stride=1300, pixel_format="XRGB8888",
                                     y_flip=True, size=1300 * 240),
                         EncoderChoice("software", "test"), fps=30),
        encode.clip_argv(FrameHeader(width=320, height=240, stride=1280, pixel_format="XRGB8888",
                                     y_flip=True, size=1280 * 240),
                         EncoderChoice("vaapi", "test", Path("/dev/dri/renderD128")), fps=30),
        encode.probe_argv(Path("/dev/dri/renderD128")),
    ],
    ids=["software-clip", "vaapi-clip", "vaapi-probe"],
)
def test_the_images_ffmpeg_has_every_component_capture_asks_for(argv: list[str]) -> None:
    codec = argv[argv.index("-c:v") + 1]
    formats = {argv[i + 1] for i, word in enumerate(argv) if word == "-f"}
    assert codec in _configured("encoder")
    assert formats - {"lavfi"} <= _configured("muxer") | _configured("demuxer")
    assert ("lavfi" not in formats) or "lavfi" in _configured("indev")
    # format conversions insert the scale filter; lavfi's source is a filter too.
    sources = {s.split("=", 1)[0] for i, w in enumerate(argv) if w == "-i" and "=" in argv[i + 1]
               for s in [argv[i + 1]]}
    assert _filters(argv) | sources | {"scale"} <= _configured("filter")
    assert {"pipe"} <= _configured("protocol")


# The binary each pod image runs, as `kubectl exec` names it (smoke.py runs it so).
BINARY_OF_IMAGE = {repo.removeprefix("display-"): binary for repo, binary in smoke.BINARY_OF.items()
                   if (IMAGES / repo.removeprefix("display-")).is_dir()}


@pytest.mark.parametrize("image", list(BINARY_OF_IMAGE))
def test_pod_images_put_their_binary_on_path(image: str) -> None:
    """`kubectl exec POD -c operator -- draplugin checkpoint` needs the name on PATH: the
    image links its entry point into /usr/local/bin, then runs it by name at build time."""
    binary = BINARY_OF_IMAGE[image]
    runs = [json_list(rest) for key, rest in dockerfile(image) if key == "RUN"
            and rest.startswith("[")]
    entry = json_list(next(rest for key, rest in dockerfile(image) if key == "ENTRYPOINT"))
    assert ["/usr/bin/ln", "-s", entry[0], f"/usr/local/bin/{binary}"] in runs
    assert [binary, "--version"] in runs
    path = build_plan_path()
    assert "/usr/local/bin" in path.split(":")


def build_plan_path() -> str:
    """The PATH build.sh gives every base it imports."""
    script = (IMAGES / "build.sh").read_text()
    found = re.search(r"--change 'ENV PATH=([^']+)'", script)
    assert found is not None
    return found[1]
