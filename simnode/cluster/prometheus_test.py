"""prometheus: the config passes promtool, and Debian's Prometheus starts with the shipped alerts
loaded, answers, and is gone after the block."""

from __future__ import annotations

import io
import json
import shutil
import socket
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from simnode.cluster import prometheus

REPO = Path.cwd()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _get(url: str) -> Any:
    """The `data` of a Prometheus API answer."""
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.loads(answer.read())["data"]


def test_config_passes_promtool(tmp_path: Path) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump(prometheus.rule_groups(REPO)))
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump(prometheus.config("n1", rules)))
    done = subprocess.run(["promtool", "check", "config", str(config)], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    jobs = {j["job_name"]: j for j in prometheus.config("n1", rules)["scrape_configs"]}
    assert jobs["display-operator"]["static_configs"][0]["labels"]["node"] == "n1"
    assert jobs["display-capture"]["scheme"] == "https"


def test_missing_rules_are_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(prometheus.PrometheusError, match="prometheusrule.yaml"):
        prometheus.rule_groups(tmp_path)


def test_nothing_runs_without_settings() -> None:
    out = io.StringIO()
    with prometheus.serving(None, out):
        pass
    assert out.getvalue() == ""


def test_runs_with_the_shipped_alerts_and_stops(tmp_path: Path) -> None:
    if shutil.which("prometheus") is None:
        pytest.fail("prometheus (Debian's package) is not installed")
    addr = f"127.0.0.1:{_free_port()}"
    out = io.StringIO()
    settings = prometheus.Settings(repo=REPO, state=tmp_path, node_name="n1", addr=addr)
    with prometheus.serving(settings, out):
        assert f"http://{addr}/classic/alerts" in out.getvalue()
        with urllib.request.urlopen(f"http://{addr}/classic/alerts", timeout=10) as page:
            assert b"DisplayCompositorDown" in page.read()
        groups = _get(f"http://{addr}/api/v1/rules?type=alert")["groups"]
        names = {r["name"] for g in groups for r in g["rules"]}
        shipped = prometheus.rule_groups(REPO)["groups"]
        assert names == {r["alert"] for g in shipped for r in g["rules"]}
        loaded = yaml.safe_load(_get(f"http://{addr}/api/v1/status/config")["yaml"])
        assert {j["job_name"] for j in loaded["scrape_configs"]} == {
            "display-operator", "display-capture"}
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://{addr}/-/ready", timeout=5)
