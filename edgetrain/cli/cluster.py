"""`edgetrain cluster up|down|status` and `edgetrain vnodes`: local Kubernetes with virtual
Jetson nodes, or virtual Jetson nodes attached to any cluster."""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from edgetrain.api.keys import LABEL_DEVICE_MODEL, LABEL_NODE_KIND, LABEL_VIRTUAL
from edgetrain.cluster import binaries
from edgetrain.cluster.boards import parse_counts as _parse_counts
from edgetrain.cluster.controlplane import LocalCluster
from edgetrain.cluster.kwok import create_idle_nodes, wait_ready
from edgetrain.cluster.nodes import node_specs
from edgetrain.cluster.pki import Pki
from edgetrain.cluster.process import ComponentError, ManagedProcess
from edgetrain.cluster.vnode import VNodeAgent
from edgetrain.kube import KubeClient, KubeconfigError, Obj, node_ready

app = typer.Typer(
    help="A real local Kubernetes control plane with virtual Jetson nodes.",
    no_args_is_help=True,
)
out = Console()
err = Console(stderr=True)


def default_dir() -> Path:
    """$EDGETRAIN_CLUSTER_DIR or ~/.cache/edgetrain/cluster."""
    env = os.environ.get("EDGETRAIN_CLUSTER_DIR")
    return Path(env) if env else Path.home() / ".cache" / "edgetrain" / "cluster"


DirOpt = Annotated[
    Path | None, typer.Option("--dir", help="Run directory (default ~/.cache/edgetrain/cluster).")
]


def _counts(text: str) -> dict[str, int]:
    try:
        return _parse_counts(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc


def _virtual_nodes(client: KubeClient) -> list[Obj]:
    return list(client.get("/api/v1/nodes", labelSelector=f"{LABEL_VIRTUAL}=true")["items"])


def _nodes_table(nodes: list[Obj]) -> Table:
    table = Table(title="nodes")
    for col in ("name", "kind", "device model", "ready"):
        table.add_column(col)
    idle = 0
    for n in sorted(nodes, key=lambda n: str(n["metadata"]["name"])):
        labels = n["metadata"].get("labels", {})
        if labels.get(LABEL_NODE_KIND) == "idle":
            idle += 1
            continue
        table.add_row(n["metadata"]["name"], labels.get(LABEL_NODE_KIND, ""),
                      labels.get(LABEL_DEVICE_MODEL, ""), "yes" if node_ready(n) else "no")
    if idle:
        table.add_row(f"(+{idle} kwok idle nodes)", "idle", "", "")
    return table


@app.command()
def up(
    jetson: Annotated[str, typer.Option(help="Virtual Jetson nodes, BOARD=N,...")] = "nano=1",
    server: Annotated[int, typer.Option(help="Virtual GPU-server nodes.")] = 1,
    idle: Annotated[int, typer.Option(help="Idle kwok nodes (scale).")] = 0,
    dir: DirOpt = None,
    timeout_s: Annotated[float, typer.Option(help="Readiness timeout per step.")] = 180.0,
) -> None:
    """Start the control plane and virtual nodes in the background (idempotent)."""
    run_dir = (dir or default_dir()).resolve()
    counts = _counts(jetson)
    try:
        cluster = LocalCluster(run_dir, detached=True).start(timeout_s)
    except (ComponentError, binaries.BinaryMissingError) as exc:
        err.print(f"[red]cluster up failed:[/red] {exc}")
        raise typer.Exit(1) from exc
    expected = sum(counts.values()) + server
    vnodes = cluster.components.get("vnodes")
    if vnodes is None or not vnodes.alive():
        argv = [sys.executable, "-m", "edgetrain", "vnodes", "--kubeconfig",
                str(cluster.kubeconfig), "--cluster-pki", str(cluster.pki.dir),
                "--jetson", jetson, "--server", str(server),
                "--work-dir", str(run_dir / "vnodes")]
        proc = ManagedProcess("vnodes", argv, cluster.log_path("vnodes"), detached=True).start()
        cluster.adopt("vnodes", proc)
        with cluster.client() as client:
            deadline = time.monotonic() + timeout_s
            while True:
                proc.check()
                nodes = [n for n in _virtual_nodes(client)
                         if n["metadata"]["labels"].get(LABEL_NODE_KIND) != "idle"]
                if sum(node_ready(n) for n in nodes) >= expected:
                    break
                if time.monotonic() > deadline:
                    err.print(f"[red]virtual nodes not Ready after {timeout_s:.0f} s[/red]; "
                              f"see {proc.log_path}")
                    raise typer.Exit(1)
                time.sleep(0.5)
    if idle:
        with cluster.client() as client:
            create_idle_nodes(client, idle)
            took_s = wait_ready(client, idle, timeout_s)
        out.print(f"{idle} kwok idle nodes Ready in {took_s:.1f} s")
    with cluster.client() as client:
        out.print(_nodes_table(_virtual_nodes(client)))
    out.print(f"Kubernetes {binaries.K8S_VERSION} at {cluster.server}; logs in {run_dir / 'logs'}")
    out.print(f"export KUBECONFIG={cluster.kubeconfig}")


@app.command()
def down(dir: DirOpt = None) -> None:
    """Stop everything `cluster up` started (idempotent)."""
    run_dir = (dir or default_dir()).resolve()
    cluster = LocalCluster.attach(run_dir)
    if cluster is None:
        out.print(f"no cluster running in {run_dir}")
        return
    cluster.stop()
    out.print(f"stopped the cluster in {run_dir}")


@app.command()
def kubeconfig(dir: DirOpt = None) -> None:
    """Print the path of the local cluster's admin kubeconfig (for `export KUBECONFIG=...`)."""
    run_dir = (dir or default_dir()).resolve()
    cluster = LocalCluster.attach(run_dir)
    if cluster is None:
        err.print(f"no cluster running in {run_dir}: run `edgetrain cluster up` first",
                  markup=False)
        raise typer.Exit(1)
    typer.echo(str(cluster.kubeconfig))


@app.command()
def status(dir: DirOpt = None) -> None:
    """Components (pid, memory) and nodes of the local cluster."""
    run_dir = (dir or default_dir()).resolve()
    cluster = LocalCluster.attach(run_dir)
    if cluster is None:
        out.print(f"no cluster running in {run_dir}")
        raise typer.Exit(1)
    table = Table(title=f"edgetrain cluster ({binaries.K8S_VERSION}) in {run_dir}")
    for col in ("component", "pid", "alive", "RSS MiB", "log"):
        table.add_column(col)
    rss = cluster.memory_rss_bytes()
    for name, comp in cluster.components.items():
        table.add_row(name, str(comp.pid), "yes" if comp.alive() else "[red]no[/red]",
                      f"{rss.get(name, 0) / 2**20:.0f}", str(comp.log))
    out.print(table)
    out.print(f"RSS total (control plane + vnodes agent): {sum(rss.values()) / 2**20:.0f} MiB")
    if cluster.healthy():
        with cluster.client() as client:
            out.print(_nodes_table(_virtual_nodes(client)))
    out.print(f"export KUBECONFIG={cluster.kubeconfig}")


def vnodes(
    kubeconfig: Annotated[Path | None, typer.Option(
        help="Cluster to attach to (default $KUBECONFIG or ~/.kube/config).")] = None,
    context: Annotated[str | None, typer.Option(help="kubeconfig context.")] = None,
    jetson: Annotated[str, typer.Option(help="Virtual Jetson nodes, BOARD=N,...")] = "nano=1",
    server: Annotated[int, typer.Option(help="Virtual GPU-server nodes.")] = 0,
    prefix: Annotated[str, typer.Option(help="Node name prefix.")] = "vnode",
    work_dir: Annotated[Path | None, typer.Option(
        help="Where twins, pod dirs and logs live (default ~/.cache/edgetrain/vnodes).")] = None,
    keep_nodes: Annotated[bool, typer.Option(help="Leave the Nodes registered on exit.")] = False,
    restart_backoff_s: Annotated[float, typer.Option(
        help="First restart back-off (the kubelet uses 10 s).")] = 10.0,
    cluster_pki: Annotated[Path | None, typer.Option(
        help="The cluster's PKI dir (ca.crt, ca.key): kubelet endpoints get certificates "
             "the API server trusts. Without it they are self-signed.")] = None,
) -> None:
    """Attach virtual Jetson nodes to a cluster (ours, kind, k3s) and run their pods locally."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        client = KubeClient.from_kubeconfig(kubeconfig, context)
    except KubeconfigError as exc:
        err.print(f"[red]{exc}[/red]")
        raise typer.Exit(2) from exc
    specs = node_specs(_counts(jetson), server, prefix)
    agent = VNodeAgent(
        client, specs, (work_dir or Path.home() / ".cache" / "edgetrain" / "vnodes").resolve(),
        restart_backoff_s=restart_backoff_s, delete_nodes_on_stop=not keep_nodes,
        cluster_ca=Pki(cluster_pki) if cluster_pki is not None else None,
    )
    try:
        agent.start()
        agent.wait_ready()
    except Exception as exc:
        agent.stop()
        err.print(f"[red]vnodes failed to start:[/red] {exc}")
        raise typer.Exit(1) from exc
    out.print(f"{len(specs)} virtual node(s) Ready on {client.server}: "
              + ", ".join(s.name for s in specs))
    agent.run_forever()
