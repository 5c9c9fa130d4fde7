"""The server in a process of its own: the operator's main thread waits in `Server.wait` while
its signals (SIGHUP's re-read, SIGTERM's stop) may land on any of its threads, and a handler
still running after the stop's grace must not hold the process's exit."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
import time

from draplugin.rpc import grpcserver

# The signal is sent by, and so lands on, a thread other than the main one: the main thread
# blocks it, as the kernel may pick any thread that does not.
SIGNAL_PROGRAM = textwrap.dedent("""
    import os, signal, threading
    from draplugin.rpc import grpcserver

    server = grpcserver.Server([], workers=1)
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

# A call whose handler never returns, a stop with a short grace, then the end of the program.
STUCK_PROGRAM = textwrap.dedent("""
    import sys, threading
    from pathlib import Path
    import grpc
    from draplugin.rpc import grpcserver

    entered = threading.Event()
    def stuck(request, context):
        entered.set()
        threading.Event().wait()
    server = grpcserver.Server([grpc.method_handlers_generic_handler(
        "t.S", {"M": grpc.unary_unary_rpc_method_handler(stuck)})], workers=2)
    sock = Path(sys.argv[1]) / "s.sock"
    server.add_unix_socket(sock)
    server.start()
    channel = grpc.insecure_channel(f"unix:{sock}")
    # Kept in a name: a call's future that is dropped cancels the call.
    pending = channel.unary_unary("/t.S/M").future(b"", timeout=60)
    assert entered.wait(30)
    server.stop(0.1).wait(30)
    print("stopped", flush=True)
""")


def _run(program: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    return subprocess.run([sys.executable, "-c", program, *args], env=env, capture_output=True,
                          text=True, timeout=60, check=False)


def test_a_signal_landing_on_another_thread_still_runs_its_handler() -> None:
    assert grpcserver.WAIT_SLICE_S <= 1.0  # a stop or re-read is never later than this
    done = _run(SIGNAL_PROGRAM)
    assert done.returncode == 0 and done.stdout.strip() == "stopped", done.stderr


def test_a_handler_running_past_the_grace_does_not_hold_the_exit() -> None:
    with tempfile.TemporaryDirectory(prefix="stuck-", dir="/tmp") as root:
        started = time.monotonic()
        done = _run(STUCK_PROGRAM, root)
        took = time.monotonic() - started
    assert done.returncode == 0 and done.stdout.strip() == "stopped", done.stderr
    assert took < 30, f"the process took {took:.1f} s to end"
