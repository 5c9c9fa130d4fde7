"""The HTTPS server: outputs, stills, clips and the live view, behind RBAC; health and metrics open.

Every capture endpoint authenticates the bearer token (TokenReview; an address may start only a
few reviews a second for tokens not already known good, 429 past that), finds the output among
the `[output]` sections of weston.ini, authorizes `get displays/capture` on its Display
(SubjectAccessReview) and answers 404 alike for an output that does not exist (path tricks
included) and one the caller may not capture, so outputs cannot be enumerated. A caller who
may capture no output of this node gets 403 for every path, real or not, naming no Display:
it learns only what RBAC already told it. It checks the request, and only then
takes one of the encode slots: past `max_encodes` the answer is 429 with Retry-After, so the
ffmpeg processes this container runs stay inside its memory limit. Frames are asked for within
1080p (`encode.MAX_SIDE`): the layout module shrinks a larger output by an integer factor (4K
comes as 1920x1080, 2560x1440 as 1280x720), so every frame is at most 8 MiB, a still is a PNG
made in this process and a clip's ffmpeg never scales. A clip's ffmpeg is killed when the clip
runs past its time or size bound or the client goes away.

Open answers say nothing an attacker could use: `/healthz` only whether frames can be had,
503s only that the API server cannot review now (the details go to the log), metric labels only
short causes. Connections are bounded before aiohttp sees them (`capture.connections`).

Routes: `/healthz`, `/metrics`, `/` (live view page), `/api/v1/outputs`,
`/api/v1/outputs/{output}/still.png`, `/api/v1/outputs/{output}/clip.mp4?seconds=S`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import socket
import threading
import time
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Iterable,
    Iterator,
)
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Final

from aiohttp import web

from capture import encode, page
from capture.auth import (
    AuthError,
    ForbiddenError,
    HttpReviews,
    ReviewApi,
    Reviewer,
    User,
    bearer_token,
)
from capture.connections import ConnectionLimits, Connections, Listener
from capture.encode import EncoderChoice
from capture.limits import SourceRate
from capture.metrics import Metrics
from capture.png import encode_png
from capture.settings import MIN_CLIP_S, Settings
from capture.tls import Certificates
from libdisplay.compositor.layout import Frame, LayoutCapture, LayoutError, LayoutReplyError
from libdisplay.compositor.weston import WestonIni, WestonIniError
from libdisplay.display import display_name
from libdisplay.hardware.drm import BadConnectorNameError, device_name

log = logging.getLogger(__name__)

ENCODER_HEADER: Final = "X-Display-Encoder"
REASON_HEADER: Final = "X-Display-Encoder-Reason"
FRAME_TIMEOUT_S: Final = 10.0
_CHUNK: Final = 65536
# A clip is paced at real time; past this many times its length plus slack, it is stuck.
_CLIP_SLACK_S: Final = 20.0
_HEALTH_TIMEOUT_S: Final = 1.0
NOT_FOUND: Final = "no such output, or not one you may capture"
NO_OUTPUT_ALLOWED: Final = "you may capture no output of this node"
UNAVAILABLE: Final = "the API server cannot review requests now; retry later"
# What an unknown output is authorized against, so it costs what a real one does.
_NO_OUTPUT_DEVICE: Final = "no-such-output"


class BusyError(Exception):
    """Every encode slot is taken; `retry_after_s` is when the first should be free."""

    def __init__(self, retry_after_s: int) -> None:
        super().__init__(f"all encode slots busy, retry in {retry_after_s} s")
        self.retry_after_s = retry_after_s


class Slots:
    """A non-blocking bound on concurrent encodes that knows when each should end."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._ends: dict[int, float] = {}
        self._next = 0

    @contextlib.contextmanager
    def take(self, expected_s: float) -> Iterator[int]:
        if len(self._ends) >= self.size:
            soonest = min(self._ends.values()) - time.monotonic()
            raise BusyError(max(1, math.ceil(soonest)))
        key = self._next
        self._next += 1
        self._ends[key] = time.monotonic() + expected_s
        try:
            yield key
        finally:
            del self._ends[key]


@dataclass(frozen=True, slots=True)
class Output:
    name: str
    display: str


def read_outputs(settings: Settings) -> dict[str, Output]:
    """The outputs weston.ini names, each with its Display; unreadable ini means none."""
    try:
        ini = WestonIni.parse(settings.weston_ini.read_text())
    except (OSError, WestonIniError) as exc:
        log.debug("no outputs from %s: %s", settings.weston_ini, exc)
        return {}
    outputs = {}
    for config in ini.outputs:
        device = settings.devices.get(config.name)
        if device is None:
            try:
                device = device_name(f"{settings.card}-{config.name}")
            except BadConnectorNameError:
                log.debug("output %s has no connector name and no CAPTURE_DEVICES entry",
                          config.name)
                continue
        outputs[config.name] = Output(config.name, display_name(settings.node_name, device))
    return outputs


def parse_seconds(text: str | None, settings: Settings) -> float:
    """The clip length asked for, in [MIN_CLIP_S, clip_max_s]; 400 naming the range otherwise."""
    if text is None:
        return settings.clip_default_s
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not MIN_CLIP_S <= seconds <= settings.clip_max_s:
        raise RefusalError(web.json_response({
            "error": f"seconds must be a number from {MIN_CLIP_S:g} to "
                     f"{settings.clip_max_s:g}, got {text!r}",
            "min": MIN_CLIP_S, "max": settings.clip_max_s,
        }, status=400))
    return seconds


def grab(socket_path: Path, output: str, *, i420: bool = False) -> Frame:
    """One frame of `output`, within 1080p, packed or (a clip's) I420, on a fresh connection
    (blocking: run it in a thread)."""
    with LayoutCapture(socket_path, timeout=FRAME_TIMEOUT_S) as capture:
        return capture.frame(output, encode.MAX_SIDE, i420=i420)


class RefusalError(Exception):
    """A request answered early with `response` (401, 403, 404, 400, 429, 503)."""

    def __init__(self, response: web.Response) -> None:
        super().__init__(response.status)
        self.response = response


def _error(status: int, message: str, **headers: str) -> web.Response:
    return web.json_response({"error": message}, status=status, headers=headers)


def _auth_headers(exc: AuthError) -> dict[str, str]:
    """401 says how to authenticate; 503 says when to try again."""
    if exc.status == 401:
        return {"WWW-Authenticate": 'Bearer realm="display-capture"'}
    if exc.status == 503:
        return {"Retry-After": "5"}
    return {}


class State:
    """What the handlers share: settings, reviews, the encoder choice, slots and metrics."""

    def __init__(self, settings: Settings, reviews: ReviewApi, metrics: Metrics) -> None:
        self.settings = settings
        self.reviewer = Reviewer(reviews, ttl_s=settings.auth_cache_s,
                                 audience=settings.token_audience)
        self.unauthenticated = SourceRate(burst=settings.unauthenticated_burst,
                                          per_s=settings.unauthenticated_per_s)
        self.metrics = metrics
        self.slots = Slots(settings.max_encodes)
        self.connections = Connections(ConnectionLimits(
            max_connections=settings.max_connections,
            per_source=settings.max_connections_per_source,
            handshake_timeout_s=settings.handshake_timeout_s,
        ), metrics)
        self.choice: asyncio.Future[EncoderChoice] = asyncio.get_running_loop().create_future()
        self.frames_failure: str | None = None
        self.background: asyncio.TaskGroup | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        metrics.max_encodes.set(settings.max_encodes)

    def start_background(self, what: str, work: Coroutine[object, object, None]) -> None:
        """Run `work` in the server's task group: should it fail, the server stops (and its
        container restarts) rather than leave requests waiting on what it would have done."""
        assert self.background is not None, "start_background outside serving()"
        task = self.background.create_task(_failure_stops_the_server(what, work))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def stop_background(self) -> None:
        """Cancel the background tasks, so their group can end."""
        for task in self._tasks:
            task.cancel()

    def set_choice(self, choice: EncoderChoice) -> None:
        if self.choice.done():
            self.choice = asyncio.get_running_loop().create_future()
        self.choice.set_result(choice)
        self.metrics.set_encoder(choice.encoder, choice.cause)
        if choice.encoder == "software":
            self.metrics.fallbacks.inc()
            log.warning("clips are encoded in software (libx264): %s", choice.reason)
        else:
            log.info("clips are encoded with VA-API: %s", choice.reason)

    async def reprobe(self, failure: str) -> None:
        """A VA-API encode failed: probe again, and fall back when the probe fails too."""
        log.warning("VA-API encode failed, probing again: %s", failure)
        render_node = self.settings.render_node or encode.find_render_node(None)
        choice = await encode.probe(render_node)
        if choice.encoder == "software":
            choice = EncoderChoice("software", f"{choice.reason} (after: {failure})",
                                   cause="encode-failed")
        self.set_choice(choice)

    async def user(self, request: web.Request) -> User:
        """The caller, from its bearer token; a token not known good spends from its
        address's review rate (429 when none is left)."""
        token = bearer_token(request.headers.get("Authorization"))
        if not self.reviewer.knows(token):
            retry_after = self.unauthenticated.take(request.remote or "")
            if retry_after is not None:
                self.metrics.unauthenticated_limited.inc()
                raise RefusalError(_error(
                    429, "too many token reviews from this address",
                    **{"Retry-After": str(retry_after)},
                ))
        return await self.reviewer.authenticate(token)

    async def authorized(self, request: web.Request) -> Output:
        """The requested output, once the caller is known and may see it; 404 alike for
        an output that does not exist and one the caller may not see."""
        try:
            user = await self.user(request)
            known = read_outputs(self.settings)
            output = known.get(request.match_info.get("output", ""))
            display = output.display if output else display_name(
                self.settings.node_name, _NO_OUTPUT_DEVICE)
            try:
                await self.reviewer.authorize(user, display)
            except ForbiddenError:
                self.metrics.reviews.labels(result="forbidden").inc()
                if not await self._may_capture_any(user, known.values()):
                    raise RefusalError(_error(403, NO_OUTPUT_ALLOWED)) from None
                output = None
            if output is None:
                raise RefusalError(_error(404, NOT_FOUND))
        except AuthError as exc:
            raise self.refusal(exc) from exc
        self.metrics.reviews.labels(result="ok").inc()
        return output

    async def _may_capture_any(self, user: User, outputs: Iterable[Output]) -> bool:
        for output in outputs:
            try:
                await self.reviewer.authorize(user, output.display)
            except ForbiddenError:
                continue
            return True
        return False

    def refusal(self, exc: AuthError) -> RefusalError:
        """The answer to a failed review: a 503's cause goes to the log, not the caller."""
        result = {401: "unauthenticated", 403: "forbidden"}.get(exc.status, "unavailable")
        self.metrics.reviews.labels(result=result).inc()
        message = str(exc)
        if exc.status >= 500:
            log.warning("review failed: %s", exc)
            message = UNAVAILABLE
        return RefusalError(_error(exc.status, message, **_auth_headers(exc)))


STATE: Final = web.AppKey("state", State)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def _answer(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Refusals become their response; every answer is counted by route and code."""
    state = request.app[STATE]
    route = request.match_info.route.name or "other"
    try:
        with state.connections.in_request(request.transport):
            response = await handler(request)
    except RefusalError as refusal:
        response = refusal.response
    except web.HTTPException as exc:
        state.metrics.requests.labels(endpoint=route, code=str(exc.status)).inc()
        raise
    state.metrics.requests.labels(endpoint=route, code=str(response.status)).inc()
    return response


def _layout_refusal(exc: LayoutError) -> RefusalError:
    if isinstance(exc, LayoutReplyError) and exc.code in ("no-output", "output-gone"):
        return RefusalError(_error(404, f"output not shown now: {exc.text}"))
    message = f"no frames from the compositor: {exc}"
    return RefusalError(_error(503, message, **{"Retry-After": "5"}))


async def _frame(state: State, output: Output, *, i420: bool = False) -> Frame:
    try:
        frame = await asyncio.to_thread(grab, state.settings.capture_socket, output.name,
                                        i420=i420)
    except LayoutError as exc:
        raise _layout_refusal(exc) from exc
    state.metrics.frames.inc()
    return frame


@contextlib.contextmanager
def _slot(state: State, expected_s: float) -> Iterator[None]:
    """Holds an encode slot for the block, or raises the 429 refusal. One slot whatever the
    output's size: its frames come within 1080p, so a 4K encode costs what a 1080p one does."""
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(state.slots.take(expected_s))
        except BusyError as exc:
            state.metrics.rejected.inc()
            headers = {"Retry-After": str(exc.retry_after_s)}
            raise RefusalError(_error(429, str(exc), **headers)) from exc
        state.metrics.in_flight.inc()
        try:
            yield
        finally:
            state.metrics.in_flight.dec()


async def healthz(request: web.Request) -> web.Response:
    """Always 200 while serving (a restart of this container brings no frames back); the body
    says only whether frames can be had now. Why not goes to the log, once per change."""
    state = request.app[STATE]
    failure = None
    try:
        await asyncio.to_thread(_greets, state.settings.capture_socket)
    except LayoutError as exc:
        failure = str(exc)
    if failure != state.frames_failure:
        if failure is None:
            log.info("frames can be had again")
        else:
            log.warning("no frames: %s", failure)
        state.frames_failure = failure
    return web.json_response({"frames": failure is None})


def _greets(socket_path: Path) -> None:
    LayoutCapture(socket_path, timeout=_HEALTH_TIMEOUT_S).close()


async def metrics(request: web.Request) -> web.Response:
    body = request.app[STATE].metrics.render()
    return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4"})


async def outputs(request: web.Request) -> web.Response:
    """The outputs the caller may capture (each checked with its own review)."""
    state = request.app[STATE]
    try:
        user = await state.user(request)
        visible = []
        for output in read_outputs(state.settings).values():
            try:
                await state.reviewer.authorize(user, output.display)
            except AuthError as exc:
                if exc.status != 403:
                    raise
                continue
            visible.append({"name": output.name, "display": output.display})
    except AuthError as exc:
        raise state.refusal(exc) from exc
    return web.json_response({"node": state.settings.node_name, "outputs": visible})


async def still(request: web.Request) -> web.Response:
    """A PNG of the output, made in this process (no ffmpeg: its start alone costs more)."""
    state = request.app[STATE]
    output = await state.authorized(request)
    with _slot(state, expected_s=1.0):
        started = time.monotonic()
        frame = await _frame(state, output)
        png = await asyncio.to_thread(encode_png, frame.header, frame.pixels)
    state.metrics.encodes.labels(kind="still", encoder="software", result="ok").inc()
    state.metrics.encode_seconds.labels(kind="still", encoder="software").observe(
        time.monotonic() - started
    )
    state.metrics.bytes_sent.labels(kind="still").inc(len(png))
    return web.Response(body=png, content_type="image/png", headers={
        ENCODER_HEADER: "software", REASON_HEADER: "PNG is encoded on the CPU",
        "Cache-Control": "no-store",
    })


async def clip(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    output = await state.authorized(request)
    seconds = parse_seconds(request.query.get("seconds"), state.settings)
    choice = await state.choice
    with _slot(state, expected_s=seconds):
        first = await _frame(state, output, i420=True)
        return await _ClipRun(state, request, output, choice, first, seconds).run()


class _ClipRun:
    """One clip: frames paced at real time into ffmpeg, its MP4 streamed to the client."""

    def __init__(self, state: State, request: web.Request, output: Output,
                 choice: EncoderChoice, first: Frame, seconds: float) -> None:
        self.state = state
        self.request = request
        self.output = output
        self.choice = choice
        self.first = first
        self.fps = state.settings.clip_fps
        self.frames = max(1, round(seconds * self.fps))
        self.deadline_s = seconds * 3 + _CLIP_SLACK_S
        self.sent = 0

    async def run(self) -> web.StreamResponse:
        started = time.monotonic()
        proc, stdin_fd = await encode.start_fed(
            encode.clip_argv(self.first.header, self.choice, fps=self.fps)
        )
        log.info("clip of %s: %d frames at %d fps, encoder %s (%s)", self.output.name,
                 self.frames, self.fps, self.choice.encoder, self.choice.reason)
        response = web.StreamResponse(headers={
            "Content-Type": "video/mp4", "Cache-Control": "no-store",
            ENCODER_HEADER: self.choice.encoder, REASON_HEADER: self.choice.reason,
        })
        result = "error"
        stderr_task = asyncio.create_task(encode.read_stderr(proc))
        stop = threading.Event()
        feeder = asyncio.create_task(asyncio.to_thread(self._feed, stdin_fd, stop))
        try:
            await response.prepare(self.request)
            result = await asyncio.wait_for(self._stream(proc, response), self.deadline_s)
        except TimeoutError:
            result = "killed"
            log.warning("clip of %s ran past %.0f s: ffmpeg killed", self.output.name,
                        self.deadline_s)
        except (ConnectionResetError, asyncio.CancelledError):
            result = "disconnected"
            log.info("client of the %s clip went away: ffmpeg stopped", self.output.name)
            raise
        finally:
            # The feeder thread cannot be cancelled: it stops at the event, or at EPIPE once
            # ffmpeg is gone, within one frame's grab.
            stop.set()
            await encode.kill(proc)
            stderr = await stderr_task
            await asyncio.shield(feeder)
            if result == "ok" and proc.returncode != 0:
                result = "error"
            self._account(result, time.monotonic() - started)
            if result == "error":
                failure = f"ffmpeg rc={proc.returncode}: {encode.last_line(stderr)}"
                log.error("clip of %s failed: %s", self.output.name, failure)
                if self.choice.encoder == "vaapi":
                    self.state.start_background("probing VA-API again",
                                                self.state.reprobe(failure))
        if result == "ok":
            await response.write_eof()
        return response

    def _account(self, result: str, elapsed: float) -> None:
        metrics = self.state.metrics
        metrics.encodes.labels(kind="clip", encoder=self.choice.encoder, result=result).inc()
        metrics.encode_seconds.labels(kind="clip", encoder=self.choice.encoder).observe(elapsed)
        metrics.bytes_sent.labels(kind="clip").inc(self.sent)

    async def _stream(self, proc: asyncio.subprocess.Process, response: web.StreamResponse) -> str:
        assert proc.stdout is not None
        limit = self.state.settings.clip_max_bytes
        while chunk := await proc.stdout.read(_CHUNK):
            self.sent += len(chunk)
            if self.sent > limit:
                log.warning("clip of %s passed %d bytes: ffmpeg killed", self.output.name, limit)
                return "killed"
            await response.write(chunk)
        await proc.wait()
        return "ok"

    def _feed(self, fd: int, stop: threading.Event) -> None:
        """Write `frames` frames to ffmpeg's stdin `fd` (closed at the end), one per 1/fps of
        wall time, on one capture connection with the next frame always requested ahead. A
        late frame is sent late, never skipped, so the clip has exactly its frame count; a
        size change or a capture failure ends the clip early. Runs in a thread."""
        frame = self.first
        try:
            with LayoutCapture(self.state.settings.capture_socket,
                               timeout=FRAME_TIMEOUT_S) as capture:
                if self.frames > 1:
                    capture.request(self.output.name, encode.MAX_SIDE, i420=True)
                start = time.monotonic()
                for index in range(self.frames):
                    if index:
                        if stop.wait(max(0.0, start + index / self.fps - time.monotonic())):
                            return
                        frame = capture.receive()
                        self.state.metrics.frames.inc()
                        if index + 1 < self.frames:
                            capture.request(self.output.name, encode.MAX_SIDE, i420=True)
                        if frame.header != self.first.header:
                            log.info("%s changed size mid-clip: clip ends at frame %d",
                                     self.output.name, index)
                            return
                    encode.write_all(fd, frame.pixels)
        except (LayoutError, OSError) as exc:
            log.info("clip of %s stops feeding: %s", self.output.name, exc)
        finally:
            os.close(fd)


_PAGE: Final = "live.html"
_BACKLOG: Final = 128
CERTS: Final = web.AppKey("certs", Certificates)


async def live(request: web.Request) -> web.Response:
    """The live view: a page with no screen content; its script fetches stills with the token.
    Its policy lets only its own inline script and style run, and no site frame it."""
    text = resources.files("capture").joinpath(_PAGE).read_text()
    return web.Response(text=text, content_type="text/html",
                        headers={"Cache-Control": "no-store", **page.security_headers(text)})


async def _nosniff(_request: web.Request, response: web.StreamResponse) -> None:
    response.headers["X-Content-Type-Options"] = "nosniff"


def make_app(state: State, certs: Certificates) -> web.Application:
    app = web.Application(middlewares=[_answer])
    app.on_response_prepare.append(_nosniff)
    app[STATE] = state
    app[CERTS] = certs
    app.router.add_get("/healthz", healthz, name="healthz")
    app.router.add_get("/metrics", metrics, name="metrics")
    app.router.add_get("/", live, name="live")
    app.router.add_get("/api/v1/outputs", outputs, name="outputs")
    app.router.add_get("/api/v1/outputs/{output}/still.png", still, name="still")
    app.router.add_get("/api/v1/outputs/{output}/clip.mp4", clip, name="clip")
    return app


async def _watch_certificates(certs: Certificates, metrics: Metrics, every_s: float) -> None:
    while True:
        try:
            certs.refresh()
        except Exception:
            # A dead watcher would stop rotation silently: log and look again next period.
            log.exception("checking the mounted certificate failed; trying again in %g s",
                          every_s)
        metrics.tls_mounted.set(1 if certs.source == "mounted" else 0)
        await asyncio.sleep(every_s)


async def _probe(state: State) -> None:
    render_node = encode.find_render_node(state.settings.render_node)
    state.set_choice(await encode.probe(render_node))


async def _failure_stops_the_server(what: str, work: Coroutine[object, object, None]) -> None:
    try:
        await work
    except Exception:
        log.critical("%s failed: the server stops", what, exc_info=True)
        raise


@contextlib.asynccontextmanager
async def serving(settings: Settings) -> AsyncIterator[tuple[str, int]]:
    """Serve until the block ends; yields the bound (host, port). The server's background
    tasks share one task group: when one fails the block is cancelled and this raises the
    failure (an ExceptionGroup), so nothing waits forever on a task that died."""
    certs = Certificates(settings.tls_dir)
    reviews = HttpReviews(settings.kube_url, kubeconfig=settings.kubeconfig)
    state = State(settings, reviews, Metrics())
    # The keep-alive timeout runs from the connection's start and from each response, and
    # bytes of an unfinished request do not reset it: a first or next request must be whole
    # within it.
    runner = web.AppRunner(make_app(state, certs), handle_signals=False, access_log=None,
                           keepalive_timeout=settings.idle_timeout_s)
    try:
        await runner.setup()
        sock = _listening_socket(settings.host, settings.port)
        host, port = sock.getsockname()[:2]
        assert runner.server is not None  # made by setup()
        listener = Listener(sock, runner.server, certs.listener, state.connections)
        async with asyncio.TaskGroup() as group:
            state.background = group
            state.start_background("accepting connections", listener.serve())
            log.info("listening on https://%s:%d", host, port)
            state.start_background("watching the mounted certificate", _watch_certificates(
                certs, state.metrics, settings.tls_poll_s
            ))
            state.start_background("choosing the clip encoder", _probe(state))
            try:
                yield host, port
            finally:
                state.stop_background()
    finally:
        state.background = None
        await runner.cleanup()
        await reviews.close()
        certs.close()


def _listening_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(_BACKLOG)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


_M_MMAP_THRESHOLD: Final = -3
_MMAP_THRESHOLD_BYTES: Final = 1024 * 1024


def return_frames_to_the_kernel() -> None:
    """Pin glibc's mmap threshold at 1 MiB: frames (up to 8 MiB, 1080p) are then
    mmapped and unmapped when freed. Left dynamic, glibc raises the threshold after the first
    free and later frames stay in per-thread heaps: the server's RSS grew from 40 to 140 MiB
    over two clips, eating the margin the encode bound relies on."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    if name is None:
        log.warning("no libc found: frame memory may stay in the heap")
        return
    if not ctypes.CDLL(name).mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_BYTES):
        log.warning("mallopt(M_MMAP_THRESHOLD) refused: frame memory may stay in the heap")


async def serve_forever(settings: Settings) -> None:
    """Serve until SIGTERM or SIGINT."""
    import signal

    return_frames_to_the_kernel()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with serving(settings):
        await stop.wait()
    log.info("stopped")
