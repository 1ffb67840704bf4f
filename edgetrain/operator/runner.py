"""Start kopf with the operator's handlers and settings."""

from __future__ import annotations

import logging
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from edgetrain.api.budget_crd import BUDGET_CRD_NAME
from edgetrain.api.crd import CRD_NAME
from edgetrain.kube import (
    KubeApiError,
    KubeClient,
    api_path,
    in_cluster,
    load_configuration,
    service_account_dir,
)
from edgetrain.operator.leader import LeaderElector, LeaseTiming, default_identity
from edgetrain.operator.settings import OperatorSettings

log = logging.getLogger("edgetrain.operator")


def ensure_peering(client: KubeClient, name: str, namespaces: list[str]) -> None:
    """kopf needs its peering object to exist: the cluster-wide one or one per namespace."""
    targets: list[tuple[str, dict[str, object]]] = []
    if namespaces:
        for ns in namespaces:
            targets.append((api_path("kopf.dev/v1", "kopfpeerings", ns), {
                "apiVersion": "kopf.dev/v1", "kind": "KopfPeering",
                "metadata": {"name": name, "namespace": ns}}))
    else:
        targets.append((api_path("kopf.dev/v1", "clusterkopfpeerings"), {
            "apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering",
            "metadata": {"name": name}}))
    for path, body in targets:
        try:
            client.create(path, body)
        except KubeApiError as exc:
            if exc.code != 409:
                raise RuntimeError(
                    f"cannot create the kopf peering object {name!r} ({exc}); apply"
                    " crds/kopf.dev_peerings.yaml first") from None


def lease_namespace(settings: OperatorSettings) -> str:
    """Where the Lease lives: the setting, else the pod's namespace, else `default`."""
    if settings.leader_election_namespace:
        return settings.leader_election_namespace
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    ns_file = service_account_dir() / "namespace"
    if in_cluster() and ns_file.is_file():
        return ns_file.read_text().strip()
    return "default"


class _Healthz(BaseHTTPRequestHandler):
    """/healthz of a standby replica (kopf serves it once this replica leads)."""

    def do_GET(self) -> None:  # the stdlib names the method
        ok = self.path.split("?")[0] == "/healthz"
        body = b"standby\n" if ok else b"not found\n"
        self.send_response(200 if ok else 404)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:  # a line per probe would bury the log
        return


def _stand_by(settings: OperatorSettings, stop: threading.Event) -> LeaderElector | None:
    """Block until this replica holds the Lease; serve /healthz meanwhile. None: stopped."""
    timing = LeaseTiming(settings.lease_duration_s, settings.renew_deadline_s,
                         settings.retry_period_s)
    # Each request must end well within the renew deadline.
    client = KubeClient(load_configuration(), timeout_s=max(1.0, timing.renew_deadline_s / 2))
    elector = LeaderElector(client, lease_namespace(settings), settings.lease_name,
                            default_identity(os.environ.get("POD_NAME")), timing)
    server = None
    if settings.health_port:
        server = ThreadingHTTPServer((settings.health_address, settings.health_port), _Healthz)
        threading.Thread(target=server.serve_forever, name="standby-healthz",
                         daemon=True).start()
    log.info("leader election: %s competes for lease %s/%s", elector.identity,
             elector.namespace, elector.name)
    try:
        return elector if elector.acquire(stop) else None
    finally:
        if server is not None:  # kopf binds the same port from here on
            server.shutdown()
            server.server_close()


def _exit_lost() -> None:
    """Leadership lost: stop acting at once. The restarted process stands by again."""
    log.error("exiting: another replica may take over the lease")
    for handler in logging.getLogger().handlers:
        handler.flush()
    os._exit(1)


def run_operator(settings: OperatorSettings) -> None:
    """Block running kopf until SIGINT/SIGTERM (with leader election: once this replica holds
    the Lease, and only while it does)."""
    import signal

    import kopf

    import edgetrain.operator.budget_handlers  # registers the budgets' handlers
    import edgetrain.operator.handlers  # noqa: F401 - registers the handlers

    with KubeClient.connect() as client:
        for name in (CRD_NAME, BUDGET_CRD_NAME):
            crd = api_path("apiextensions.k8s.io/v1", "customresourcedefinitions", name=name)
            if client.get_or_none(crd) is None:
                raise SystemExit(
                    f"error: CRD {name} is not installed; kubectl apply -f crds/ (or the chart)")
        if settings.peering:
            ensure_peering(client, settings.peering, settings.namespaces)
    elector = None
    stop = threading.Event()
    if settings.leader_election:
        previous = {sig: signal.signal(sig, lambda *_: stop.set())
                    for sig in (signal.SIGTERM, signal.SIGINT)}
        elector = _stand_by(settings, stop)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if elector is None:
            log.info("stopped while standing by")
            return
        elector.keep(stop, _exit_lost)
    log.info("edgetrain operator: namespaces=%s peering=%s leader=%s",
             settings.namespaces or "all", settings.peering or "standalone",
             elector.identity if elector else "no election")
    health = (f"http://{settings.health_address}:{settings.health_port}/healthz"
              if settings.health_port else None)
    if settings.metrics_port:
        from prometheus_client import start_http_server

        from edgetrain.operator.budget_metrics import BUDGET_METRICS

        # The acting replica only: a standby has no budgets to report.
        start_http_server(settings.metrics_port, addr=settings.health_address,
                          registry=BUDGET_METRICS.registry)
    try:
        kopf.run(
            liveness_endpoint=health,
            standalone=settings.peering is None,
            peering_name=settings.peering,
            clusterwide=not settings.namespaces,
            namespaces=settings.namespaces,
        )
    finally:
        stop.set()
        if elector is not None:
            elector.release()
