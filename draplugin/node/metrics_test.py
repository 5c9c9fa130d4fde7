"""metrics: the exposition passes `promtool check metrics`, restarts and addresses read right."""

from __future__ import annotations

import shutil
import subprocess
import typing
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from draplugin.node import metrics


def _samples(m: metrics.Metrics) -> list[str]:
    """The exposition's samples, without the `_created` timestamps that differ by registry."""
    return [line for line in m.exposition().decode().splitlines()
            if not line.startswith("#") and "_created" not in line]


def _filled() -> metrics.Metrics:
    m = metrics.Metrics()
    m.connected_outputs.set(2)
    m.compositor_up.set(1)
    m.watchdog_kills.inc()
    m.prepare_duration.observe(0.012)
    m.prepare_errors.labels(reason="compositor-unavailable").inc()
    m.slice_publishes.inc()
    m.api_error("resourceslices")(429)
    m.hotplug_events.inc(3)
    m.api_retry("resourceslice-sync")
    m.ddc_operations.labels(operation="set_vcp").inc()
    m.ddc_errors.labels(operation="capabilities").inc()
    m.compositor_restarted("unsupported")
    m.output_reconfigured("HDMI-A-1", "fallback")
    m.set_output_state("HDMI-A-1", connected=True, mode="1920x1080@60", transform="normal",
                       scale=1)
    m.set_crash_restarts(4)
    return m


def test_exposition_passes_promtool() -> None:
    promtool = shutil.which("promtool")
    assert promtool is not None, "promtool (Debian's prometheus package) is not installed"
    result = subprocess.run([promtool, "check", "metrics"], input=_filled().exposition(),
                            capture_output=True, timeout=60, check=False)
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()


def test_every_metric_is_display_prefixed() -> None:
    names = {m.name for m in _filled().registry.collect()}
    assert names and all(n.startswith("display_") for n in names), names


def test_restart_counts_by_reason() -> None:
    m = _filled()
    m.set_crash_restarts(2)  # an older read arriving late does not lower the count
    text = m.exposition().decode()
    assert 'display_compositor_restarts_total{reason="unsupported"} 1.0' in text
    assert 'display_compositor_restarts_total{reason="crash"} 4.0' in text
    assert 'display_api_errors_total{code="429",resource="resourceslices"} 1.0' in text


@pytest.mark.parametrize(
    ("pod", "count"),
    [
        # As the kubelet reports the pod: weston is a native sidecar, an init container.
        ({"status": {"initContainerStatuses": [{"name": "declare", "restartCount": 0},
                                               {"name": "weston", "restartCount": 3}],
                     "containerStatuses": [{"name": "operator", "restartCount": 9}]}}, 3),
        ({"status": {"containerStatuses": [{"name": "weston", "restartCount": 2},
                                           {"name": "operator", "restartCount": 9}]}}, 2),
        ({"status": {"containerStatuses": [{"name": "operator", "restartCount": 9}]}}, 0),
        ({}, 0),
    ],
    ids=["native-sidecar", "plain-container", "no-weston-status", "no-status"],
)
def test_weston_restart_count(pod: dict[str, object], count: int) -> None:
    assert metrics.weston_restart_count(pod) == count


@pytest.mark.parametrize(
    ("text", "host", "port"),
    [(":9200", "0.0.0.0", 9200), ("127.0.0.1:9300", "127.0.0.1", 9300),
     ("[::1]:80", "::1", 80)],
    ids=["port-only", "ipv4", "ipv6"],
)
def test_parse_addr(text: str, host: str, port: int) -> None:
    assert metrics.parse_addr(text) == metrics.Address(host, port)


@pytest.mark.parametrize("text", ["9200", ":x", ":-1", ":70000"],
                         ids=["no-colon", "word", "negative", "too-big"])
def test_bad_addr_is_refused(text: str) -> None:
    with pytest.raises(metrics.BadAddressError, match="METRICS_ADDR"):
        metrics.parse_addr(text)


def test_serves_over_http() -> None:
    m = _filled()
    server = m.serve("127.0.0.1:0")
    try:
        port = server.server_address[1]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
            assert b"display_connected_outputs 2.0" in reply.read()
    finally:
        server.shutdown()
        server.server_close()


def _get(port: int, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def test_healthz_answers_the_verdict_and_other_paths_are_404() -> None:
    verdict = (True, "publisher passed 0.1 s ago")
    server = _filled().serve("127.0.0.1:0", health=lambda: verdict)
    try:
        port = server.server_address[1]
        assert _get(port, "/healthz") == (200, b"ok: publisher passed 0.1 s ago\n")
        verdict = (False, "no publisher pass for 40 s")
        assert _get(port, "/healthz") == (503, b"failing: no publisher pass for 40 s\n")
        assert _get(port, "/anything")[0] == 404
        assert b"display_api_retries" in _get(port, "/metrics")[1]
    finally:
        server.shutdown()
        server.server_close()


def test_every_restart_reason_and_prepare_error_is_exported_at_zero() -> None:
    text = metrics.Metrics().exposition().decode()
    for reason in ("crash", *metrics.RESTART_REASONS):
        assert f'display_compositor_restarts_total{{reason="{reason}"}} 0.0' in text
    for reason in metrics.PREPARE_ERROR_REASONS:
        assert f'display_prepare_errors_total{{reason="{reason}"}} 0.0' in text


def test_outputs_are_counted_by_power_state_every_state_exported() -> None:
    m = metrics.Metrics()
    m.set_power_states(["On", "Off", "Off"])
    text = m.exposition().decode()
    assert 'display_outputs_by_power_state{state="Off"} 2.0' in text
    assert 'display_outputs_by_power_state{state="On"} 1.0' in text
    assert 'display_outputs_by_power_state{state="Standby"} 0.0' in text
    with pytest.raises(metrics.BadLabelError, match="state 'off'"):
        m.set_power_states(["off"])
    assert 'display_outputs_by_power_state{state="Off"} 2.0' in m.exposition().decode()


def test_power_states_are_the_displays() -> None:
    from libdisplay.display import POWER_STATES

    assert metrics.POWER_STATES == POWER_STATES


def test_prepare_error_reasons_are_the_drivers() -> None:
    from draplugin.driver import state

    assert set(metrics.PREPARE_ERROR_REASONS) == set(typing.get_args(state.PrepareErrorReason))


def test_compositor_restarted_counts_by_reason() -> None:
    m = metrics.Metrics()
    m.compositor_restarted("unsupported")
    m.compositor_restarted("unsupported")
    m.compositor_restarted("new-connector")
    text = m.exposition().decode()
    assert 'display_compositor_restarts_total{reason="unsupported"} 2.0' in text
    assert 'display_compositor_restarts_total{reason="new-connector"} 1.0' in text
    assert 'display_compositor_restarts_total{reason="start"} 0.0' in text


@pytest.mark.parametrize("reason", ["crash", "ordered", "", "Unsupported"])
def test_compositor_restarted_refuses_other_reasons(reason: str) -> None:
    m = metrics.Metrics()
    with pytest.raises(metrics.BadLabelError, match="reason") as caught:
        m.compositor_restarted(reason)  # type: ignore[arg-type]
    assert caught.value.field == "reason"
    assert _samples(m) == _samples(metrics.Metrics())


def test_output_reconfigured_counts_by_output_and_result() -> None:
    m = metrics.Metrics()
    m.output_reconfigured("HDMI-A-1", "live")
    m.output_reconfigured("HDMI-A-1", "fallback")
    m.output_reconfigured("DP-1", "live")
    text = m.exposition().decode()
    assert 'display_output_reconfigures_total{output="HDMI-A-1",result="live"} 1.0' in text
    assert 'display_output_reconfigures_total{output="HDMI-A-1",result="fallback"} 1.0' in text
    # The output's other results exist at zero, so their first increase is visible.
    assert 'display_output_reconfigures_total{output="DP-1",result="fallback"} 0.0' in text
    assert 'display_output_reconfigures_total{output="DP-1",result="failed"} 0.0' in text


@pytest.mark.parametrize(
    ("output", "result", "field"),
    [("HDMI-A-1", "restart", "result"), ("", "live", "output"), ("a b", "live", "output")],
    ids=["bad-result", "empty-output", "space-in-output"])
def test_output_reconfigured_refuses_bad_labels(output: str, result: str, field: str) -> None:
    m = metrics.Metrics()
    with pytest.raises(metrics.BadLabelError) as caught:
        m.output_reconfigured(output, result)  # type: ignore[arg-type]
    assert caught.value.field == field
    assert b"display_output_reconfigures_total{" not in m.exposition()


def test_output_state_keeps_only_the_current_combination() -> None:
    m = metrics.Metrics()
    m.set_output_state("HDMI-A-1", connected=True, mode="1920x1080@60", transform="normal",
                       scale=1)
    m.set_output_state("HDMI-A-1", connected=True, mode="1280x720@60", transform="rotate-90",
                       scale=2)
    m.set_output_state("DP-1", connected=False, mode="", transform="normal", scale=1)
    text = m.exposition().decode()
    assert 'display_output_connected{output="HDMI-A-1"} 1.0' in text
    assert 'display_output_connected{output="DP-1"} 0.0' in text
    assert ('display_output_info{mode="1280x720@60",output="HDMI-A-1",scale="2",'
            'transform="rotate-90"} 1.0') in text
    assert 'mode="1920x1080@60"' not in text
    assert 'display_output_info{mode="",output="DP-1",scale="1",transform="normal"} 1.0' in text
    assert 'display_output_reconfigures_total{output="DP-1",result="live"} 0.0' in text


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"mode": "big"}, "mode"), ({"mode": "1920x1080@"}, "mode"),
     ({"transform": "rotate-45"}, "transform"), ({"scale": 0}, "scale"),
     ({"scale": 9}, "scale"), ({"scale": True}, "scale"), ({"output": "HDMI A"}, "output")],
    ids=["mode-word", "mode-no-rate", "transform", "scale-0", "scale-9", "scale-bool",
         "output"])
def test_output_state_refuses_bad_fields_and_changes_nothing(
        kwargs: dict[str, typing.Any], field: str) -> None:
    m = metrics.Metrics()
    m.set_output_state("HDMI-A-1", connected=True, mode="1920x1080", transform="normal",
                       scale=1)
    before = _samples(m)
    args: dict[str, typing.Any] = {"output": "HDMI-A-1", "connected": False,
                                   "mode": "1280x720", "transform": "normal", "scale": 1,
                                   **kwargs}
    with pytest.raises(metrics.BadLabelError, match=field) as caught:
        m.set_output_state(**args)
    assert caught.value.field == field
    assert _samples(m) == before


def test_output_connected_alone_keeps_the_last_mode() -> None:
    m = metrics.Metrics()
    m.set_output_state("HDMI-A-1", connected=True, mode="1920x1080@60", transform="normal",
                       scale=1)
    m.set_output_connected("HDMI-A-1", False)
    m.set_output_connected("DP-2", False)
    text = m.exposition().decode()
    assert 'display_output_connected{output="HDMI-A-1"} 0.0' in text
    assert 'display_output_connected{output="DP-2"} 0.0' in text
    assert 'mode="1920x1080@60",output="HDMI-A-1"' in text
    with pytest.raises(metrics.BadLabelError, match="output"):
        m.set_output_connected("HDMI A", True)


def test_the_renderer_westonctl_writes_is_read_at_each_scrape(tmp_path: Path) -> None:
    from libdisplay.compositor.renderer import RendererState, write_renderer_state

    m = metrics.Metrics()
    path = tmp_path / "renderer"
    m.watch_renderer(path)
    text = m.exposition().decode()
    assert "display_compositor_renderer_fallbacks_total 0.0" in text
    assert "display_compositor_renderer_info{" not in text
    write_renderer_state(path, RendererState(requested="gl", running="pixman", fallbacks=1))
    text = m.exposition().decode()
    assert "display_compositor_renderer_fallbacks_total 1.0" in text
    assert 'display_compositor_renderer_info{requested="gl",running="pixman"} 1.0' in text
    path.write_text("not json\n")
    assert "display_compositor_renderer_fallbacks_total 0.0" in m.exposition().decode()
