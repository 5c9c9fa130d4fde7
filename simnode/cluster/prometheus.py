"""`simnode up --prometheus`: Debian's Prometheus scraping the node's two listeners with the
alerts deploy/overlays/monitoring ships, so `simnode hang` shows an alert at
http://127.0.0.1:9090/classic/alerts (Debian's build serves the classic UI only: /alerts is 404;
the API's /api/v1/alerts answers the same).

The scrape sets the labels the PodMonitor gives (`job` display-operator / display-capture,
`node`, `namespace`, `pod`), so the shipped rules read the simulated node as a real one. Scrape
and evaluation run every 5 s instead of the PodMonitor's 30 s, so alerts come and go while a
person watches; the rules' windows and `for:` are the shipped ones. Its files (config, rules,
TSDB) are in `<state>/prometheus/`, started fresh each time; its log is
`<state>/logs/prometheus.log`.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Final, TextIO

import yaml

ADDR: Final = "127.0.0.1:9090"
INTERVAL: Final = "5s"
NAMESPACE: Final = "display-operator"
RULE: Final = Path("deploy") / "overlays" / "monitoring" / "prometheusrule.yaml"
READY_TIMEOUT_S: Final = 60.0
STOP_TIMEOUT_S: Final = 20.0
# The node's listeners, as the manifest states them (METRICS_ADDR, CAPTURE_ADDR).
OPERATOR_TARGET: Final = "127.0.0.1:9200"
CAPTURE_TARGET: Final = "127.0.0.1:9201"


class PrometheusError(Exception):
    """Prometheus is missing, its rules do not load, or it did not start; the message says
    which and where its log is."""


@dataclass(frozen=True, slots=True)
class Settings:
    repo: Path  # the checkout whose deploy/ holds the rules
    state: Path  # simnode's state dir
    node_name: str
    addr: str = ADDR


def rule_groups(repo: Path) -> dict[str, Any]:
    """The PrometheusRule's spec (a Prometheus rules file) from the checkout."""
    path = repo / RULE
    try:
        spec: dict[str, Any] = yaml.safe_load(path.read_text())["spec"]
    except (OSError, yaml.YAMLError, KeyError, TypeError) as exc:
        raise PrometheusError(f"cannot read the alerts from {path}: {exc}") from exc
    return spec


def config(node_name: str, rules: Path) -> dict[str, Any]:
    """A Prometheus config scraping the node's operator and capture with the PodMonitor's
    labels."""
    labels = {"node": node_name, "namespace": NAMESPACE, "pod": f"display-operator-{node_name}"}

    def job(name: str, target: str, scheme: str) -> dict[str, Any]:
        scrape: dict[str, Any] = {"job_name": name, "scheme": scheme,
                                  "static_configs": [{"targets": [target], "labels": labels}]}
        if scheme == "https":
            # Capture's own certificate, as the PodMonitor: /metrics takes no token.
            scrape["tls_config"] = {"insecure_skip_verify": True}
        return scrape

    return {
        "global": {"scrape_interval": INTERVAL, "evaluation_interval": INTERVAL,
                   "scrape_timeout": INTERVAL},
        "rule_files": [str(rules)],
        "scrape_configs": [job("display-operator", OPERATOR_TARGET, "http"),
                           job("display-capture", CAPTURE_TARGET, "https")],
    }


def _ready(addr: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://{addr}/-/ready", timeout=2) as answer:
            return bool(answer.status == 200)
    except (OSError, urllib.error.URLError):
        return False


@contextlib.contextmanager
def serving(settings: Settings | None, out: TextIO) -> Iterator[None]:
    """Run Prometheus while the block runs (nothing when `settings` is None); stop and reap it
    after."""
    if settings is None:
        yield
        return
    binary = shutil.which("prometheus")
    if binary is None:
        raise PrometheusError("prometheus is not on PATH (Debian's package prometheus)")
    home = settings.state / "prometheus"
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    rules = home / "rules.yaml"
    rules.write_text(yaml.safe_dump(rule_groups(settings.repo)))
    config_file = home / "prometheus.yml"
    config_file.write_text(yaml.safe_dump(config(settings.node_name, rules)))
    check = subprocess.run(["promtool", "check", "config", str(config_file)],
                           capture_output=True, text=True, timeout=60, check=False)
    if check.returncode != 0:
        raise PrometheusError(f"promtool check config {config_file}: {check.stdout}"
                              f"{check.stderr}")
    logs = settings.state / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log_path = logs / "prometheus.log"
    with log_path.open("ab") as log:
        process = _start(binary, config_file, home, settings.addr, log)
        try:
            _wait_ready(process, settings.addr, log_path)
            print(f"prometheus: http://{settings.addr}/classic/alerts (rules from {RULE},"
                  f" scrape and evaluation every {INTERVAL}; log {log_path})", file=out,
                  flush=True)
            yield
        finally:
            _stop(process)


def _start(binary: str, config_file: Path, home: Path, addr: str,
           log: IO[bytes]) -> subprocess.Popen[bytes]:
    argv = [binary, f"--config.file={config_file}", f"--storage.tsdb.path={home / 'data'}",
            f"--web.listen-address={addr}", "--web.enable-lifecycle"]
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)


def _wait_ready(process: subprocess.Popen[bytes], addr: str, log_path: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not _ready(addr):
        if process.poll() is not None:
            raise PrometheusError(f"prometheus exited with {process.returncode} before it was"
                                  f" ready on {addr} (is the port taken?): see {log_path}")
        if time.monotonic() >= deadline:
            raise PrometheusError(f"prometheus was not ready on {addr} within"
                                  f" {READY_TIMEOUT_S:g} s: see {log_path}")
        time.sleep(0.2)


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(STOP_TIMEOUT_S)
