"""The live view page (`/`) in headless Chromium (Debian's `chromium` package), driven over the
DevTools protocol the way a person uses it: type the token, press Show, look at the screens.

X1 (480x360) shows a red client and X2 (320x240) a blue one; alice may capture both, bob
neither, and the apiserver does not know nobody-token. Each test opens its own tab (so its own
sessionStorage) and judges the page by a screenshot decoded here. Set LIVE_VIEW_SCREENSHOT to a
path to keep a copy of the screenshot of both screens there.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import itertools
import os
import re
import shutil
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import aiohttp
import pytest

from capture import auth, testing
from capture.testing import Compositor, Server
from fakekube.server import FakeKube
from libdisplay import fsutil
from libdisplay.processes import Process, running
from tests.support.layout import SolidClient
from tests.support.layout_build import build_layout

Colour = tuple[int, int, int]

RED: Final = (255, 0, 0)
BLUE: Final = (0, 0, 255)
GREEN: Final = (0, 255, 0)
X1: Final = (480, 360)
X2: Final = (320, 240)
DEVICES: Final = "X1=card0-hdmi-a-1,X2=card0-dp-1"
CAPTIONS: Final = ["X1 (node-a.card0-hdmi-a-1)", "X2 (node-a.card0-dp-1)"]
CHROMIUM: Final = "chromium"
# Generous: CI is a noisy 2-core machine and Chromium is heavy.
READY_TIMEOUT_S: Final = 90.0
CALL_TIMEOUT_S: Final = 60.0
PAGE_WAIT_S: Final = 60.0
POLL_S: Final = 0.1
# Colour management may move a channel by a step or two; page chrome is nowhere near.
TOLERANCE: Final = 8
# Of an image's pixels, the share that must show its colour in the screenshot (its border and
# rounding of its box aside).
MIN_SHARE: Final = 0.95
_DEVTOOLS_RE: Final = re.compile(rb"DevTools listening on (ws://\S+)")
_SCREENSHOT_ENV: Final = "LIVE_VIEW_SCREENSHOT"


class CdpError(Exception):
    """Chromium answered a DevTools command with an error, or a script on the page threw."""


# ---------- fixtures ----------


@pytest.fixture(scope="module")
def comp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Compositor]:
    layout_so = build_layout(tmp_path_factory.mktemp("layout"))
    with testing.showing(layout_so, [(X1, RED), (X2, BLUE)]) as compositor:
        yield compositor


@pytest.fixture(scope="module")
def kube() -> Iterator[FakeKube]:
    with FakeKube() as fake:
        fake.policy.add_token("alice-token", "alice", audiences=(auth.AUDIENCE,))
        fake.policy.add_token("bob-token", "bob", audiences=(auth.AUDIENCE,))
        fake.allow(
            "get", "displays", user="alice", api_group="display.liken.sh", subresource="capture"
        )
        yield fake


@pytest.fixture(scope="module")
def srv(comp: Compositor, kube: FakeKube) -> Iterator[Server]:
    with testing.server(comp, kube_url=kube.url, devices=DEVICES) as server:
        yield server


def _devtools_url(process: Process) -> str | None:
    match = _DEVTOOLS_RE.search(process.log_text().encode())
    return match.group(1).decode() if match else None


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Headless Chromium's browser-wide DevTools websocket URL; stopped and reaped by pid."""
    if shutil.which(CHROMIUM) is None:
        pytest.fail(
            f"{CHROMIUM} is not on PATH: install Debian's chromium package "
            "(build-support/install-debs)"
        )
    home = tmp_path_factory.mktemp("chromium")
    argv = [
        CHROMIUM,
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        # The capture server's certificate is self-signed.
        "--ignore-certificate-errors",
        f"--user-data-dir={home / 'profile'}",
        "--remote-debugging-port=0",
        "--window-size=1280,800",
        # A tab opened over DevTools may count as hidden; its timers must not be throttled.
        "--disable-background-timer-throttling",
        "--disable-renderer-backgrounding",
        "about:blank",
    ]
    with running(
        argv,
        log_path=home / "chromium.log",
        # HOME is unset under Pants; Chromium keeps caches and its NSS database there.
        env={"PATH": os.environ.get("PATH", os.defpath), "HOME": os.fspath(home)},
        ready=lambda process: _devtools_url(process) is not None,
        ready_timeout=READY_TIMEOUT_S,
        what="chromium logs its DevTools websocket URL",
    ) as process:
        url = _devtools_url(process)
        assert url is not None
        yield url


# ---------- the DevTools protocol ----------


class Cdp:
    """Commands over one browser-wide DevTools websocket; events are read past and dropped."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self._ws = ws
        self._ids = itertools.count(1)

    async def call(
        self, method: str, params: Mapping[str, object] | None = None, *, session: str = ""
    ) -> dict[str, Any]:
        command_id = next(self._ids)
        message: dict[str, object] = {
            "id": command_id,
            "method": method,
            "params": dict(params or {}),
        }
        if session:
            message["sessionId"] = session
        async with asyncio.timeout(CALL_TIMEOUT_S):
            await self._ws.send_json(message)
            while True:
                reply = await self._ws.receive_json()
                if reply.get("id") == command_id:
                    break
        if "error" in reply:
            raise CdpError(f"{method}: {reply['error']}")
        result: dict[str, Any] = reply["result"]
        return result


@dataclass(frozen=True, slots=True)
class Box:
    """An element's box in CSS pixels (the device scale factor is 1)."""

    x: float
    y: float
    width: float
    height: float


@dataclass(frozen=True, slots=True)
class Tab:
    cdp: Cdp
    session: str

    async def evaluate(self, expression: str) -> Any:
        """The JSON value of `expression` on the page (promises are awaited)."""
        answer = await self.cdp.call(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
            session=self.session,
        )
        if "exceptionDetails" in answer:
            raise CdpError(f"{expression!r} threw: {answer['exceptionDetails']}")
        return answer["result"].get("value")

    async def wait_for(self, expression: str, *, what: str) -> Any:
        """The first truthy value of `expression`, polled; AssertionError after PAGE_WAIT_S."""
        deadline = time.monotonic() + PAGE_WAIT_S
        while not (value := await self.evaluate(expression)):
            assert time.monotonic() < deadline, f"the page never {what}"
            await asyncio.sleep(POLL_S)
        return value

    async def open(self, url: str) -> None:
        answer = await self.cdp.call("Page.navigate", {"url": url}, session=self.session)
        assert "errorText" not in answer, answer
        await self.wait_for('document.readyState === "complete"', what=f"loaded {url}")

    async def box(self, selector: str) -> Box:
        rect = await self.evaluate(
            f"(() => {{ const r = document.querySelector({selector!r}).getBoundingClientRect();"
            " return [r.x, r.y, r.width, r.height]; })()"
        )
        return Box(*rect)

    async def type_into(self, selector: str, text: str) -> None:
        await self.evaluate(f"document.querySelector({selector!r}).focus()")
        await self.cdp.call("Input.insertText", {"text": text}, session=self.session)

    async def click(self, selector: str) -> None:
        box = await self.box(selector)
        where = {
            "x": box.x + box.width / 2,
            "y": box.y + box.height / 2,
            "button": "left",
            "clickCount": 1,
        }
        for kind in ("mousePressed", "mouseReleased"):
            await self.cdp.call(
                "Input.dispatchMouseEvent", {"type": kind, **where}, session=self.session
            )

    async def screenshot(self, clip: Box | None = None) -> bytes:
        params: dict[str, object] = {"format": "png", "optimizeForSpeed": True}
        if clip is not None:
            params["clip"] = {
                "x": clip.x,
                "y": clip.y,
                "width": clip.width,
                "height": clip.height,
                "scale": 1,
            }
        answer = await self.cdp.call("Page.captureScreenshot", params, session=self.session)
        return base64.b64decode(answer["data"])


@contextlib.asynccontextmanager
async def tab(devtools_url: str) -> AsyncIterator[Tab]:
    """A new tab (fresh sessionStorage), closed at the end."""
    async with aiohttp.ClientSession() as http, http.ws_connect(devtools_url, max_msg_size=0) as ws:
        cdp = Cdp(ws)
        target = (await cdp.call("Target.createTarget", {"url": "about:blank"}))["targetId"]
        try:
            attached = await cdp.call(
                "Target.attachToTarget", {"targetId": target, "flatten": True}
            )
            yield Tab(cdp, attached["sessionId"])
        finally:
            await cdp.call("Target.closeTarget", {"targetId": target})


# ---------- the page ----------

# Per figure: its caption, whether its <img> holds a decoded frame, and the frame's size.
_FIGURES: Final = """Array.from(document.querySelectorAll("#screens figure"), (figure) => {
  const img = figure.querySelector("img");
  return {caption: figure.querySelector("figcaption").textContent,
          loaded: img.complete && img.naturalWidth > 0,
          size: [img.naturalWidth, img.naturalHeight]};
})"""
_STATUS: Final = 'document.getElementById("status").textContent'


async def show_with_token(page: Tab, srv: Server, token: str) -> None:
    """Open the page, type `token` into its field and press Show."""
    await page.open(f"https://127.0.0.1:{srv.port}/")
    await page.type_into("#token", token)
    await page.click("#go")


async def wait_for_frames(page: Tab, count: int) -> list[dict[str, Any]]:
    """The figures once there are `count` of them and each <img> shows a frame."""
    await page.wait_for(
        f"(() => {{ const f = {_FIGURES}; return f.length === {count} && f.every((x) => x.loaded);"
        " })()",
        what=f"showed a frame in each of {count} screens",
    )
    figures: list[dict[str, Any]] = await page.evaluate(_FIGURES)
    return figures


# ---------- the screenshot ----------


def colour_counts(png: bytes) -> collections.Counter[Colour]:
    rgb = testing.png_rgb_pixels(png)
    return collections.Counter(zip(rgb[0::3], rgb[1::3], rgb[2::3], strict=True))


def pixels_of(counts: collections.Counter[Colour], colour: Colour) -> int:
    """How many pixels are `colour`, give or take TOLERANCE per channel."""
    return sum(
        count
        for seen, count in counts.items()
        if all(abs(a - b) <= TOLERANCE for a, b in zip(seen, colour, strict=True))
    )


def area(size: tuple[int, int]) -> int:
    return size[0] * size[1]


# ---------- tests ----------


async def _every_screen(browser: str, srv: Server) -> tuple[list[dict[str, Any]], str, bytes]:
    async with tab(browser) as page:
        await show_with_token(page, srv, "alice-token")
        figures = await wait_for_frames(page, 2)
        return figures, await page.evaluate(_STATUS), await page.screenshot()


def test_page_shows_every_screen_after_the_token_is_given(
    browser: str, srv: Server, tmp_path: Path
) -> None:
    figures, status, png = asyncio.run(_every_screen(browser, srv))
    fsutil.atomic_write(tmp_path / "live-view.png", png)
    if copy := os.environ.get(_SCREENSHOT_ENV):
        fsutil.atomic_write(Path(copy), png)
    assert [figure["caption"] for figure in figures] == CAPTIONS
    assert [tuple(figure["size"]) for figure in figures] == [X1, X2]
    assert status == ""
    counts = colour_counts(png)
    assert pixels_of(counts, RED) >= MIN_SHARE * area(X1), counts.most_common(5)
    assert pixels_of(counts, BLUE) >= MIN_SHARE * area(X2), counts.most_common(5)


async def _follows(browser: str, srv: Server, comp: Compositor) -> tuple[str, bytes]:
    async with tab(browser) as page:
        await show_with_token(page, srv, "alice-token")
        await wait_for_frames(page, 2)
        x2 = await page.box("#out-X2")
        # A second client of X2's claim is shown over the first: X2 turns green.
        with SolidClient(testing.claim_socket(comp, "X2"), colour=GREEN) as green:
            assert green.shown.wait(testing.WAIT_S), "the green client was never shown"
            testing.wait_colour(comp, "X2", GREEN)
            deadline = time.monotonic() + PAGE_WAIT_S
            while pixels_of(colour_counts(await page.screenshot(x2)), GREEN) < area(X2) / 2:
                assert time.monotonic() < deadline, "the page never showed X2 turn green"
                await asyncio.sleep(POLL_S)
            png = await page.screenshot()
            status = await page.evaluate(_STATUS)
        testing.wait_colour(comp, "X2", BLUE)
        return status, png


def test_page_refreshes_to_show_what_the_screens_show_now(
    browser: str, srv: Server, comp: Compositor, tmp_path: Path
) -> None:
    status, png = asyncio.run(_follows(browser, srv, comp))
    fsutil.atomic_write(tmp_path / "live-view-green.png", png)
    assert status == ""
    counts = colour_counts(png)
    assert pixels_of(counts, GREEN) >= MIN_SHARE * area(X2), counts.most_common(5)
    assert pixels_of(counts, BLUE) == 0
    assert pixels_of(counts, RED) >= MIN_SHARE * area(X1), counts.most_common(5)


async def _refused(browser: str, srv: Server, token: str) -> tuple[str, int, bytes]:
    async with tab(browser) as page:
        await show_with_token(page, srv, token)
        status: str = await page.wait_for(_STATUS, what="showed a status")
        figures = len(await page.evaluate(_FIGURES))
        return status, figures, await page.screenshot()


@pytest.mark.parametrize(
    ("token", "expected"),
    [
        ("nobody-token", "/api/v1/outputs: 401"),
        ("bob-token", "this token may see no screen of node node-a"),
    ],
    ids=["token-review-denies", "access-review-denies-every-screen"],
)
def test_refused_token_shows_why_and_no_screen(
    browser: str, srv: Server, tmp_path: Path, token: str, expected: str
) -> None:
    status, figures, png = asyncio.run(_refused(browser, srv, token))
    fsutil.atomic_write(tmp_path / "refused.png", png)
    assert expected in status
    assert figures == 0
    counts = colour_counts(png)
    assert pixels_of(counts, RED) == 0 and pixels_of(counts, BLUE) == 0
