"""What some heads scan out over time, sampled on the host while the guest changes another head.

`ScanoutSampler` dumps the given heads in turn through QMP (`Vm.screendump`) as fast as QEMU
answers, and keeps for each dump the host's monotonic time, the head, its size and the share
of a sample of its pixels that is the colour the head's tenant draws. A head is "lit" in a
sample when that share is at least `LIT_COVERAGE`; `dark_spans` turns the samples into the
spans a head was not. The guest starts and stops it through the share's requests
(`handlers`: ops `sample_start` and `sample_stop`), so its own steps (a plug, a claim) and
the samples are on one clock: every ack carries the host's `host_t`.
"""

from __future__ import annotations

import itertools
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from tests.vm import qemu
from tests.vm.guest import pixels

LIT_COVERAGE = 0.9
"""The tenant's colour fills its fullscreen surface; a frame edge or a cursor may not be it."""
PIXEL_STEP = 97
"""Every 97th pixel: a prime, so the sample is not one column; enough for a solid fill."""
JOIN_S = 30.0


class ScanoutSampler:
    """Samples heads' scanouts on a thread between `start` and `stop`; see the module doc."""

    def __init__(self, vm: qemu.Vm) -> None:
        self._vm = vm
        self._dir = Path(tempfile.mkdtemp(prefix="vm-samples-"))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._colours: dict[int, tuple[int, int, int]] = {}
        self.samples: list[dict[str, Any]] = []
        self.errors: list[str] = []

    def start(self, colours: dict[int, tuple[int, int, int]]) -> None:
        if self._thread is not None:
            raise qemu.VmError("the sampler is already running")
        self._colours = dict(colours)
        self.samples, self.errors = [], []
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="vm-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> list[dict[str, Any]]:
        if self._thread is not None:
            self._stop.set()
            self._thread.join(JOIN_S)
            self._thread = None
        return self.samples

    def _run(self) -> None:
        while not self._stop.is_set():
            for head, colour in self._colours.items():
                path = self._dir / f"head{head}.ppm"
                try:
                    self._vm.screendump(head, path)
                    at = time.monotonic()
                    image = pixels.read_ppm(path)
                except (qemu.VmError, OSError, ValueError) as err:
                    self.errors.append(f"head {head}: {err}")
                    self._stop.wait(0.05)
                    continue
                share = pixels.coverage(image, colour, step=PIXEL_STEP)
                self.samples.append({"t": at, "head": head, "size": list(image.size),
                                     "coverage": round(share, 4)})

    def handlers(self) -> dict[str, qemu.Handler]:
        def start(request: dict[str, Any]) -> dict[str, Any]:
            colours = {int(head): (int(c[0]), int(c[1]), int(c[2]))
                       for head, c in request["colours"].items()}
            self.start(colours)
            return {"ok": True}

        def stop(_request: dict[str, Any]) -> dict[str, Any]:
            return {"ok": True, "samples": self.stop(), "errors": self.errors[-20:]}

        return {"sample_start": start, "sample_stop": stop}


def interval(samples: list[dict[str, Any]], head: int) -> float | None:
    """The median time between two consecutive samples of `head` (None with fewer than two):
    the error bar of a dark span's ends."""
    times = [s["t"] for s in samples if s["head"] == head]
    gaps = sorted(b - a for a, b in itertools.pairwise(times))
    return gaps[len(gaps) // 2] if gaps else None


def dark_spans(samples: list[dict[str, Any]], head: int) -> list[tuple[float, float | None]]:
    """The spans (first dark sample's time, first lit sample's time after it, or None when it
    never came back) in which `head` was not lit, in sample order."""
    spans: list[tuple[float, float | None]] = []
    dark_since: float | None = None
    for sample in samples:
        if sample["head"] != head:
            continue
        lit = sample["coverage"] >= LIT_COVERAGE
        if not lit and dark_since is None:
            dark_since = sample["t"]
        elif lit and dark_since is not None:
            spans.append((dark_since, sample["t"]))
            dark_since = None
    if dark_since is not None:
        spans.append((dark_since, None))
    return spans
