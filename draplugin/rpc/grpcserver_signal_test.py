"""The operator's main thread waits in `Server.wait` while its signals (SIGHUP's re-read,
SIGTERM's stop) may land on any of its threads: Python runs the handler on the main thread
only, so the wait must wake for it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from draplugin.rpc import grpcserver

# The signal is sent by, and so lands on, a thread other than the main one: the main thread
# blocks it, as the kernel may pick any thread that does not.
PROGRAM = textwrap.dedent("""
    import os, signal, threading
    from draplugin.rpc import grpcserver

    server = grpcserver.Server({}, workers=1)
    server.start()
    signal.signal(signal.SIGHUP, lambda _s, _f: server.stop(0))
    ready = threading.Event()
    def send():
        ready.wait()
        os.kill(os.getpid(), signal.SIGHUP)
    threading.Thread(target=send, daemon=True).start()
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})
    ready.set()
    server.wait()
    print("stopped")
""")


def test_a_signal_landing_on_another_thread_still_runs_its_handler() -> None:
    assert grpcserver.WAIT_SLICE_S <= 1.0  # a stop or re-read is never later than this
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    done = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True,
                          text=True, timeout=30, check=False)
    assert done.returncode == 0 and done.stdout.strip() == "stopped", done.stderr
