"""`edgetrain doctor`: the cluster as the operator sees it, one line per problem."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer


def doctor_command(
    kubeconfig: Annotated[Path | None, typer.Option(
        help="Kubeconfig of the cluster (default $KUBECONFIG, else ~/.kube/config).")] = None,
    context: Annotated[str | None, typer.Option(help="kubeconfig context.")] = None,
    namespace: Annotated[str | None, typer.Option(
        "--namespace", "-n", help="The operator's namespace (default: found by its labels in "
                                  "any namespace).")] = None,
) -> None:
    """List each node as the operator sees it (Jetson, GPU server or ignored, and why), the
    image each phase runs, the worker namespaces and their checkpoint claim; exit 1 with one
    line per problem."""
    from edgetrain.kube import KubeApiError, KubeClient, KubeconfigError, api_path
    from edgetrain.operator.doctor import (
        OPERATOR_SELECTOR,
        diagnose,
        operator_settings,
        render,
    )

    try:
        client = KubeClient.from_kubeconfig(kubeconfig, context)
    except KubeconfigError as exc:
        typer.echo(f"error: --kubeconfig: {exc}", err=True)
        raise typer.Exit(2) from None
    try:
        with client:
            nodes = client.get(api_path("v1", "nodes"))["items"]
            deployments = client.get(api_path("apps/v1", "deployments", namespace),
                                     labelSelector=OPERATOR_SELECTOR)["items"]
            settings, _, _ = operator_settings(deployments)
            sa = settings.worker_service_account
            have = {str(a["metadata"]["namespace"]) for a in client.get(
                api_path("v1", "serviceaccounts"), fieldSelector=f"metadata.name={sa}")["items"]}
            accounts = {ns: ns in have for ns in {*have, *settings.namespaces}}
            claims: dict[str, dict[str, Any] | None] = {}
            if settings.checkpoint_pvc:
                for ns in settings.namespaces or sorted(have):
                    claims[ns] = client.get_or_none(api_path(
                        "v1", "persistentvolumeclaims", ns, settings.checkpoint_pvc))
            runtimes = [str(r["metadata"]["name"]) for r in client.get(
                api_path("node.k8s.io/v1", "runtimeclasses"))["items"]]
    except KubeApiError as exc:
        typer.echo(f"error: cannot read the cluster at {client.server}: {exc}", err=True)
        raise typer.Exit(1) from None
    report = diagnose(nodes, deployments, accounts, claims, runtimes)
    for line in render(report):
        typer.echo(line)
    if report.problems:
        raise typer.Exit(1)
