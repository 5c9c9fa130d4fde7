"""One container's life as the kubelet keeps it: started, watched, restarted with a backoff,
and its status in the kubelet's words (`state`, `lastState`, `restartCount`)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from simnode.kubelet.launcher import Launched
from simnode.kubelet.manifest import Container

JsonObject = dict[str, Any]
# The kubelet backs off 10 s doubling to 300 s; a simulated node would wait minutes for a
# scenario, so this one starts at 1 s and doubles to a 10 s cap. A container that ran for
# RESET_AFTER_S without exiting starts again from the first step, as the kubelet's does.
BACKOFF_START_S: Final = 1.0
BACKOFF_CAP_S: Final = 10.0
RESET_AFTER_S: Final = 2 * BACKOFF_CAP_S
OOM_EXIT: Final = 137


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def reason(exit_code: int, *, oom: bool) -> str:
    if oom:
        return "OOMKilled"
    return "Completed" if exit_code == 0 else "Error"


@dataclass
class Backoff:
    start_s: float = BACKOFF_START_S
    cap_s: float = BACKOFF_CAP_S
    next_s: float = 0.0

    def step(self, ran_s: float) -> float:
        """The wait before the next start, after a run of `ran_s` seconds."""
        if ran_s >= RESET_AFTER_S or self.next_s == 0.0:
            self.next_s = self.start_s
        else:
            self.next_s = min(self.next_s * 2, self.cap_s)
        return self.next_s


@dataclass
class ContainerState:
    """What the runner knows of one container, and its status object."""

    container: Container
    image: str
    restart_count: int = 0
    launched: Launched | None = None
    started_mono: float = 0.0
    started_at: str = ""
    state: JsonObject = field(default_factory=lambda: {"waiting": {"reason": "PodInitializing"}})
    last_state: JsonObject = field(default_factory=dict)
    backoff: Backoff = field(default_factory=Backoff)
    restart_at: float | None = None
    probe_failures: int = 0
    next_probe: float = 0.0
    rss: int = 0
    processes: dict[int, int | None] = field(default_factory=dict)
    """The container's process tree as last seen (pid -> start time): a process that left
    its parent's session (weston, started by westonctl) is ended with the container, as the
    runtime ends everything in a container's cgroup."""
    completed: bool = False
    """A plain init container that exited 0: it is not started again."""

    @property
    def name(self) -> str:
        return self.container.name

    def running(self, launched: Launched) -> None:
        self.launched = launched
        self.started_mono = time.monotonic()
        self.started_at = now()
        self.state = {"running": {"startedAt": self.started_at}}
        self.restart_at = None
        self.probe_failures = 0
        probe = self.container.liveness
        self.next_probe = self.started_mono + (probe.initial_delay_s + probe.period_s
                                               if probe else 0.0)

    def terminated(self, exit_code: int, *, oom: bool = False,
                   message: str = "") -> JsonObject:
        """Record the exit; the terminated state it was."""
        ended: JsonObject = {"exitCode": exit_code, "reason": reason(exit_code, oom=oom),
                             "startedAt": self.started_at, "finishedAt": now(),
                             "containerID": self.container_id}
        if message:
            ended["message"] = message
        self.launched = None
        self.rss = 0
        return {"terminated": ended}

    @property
    def container_id(self) -> str:
        return f"bwrap://{self.launched.pid}" if self.launched else ""

    def status(self) -> JsonObject:
        running = "running" in self.state
        out: JsonObject = {
            "name": self.name, "image": self.image, "imageID": "",
            "restartCount": self.restart_count, "ready": running or self.completed,
            "started": running, "state": self.state, "lastState": self.last_state,
        }
        if self.launched is not None:
            out["containerID"] = self.container_id
        return out
