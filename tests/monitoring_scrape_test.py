"""Every metric the shipped alerts and dashboard (deploy/overlays/monitoring) read is one a
running node exports: the rendered base's pod on a simulated node, its operator's :9200 and its
capture's :9201 scraped as the PodMonitor scrapes them. A family counts from its `# TYPE` line,
so a labelled family with no sample yet (an output the operator has not reported) counts too.

The node listens on the manifest's ports on the host's network: the pod runner's lock
(/tmp/simnode-pod-ports.lock) makes this test wait for any other node on this machine.
"""

from __future__ import annotations

import ssl
import time
import urllib.request
from collections.abc import Iterator

import pytest

from simnode.node import pod_node
from tests.deploy import monitoring
from tests.support.simulated_pod import rendered, simulated_node

OPERATOR = "http://127.0.0.1:9200/metrics"
CAPTURE = "https://127.0.0.1:9201/metrics"
TIMEOUT_S = 90.0


def _scrape(url: str) -> str:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # capture's own certificate, as the PodMonitor
    with urllib.request.urlopen(url, timeout=10, context=context) as answer:
        return str(answer.read().decode())


def _scraped(url: str, family: str) -> str:
    """The exposition at `url` once it declares `family` (the listener up and registered)."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        try:
            text = _scrape(url)
            if f"# TYPE {family} " in text:
                return text
        except OSError:
            pass  # not listening yet
        if time.monotonic() >= deadline:
            raise AssertionError(f"{url} did not declare {family} within {TIMEOUT_S:g} s")
        time.sleep(0.2)


@pytest.fixture(scope="module")
def node() -> Iterator[pod_node.PodNode]:
    yield from simulated_node(rendered())


def test_rules_and_dashboard_read_only_metrics_the_node_exports(
        node: pod_node.PodNode) -> None:
    scraped = (_scraped(OPERATOR, "display_compositor_up")
               + _scraped(CAPTURE, "display_capture_frames_total"))
    exposed = monitoring.exposed_names(scraped)
    assert monitoring.unknown_names(exposed) == {}
