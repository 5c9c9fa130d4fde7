"""The pod runner: a pod template's containers run in the kubelet's order and kept so.

Init containers run one at a time, each to completion (restarted through the backoff until it
exits 0); a native sidecar (an init container with `restartPolicy: Always`) is started in its
turn and kept running (it has no startup probe, so the next one starts at once); then every
container starts. Any exit of a sidecar or a container is restarted through the backoff
(`simnode.kubelet.lifecycle`), with its `restartCount`, `lastState` and reason in the status the
runner hands `on_status` (the Pod's status: `initContainerStatuses` for init containers and
sidecars, `containerStatuses` for the containers, as the kubelet writes them). Liveness
probes run at their period; `failureThreshold` failures in a row kill and restart the
container. A container whose process tree's RSS is over its memory limit is SIGKILLed and
recorded `OOMKilled`. `stop` ends the pod as the kubelet does: SIGTERM to the containers, then
to the sidecars in reverse order once the containers are gone, SIGKILL to whatever is left at
`terminationGracePeriodSeconds`.

Every process is started from the runner's own thread, which lives until the pod has stopped:
the launcher's children die with the thread that started them (PR_SET_PDEATHSIG).

The pod's containers share the host's PID namespace, which holds what `shareProcessNamespace:
true` gives (each container sees and may signal the others' processes: the operator SIGKILLs
a hung weston by the pid in its pid file) and lets the runner measure, signal and read the argv
of each process by the same pid. A PID namespace of the pod's own would need a holder process
and every bwrap joining it, which bwrap 0.8 cannot do for a namespace it did not create.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping
from typing import Final

from simnode.kubelet import memory, probes
from simnode.kubelet.launcher import Launcher, LaunchError, LaunchSpec
from simnode.kubelet.lifecycle import OOM_EXIT, ContainerState, JsonObject, now
from simnode.kubelet.manifest import Container, PodTemplate

log = logging.getLogger(__name__)

POLL_S: Final = 0.1
MEMORY_POLL_S: Final = 0.5
JOIN_MARGIN_S: Final = 30.0


class PodError(Exception):
    """The pod did not start: the message names the container and its log."""


class PodRunner:
    def __init__(self, template: PodTemplate, *, launcher: Launcher,
                 spec_for: Callable[[Container], LaunchSpec], images: Mapping[str, str],
                 on_status: Callable[[JsonObject], None] = lambda _status: None) -> None:
        self.template = template
        self.launcher = launcher
        self.spec_for = spec_for
        self.on_status = on_status
        self.states = {c.name: ContainerState(c, images.get(c.name, c.image))
                       for c in template.all_containers()}
        self._stop = threading.Event()
        self._started = threading.Event()
        self._failure: BaseException | None = None
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._start_time = now()
        self._phase = "Pending"
        self._published: JsonObject | None = None
        self._next_memory = 0.0

    # --- the API the node uses -------------------------------------------------------------

    def start(self, *, timeout_s: float) -> None:
        """Run the init containers and start the containers; PodError if that takes longer
        than `timeout_s` or cannot be done (then the pod is stopped again)."""
        self._thread = threading.Thread(target=self._main, name="pod runner", daemon=True)
        self._thread.start()
        if not self._started.wait(timeout_s) or self._failure is not None:
            why = self._failure or self._waiting_on()
            self.stop()
            raise PodError(f"pod did not start in {timeout_s:g} s: {why}")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.template.grace_s + JOIN_MARGIN_S)
            self._thread = None

    def pid(self, name: str) -> int | None:
        launched = self.states[name].launched
        return None if launched is None else launched.pid

    def status(self) -> JsonObject:
        with self._lock:
            return self._status()

    # --- the runner's thread -------------------------------------------------------------

    def _main(self) -> None:
        try:
            self._publish()
            for container in self.template.init_containers:
                if self._stop.is_set():
                    return
                state = self.states[container.name]
                self._launch(state)
                if not container.sidecar:
                    self._until(lambda: state.completed)  # noqa: B023 - called in this turn
            if not self._stop.is_set():
                for container in self.template.containers:
                    self._launch(self.states[container.name])
                self._phase = "Running"
                self._started.set()
                self._until(lambda: False)
        except BaseException as exc:  # reported by start(); the pod stops
            log.exception("pod runner failed")
            self._failure = exc
        finally:
            self._terminate()
            self._started.set()

    def _until(self, done: Callable[[], bool]) -> None:
        """Keep every started container until `done()` or stop."""
        while not self._stop.is_set() and not done():
            self._tick()
            self._stop.wait(POLL_S)

    def _tick(self) -> None:
        clock = time.monotonic()
        measure = clock >= self._next_memory
        if measure:
            self._next_memory = clock + MEMORY_POLL_S
        for state in self.states.values():
            launched = state.launched
            if launched is not None and launched.exited():
                code = launched.reap()
                self._exited(state, code, oom=launched.oom_killed)
            elif launched is not None:
                if measure:
                    self._check_memory(state)
                if state.launched is not None:
                    self._probe(state, clock)
            elif state.restart_at is not None and clock >= state.restart_at:
                state.restart_count += 1
                self._launch(state)
        self._publish()

    def _launch(self, state: ContainerState) -> None:
        try:
            launched = self.launcher.launch(self.spec_for(state.container))
        except LaunchError as exc:
            raise PodError(str(exc)) from exc
        with self._lock:
            state.running(launched)
        log.info("container %s started: pid %d", state.name, launched.pid)
        self._publish()

    def _exited(self, state: ContainerState, exit_code: int, *, oom: bool = False,
                message: str = "") -> None:
        _kill_left(state)
        ran = time.monotonic() - state.started_mono
        with self._lock:
            ended = state.terminated(exit_code, oom=oom, message=message)
            plain_init = state.container in self.template.init_containers and \
                not state.container.sidecar
            if plain_init and exit_code == 0 and not oom:
                state.completed = True
                state.state = ended
                state.restart_at = None
                return
            state.last_state = ended
            wait = state.backoff.step(ran)
            state.restart_at = time.monotonic() + wait
            state.state = {"waiting": {
                "reason": "CrashLoopBackOff",
                "message": f"back-off {wait:g}s restarting failed container={state.name}"}}
        log.info("container %s exited %d (%s); restarting in %g s", state.name, exit_code,
                 ended["terminated"]["reason"], wait)

    def _check_memory(self, state: ContainerState) -> None:
        launched = state.launched
        assert launched is not None
        pids = memory.tree(launched.pid)
        state.processes = {p: memory.start_time(p) for p in pids}
        state.rss = sum(memory.rss(p) for p in pids)
        limit = state.container.memory_limit
        if limit is not None and state.rss > limit:
            log.warning("container %s: RSS %d over its limit %d: OOMKilled", state.name,
                        state.rss, limit)
            launched.kill_and_reap()
            self._exited(state, OOM_EXIT, oom=True)

    def _probe(self, state: ContainerState, clock: float) -> None:
        probe = state.container.liveness
        launched = state.launched
        if probe is None or launched is None or clock < state.next_probe:
            return
        state.next_probe = clock + probe.period_s
        failure = probes.check(probe, state.container.ports)
        if failure is None:
            state.probe_failures = 0
            return
        state.probe_failures += 1
        log.info("container %s: liveness probe failed (%d/%d): %s", state.name,
                 state.probe_failures, probe.failure_threshold, failure)
        if state.probe_failures >= probe.failure_threshold:
            code = self._end(state, deadline=time.monotonic() + self.template.grace_s)
            self._exited(state, code, message=f"Liveness probe failed: {failure}")

    def _end(self, state: ContainerState, *, deadline: float) -> int:
        """SIGTERM, then SIGKILL at `deadline`; the exit code."""
        launched = state.launched
        assert launched is not None
        launched.send_signal(signal.SIGTERM)
        while not launched.exited() and time.monotonic() < deadline:
            time.sleep(POLL_S / 2)
        return launched.reap() if launched.exited() else launched.kill_and_reap()

    def _terminate(self) -> None:
        deadline = time.monotonic() + self.template.grace_s
        groups = [list(self.template.containers),
                  [c for c in reversed(self.template.init_containers)]]
        for group in groups:
            live = [self.states[c.name] for c in group if self.states[c.name].launched]
            for state in live:
                assert state.launched is not None
                state.launched.send_signal(signal.SIGTERM)
            for state in live:
                code = self._end(state, deadline=deadline)
                _kill_left(state)
                with self._lock:
                    state.state = state.terminated(code)
                    state.restart_at = None
        for state in self.states.values():
            state.restart_at = None
        self._phase = "Succeeded" if self._started.is_set() else "Failed"
        self._publish()

    # --- status --------------------------------------------------------------------------

    def _waiting_on(self) -> str:
        for state in self.states.values():
            # A plain init container holds the pod until it completes, running or not.
            plain_init = (state.container in self.template.init_containers
                          and not state.container.sidecar)
            if not state.completed and ("running" not in state.state or plain_init):
                last = state.last_state.get("terminated", {})
                return (f"container {state.name} is {next(iter(state.state))}"
                        + (f" (last exit {last.get('exitCode')}, {last.get('reason')})"
                           if last else ""))
        return "no container is waiting"

    def _status(self) -> JsonObject:
        inits = [self.states[c.name].status() for c in self.template.init_containers]
        mains = [self.states[c.name].status() for c in self.template.containers]
        initialized = all(self.states[c.name].completed or c.sidecar and
                          "running" in self.states[c.name].state
                          for c in self.template.init_containers)
        ready = initialized and all(s["ready"] for s in mains)
        conditions = [
            {"type": "PodScheduled", "status": "True"},
            {"type": "Initialized", "status": str(initialized)},
            {"type": "ContainersReady", "status": str(ready)},
            {"type": "Ready", "status": str(ready)},
        ]
        return {"phase": self._phase, "conditions": conditions, "hostIP": "127.0.0.1",
                "podIP": "127.0.0.1", "startTime": self._start_time,
                "initContainerStatuses": inits, "containerStatuses": mains}

    def _publish(self) -> None:
        with self._lock:
            status = self._status()
        if status == self._published:
            return
        self._published = status
        try:
            self.on_status(status)
        except Exception:  # the kubelet keeps pods running when the API fails
            log.exception("writing the pod status failed")

    def memory(self) -> dict[str, tuple[int, int | None]]:
        """Container -> (RSS of its process tree, its limit), as last measured."""
        return {n: (s.rss, s.container.memory_limit) for n, s in self.states.items()}


def _kill_left(state: ContainerState) -> None:
    """SIGKILL what is left of the container's last seen process tree (same pid, same start)."""
    for pid, started in state.processes.items():
        if started is not None and memory.start_time(pid) == started:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    state.processes = {}
