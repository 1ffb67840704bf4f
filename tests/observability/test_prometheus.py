"""A real Prometheus (Debian `prometheus`) scrapes two node agents, each over a device twin of
its own for the pods of one of the session's real Jetson nodes; every query of every dashboard
panel returns data, and every metric a panel names is exported by a running component."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from edgetrain.cluster import KubeClient, LocalCluster, api_path
from edgetrain.cluster.controlplane import free_ports
from edgetrain.cluster.twin import SimTwin
from tests.cluster.fixtures import NANO, ORIN
from tests.cluster.realnodes import RealCluster
from tests.helpers import http_get
from tests.node_agent.helpers import AgentProcess, sleeper_pod, wait_until

DASHBOARDS = Path(__file__).resolve().parents[2] / "charts" / "edgetrain" / "dashboards"
# Grafana variables in panel queries, as Grafana would expand them for "All" and a 1 s scrape.
GRAFANA_VARS = {"$node": ".*", "${node}": ".*", "$__rate_interval": "15s",
                "$__interval": "1s", "$__range": "1m"}
METRIC = re.compile(r"\b(edgetrain_[a-z0-9_]+)\b")


def dashboard_queries() -> list[tuple[str, str, str]]:
    """(dashboard file, panel title, PromQL) for every panel target."""
    out = []
    for path in sorted(DASHBOARDS.glob("*.json")):
        for panel in json.loads(path.read_text())["panels"]:
            for target in panel.get("targets", []):
                out.append((path.name, panel["title"], target["expr"]))
    return out


def expand(expr: str) -> str:
    for var, value in GRAFANA_VARS.items():
        expr = expr.replace(var, value)
    assert "$" not in expr, f"unexpanded variable in {expr!r}"
    return expr


@pytest.fixture(scope="module")
def prometheus_bin() -> str:
    path = shutil.which("prometheus")
    if path is None:
        pytest.fail("prometheus is not installed: run `make prometheus` (Debian package)")
    return path


@pytest.fixture(scope="module")
def fleet(cluster: LocalCluster, kube: KubeClient, trainer_images: RealCluster,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Two agents (nano, orin-nano twins), each with one annotated training pod running on its
    real node. The agents run here, over twins of their own whose workload the test sets (the
    nodes' own twins run in another process)."""
    tmp = tmp_path_factory.mktemp("fleet")
    ns = f"obs-{int(time.time() * 1000) % 10**8}"
    kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                       "metadata": {"name": ns}})
    kube.wait_for(api_path("v1", "serviceaccounts", ns, "default"), lambda _: True, 30)
    twins = {name: SimTwin(board, tmp / f"{name}-twin")
             for name, board in ((NANO, "jetson-nano"), (ORIN, "jetson-orin-nano"))}
    agents = [AgentProcess(name, twins[name].root, cluster.kubeconfig,
                           tmp / f"{name}.state.json", tmp / f"{name}.log", guard_window_s=1.0)
              for name in (NANO, ORIN)]
    try:
        for a in agents:
            a.start()
        # Nano: hot job (b=128 at 921.6 MHz, ~9.5 W simulated) under a 6 W limit -> guard steps.
        twins[NANO].device.set_workload("resnet18", 128)
        twins[ORIN].device.set_workload("resnet18", 64)
        progress = {"edgetrain.io/training-samples": "2560",
                    "edgetrain.io/training-accuracy": "0.42"}
        for name, pod, job, freq, limit in ((NANO, "train-a", "job-a", 921_600_000, 6.0),
                                            (ORIN, "train-b", "job-b", 612_000_000, 15.0)):
            body = sleeper_pod(pod, name, 300, freq_hz=freq, limit_w=limit,
                               labels={"edgetrain.io/job": job})
            body["metadata"]["annotations"].update(progress)
            kube.create(api_path("v1", "pods", ns), body)
        yield {"agents": agents, "namespace": ns}
    finally:
        for a in agents:
            a.stop()
        kube.delete_ignore_missing(api_path("v1", "namespaces", name=ns))
        for twin in twins.values():
            twin.close()


@pytest.fixture(scope="module")
def budget_exporter(fleet: dict[str, Any]) -> Iterator[str]:
    """The operator's PowerBudget gauges (`METRICS_PORT`, the same registry code) for a site of
    both twins' nodes, with job-a holding a share; its address."""
    from prometheus_client import start_http_server

    from edgetrain.api.budget import BudgetAllocationStatus, PowerBudgetStatus
    from edgetrain.operator.budget_measure import MeasuredDraw, measured_draw, power_reading
    from edgetrain.operator.budget_metrics import BudgetMetrics

    # The measured draw as the operator reads it: each agent's own exposition, summed.
    def read() -> MeasuredDraw | None:
        got = measured_draw([NANO, ORIN], {a.node: power_reading(a.metrics(), a.node)
                                           for a in fleet["agents"]})
        return None if got.missing else got

    measured = wait_until(read, 30, "both agents read their power", interval_s=0.5)
    gauges = BudgetMetrics()
    gauges.update("site", PowerBudgetStatus(
        cap_watts=20.0, idle_watts=0.0, planned_watts=19.0, nodes=[NANO, ORIN], jobs=1,
        measured_watts=measured.watts,
        allocations=[BudgetAllocationStatus(namespace=fleet["namespace"], name="job-a",
                                            node=NANO, watts=6.0)]))
    port = free_ports(1)[0]
    server, thread = start_http_server(port, addr="127.0.0.1", registry=gauges.registry)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.shutdown()
        thread.join(timeout=5)


@pytest.fixture(scope="module")
def prometheus(prometheus_bin: str, fleet: dict[str, Any], budget_exporter: str,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("prometheus")
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s",
                   "scrape_timeout": "900ms"},
        "scrape_configs": [{
            "job_name": "edgetrain-node-agent",
            "static_configs": [{"targets": [f"127.0.0.1:{a.port}" for a in fleet["agents"]]}],
        }, {
            "job_name": "edgetrain-operator",
            "static_configs": [{"targets": [budget_exporter]}],
        }],
    }
    proc, url = run_prometheus(prometheus_bin, config, tmp)
    try:
        yield url
    finally:
        proc.kill()  # throwaway TSDB: no need for a clean shutdown
        proc.wait(timeout=10)


def run_prometheus(binary: str, config: dict[str, Any], tmp: Path,
                   ) -> tuple[subprocess.Popen[bytes], str]:
    """A Prometheus on a free loopback port with `config`, once it is ready."""
    port = free_ports(1)[0]
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
    with (tmp / "prometheus.log").open("wb") as log:
        proc = subprocess.Popen(
            [binary, f"--config.file={tmp / 'prometheus.yml'}",
             f"--storage.tsdb.path={tmp / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
             "--storage.tsdb.retention.time=1h", "--log.level=warn"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        if proc.poll() is not None:
            raise RuntimeError((tmp / "prometheus.log").read_text()[-2000:])
        try:
            return http_get(f"{url}/-/ready", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until(ready, 60, "prometheus ready", interval_s=0.25)
    except BaseException:
        proc.kill()
        raise
    return proc, url


def query(url: str, expr: str) -> list[dict[str, Any]]:
    resp = http_get(f"{url}/api/v1/query", params={"query": expr}, timeout=10).json()
    assert resp["status"] == "success", resp
    return list(resp["data"]["result"])


def test_prometheus_scrapes_both_agents(prometheus: str, fleet: dict[str, Any]) -> None:
    def both_up() -> bool:
        targets = http_get(f"{prometheus}/api/v1/targets").json()["data"]["activeTargets"]
        agents = [t for t in targets if t["labels"]["job"] == "edgetrain-node-agent"]
        # Both agents, and the operator's PowerBudget gauges.
        return len(agents) == 2 and len(targets) == 3 and all(
            t["health"] == "up" for t in targets)

    wait_until(both_up, 30, "both agents and the operator's gauges up", interval_s=0.5)
    nodes = {r["metric"]["node"] for r in query(prometheus, "edgetrain_power_total_watts")}
    assert nodes == {NANO, ORIN}
    info = query(prometheus, "edgetrain_node_info")
    assert {r["metric"]["device_model"] for r in info} == {"jetson-nano", "jetson-orin-nano"}
    assert all(r["metric"]["simulated"] == "true" for r in info)  # labelled as simulated


def test_every_dashboard_query_returns_data(prometheus: str, fleet: dict[str, Any]) -> None:
    queries = dashboard_queries()
    assert len(queries) >= 12
    pending = {(d, t, q) for d, t, q in queries}

    def all_have_data() -> bool:
        for item in sorted(pending):
            if query(prometheus, expand(item[2])):
                pending.discard(item)
        return not pending

    try:
        wait_until(all_have_data, 60, "data for every panel", interval_s=1.0)
    except TimeoutError:
        raise AssertionError("panels without data:\n" + "\n".join(
            f"  {d} / {t}: {q}" for d, t, q in sorted(pending))) from None
    # The guard acted on the hot job, and Prometheus saw it.
    steps = query(prometheus, 'sum by (training_job) (edgetrain_guard_stepdowns_total)')
    assert {r["metric"]["training_job"]: float(r["value"][1]) >= 1 for r in steps} == {
        "job-a": True}


def exported_names(fleet: dict[str, Any]) -> set[str]:
    out: set[str] = set()
    for agent in fleet["agents"]:
        for line in agent.metrics().splitlines():
            if line and not line.startswith("#"):
                out.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return out


def unexported(queries: list[tuple[str, str, str]], exported: set[str]) -> dict[str, str]:
    """Metric -> the panel that names it, for metrics nothing exports."""
    return {m: f"{d} / {t}" for d, t, q in queries for m in METRIC.findall(q)
            if m not in exported}


def test_the_metric_check_catches_a_bad_panel() -> None:
    bad = [("x.json", "typo", "sum(edgetrain_power_totl_watts)")]
    assert unexported(bad, {"edgetrain_power_total_watts"}) == {
        "edgetrain_power_totl_watts": "x.json / typo"}


def test_panels_only_reference_exported_metrics(fleet: dict[str, Any],
                                               budget_exporter: str) -> None:
    from edgetrain.node_agent.metrics import METRIC_NAMES

    # Counters with labels appear on their first increment (the guard's first step).
    exported = wait_until(lambda: (names := exported_names(fleet)) >= set(METRIC_NAMES)
                          and names, 30, "every documented metric exported", interval_s=0.5)
    for line in http_get(f"http://{budget_exporter}/metrics", timeout=5).text.splitlines():
        if line and not line.startswith("#"):
            exported.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    missing = unexported(dashboard_queries(), exported)
    assert not missing, f"dashboard panels reference metrics no component exports: {missing}"
