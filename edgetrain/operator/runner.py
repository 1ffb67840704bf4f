"""Start kopf with the operator's handlers and settings."""

from __future__ import annotations

import logging

from edgetrain.api.crd import CRD_NAME
from edgetrain.kube import KubeApiError, KubeClient, api_path
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


def run_operator(settings: OperatorSettings) -> None:
    """Block running kopf until SIGINT/SIGTERM."""
    import kopf

    import edgetrain.operator.handlers  # noqa: F401 - registers the handlers

    with KubeClient.connect() as client:
        crd = api_path("apiextensions.k8s.io/v1", "customresourcedefinitions", name=CRD_NAME)
        if client.get_or_none(crd) is None:
            raise SystemExit(
                f"error: CRD {CRD_NAME} is not installed; kubectl apply -f crds/ (or the chart)")
        if settings.peering:
            ensure_peering(client, settings.peering, settings.namespaces)
    log.info("edgetrain operator: namespaces=%s peering=%s",
             settings.namespaces or "all", settings.peering or "standalone")
    health = (f"http://{settings.health_address}:{settings.health_port}/healthz"
              if settings.health_port else None)
    kopf.run(
        liveness_endpoint=health,
        standalone=settings.peering is None,
        peering_name=settings.peering,
        clusterwide=not settings.namespaces,
        namespaces=settings.namespaces,
    )
