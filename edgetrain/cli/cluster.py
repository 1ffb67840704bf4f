"""`edgetrain cluster up|down|status`: local Kubernetes whose nodes are real kubelets with
containerd (the Jetsons over device twins, arm64 under QEMU)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from edgetrain import __version__
from edgetrain.api.keys import (
    GPU_RESOURCE,
    LABEL_DEVICE_MODEL,
    LABEL_EMULATED_ARCH,
    LABEL_NODE_KIND,
)
from edgetrain.api.pod_security import DEFAULT_CHECKPOINT_DIR
from edgetrain.cluster import binaries, imagestore
from edgetrain.cluster.boards import parse_counts as _parse_counts
from edgetrain.cluster.boards import profile
from edgetrain.cluster.controlplane import SERVICE_CIDR, LocalCluster
from edgetrain.cluster.gpus import advertise_gpus
from edgetrain.cluster.hostnet import (
    NodeNetwork,
    cannot_run_kubelet,
    claim_network,
    remove_links,
)
from edgetrain.cluster.images import PLATFORM, import_project_images
from edgetrain.cluster.jetsons import ARCHES as JETSON_ARCHES
from edgetrain.cluster.jetsons import (
    JETSON_IMAGES,
    SERVER_IMAGES,
    JetsonFleet,
    prepare_shared_dir,
    teardown_jetsons,
)
from edgetrain.cluster.kwok import create_idle_nodes, wait_ready
from edgetrain.cluster.nodes import VNodeSpec, node_specs
from edgetrain.cluster.process import ComponentError
from edgetrain.cluster.realnode import (
    RealNode,
    kubelet_running,
    missing_binaries,
    server_labels,
    teardown,
)
from edgetrain.kube import KubeClient, Obj, node_ready

app = typer.Typer(
    help="A real local Kubernetes control plane; every node a real kubelet with containerd.",
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


REAL_SERVER_NAME = "gpu-server-0"


def _all_nodes(client: KubeClient) -> list[Obj]:
    return list(client.get("/api/v1/nodes")["items"])


def _nodes_table(nodes: list[Obj]) -> Table:
    table = Table(title="nodes")
    for col in ("name", "kind", "device model", "runtime", "arch", "ready"):
        table.add_column(col)
    idle = 0
    for n in sorted(nodes, key=lambda n: str(n["metadata"]["name"])):
        labels = n["metadata"].get("labels", {})
        if labels.get(LABEL_NODE_KIND) == "idle":
            idle += 1
            continue
        runtime = n.get("status", {}).get("nodeInfo", {}).get("containerRuntimeVersion", "")
        arch = labels.get("kubernetes.io/arch", "")
        if LABEL_EMULATED_ARCH in labels:
            arch += " (QEMU)"
        table.add_row(n["metadata"]["name"], labels.get(LABEL_NODE_KIND, ""),
                      labels.get(LABEL_DEVICE_MODEL, ""), runtime, arch,
                      "yes" if node_ready(n) else "no")
    if idle:
        table.add_row(f"(+{idle} kwok idle nodes)", "idle", "", "kwok", "", "")
    return table


def real_node_unavailable() -> str | None:
    """Why `cluster up` cannot make a real server node here (one line), or None."""
    reason = cannot_run_kubelet()
    if reason is None and missing_binaries():
        reason = (f"{', '.join(missing_binaries())} not built in {binaries.bin_dir()} "
                  "(`make cluster-bins`)")
    if reason is None and kubelet_running():
        reason = ("another cluster's real node runs on this host (a kubelet's host paths "
                  "allow one per host)")
    return reason


def real_jetsons_unavailable(arch: str) -> str | None:
    """Why this host cannot run namespaced nodes of `arch` (one line), or None."""
    reason = cannot_run_kubelet() or (
        f"{', '.join(missing_binaries())} not built in {binaries.bin_dir()} "
        "(`make cluster-bins`)" if missing_binaries() else None)
    qemu = Path("/proc/sys/fs/binfmt_misc/qemu-aarch64")
    if reason is None and arch == "arm64" and os.uname().machine != "aarch64" and not (
            qemu.exists() and qemu.read_text().startswith("enabled")):
        reason = "no arm64 emulation (`make container-engine` registers qemu-aarch64)"
    return reason


@app.command()
def up(
    jetson: Annotated[str, typer.Option(help="Jetson nodes, BOARD=N,...")] = "nano=1",
    server: Annotated[int, typer.Option(
        help="GPU-server nodes (amd64, each advertising simulated nvidia.com/gpu): the first "
             "in the host's namespaces where this host can run one, the others "
             "namespaced.")] = 1,
    real_server: Annotated[bool, typer.Option(
        help="Run the first server node in the host's namespaces where this host can "
             "(--no-real-server: namespaced).")] = True,
    images: Annotated[str | None, typer.Option(
        help="Project images to copy from podman into each server node's containerd "
             f"(default {','.join(SERVER_IMAGES)}).")] = None,
    idle: Annotated[int, typer.Option(help="Idle kwok nodes (scale).")] = 0,
    jetson_runtime: Annotated[str, typer.Option(
        help="real (the only runtime; auto means the same): every node a kubelet with "
             "containerd, each Jetson and each server beyond the first in namespaces of its "
             "own, the Jetsons over their device twins. A host that cannot run a kubelet "
             "cannot run the cluster (docs/install.md has a kind config).")] = "auto",
    jetson_arch: Annotated[str, typer.Option(
        help="Architecture of real Jetson nodes: arm64 (emulated with QEMU, as a Jetson is) "
             "or amd64 (native: for tests where emulation is too slow).")] = "arm64",
    jetson_images: Annotated[str, typer.Option(
        help="Project images to copy from podman into each real Jetson node (its "
             "architecture's member).")] = ",".join(JETSON_IMAGES),
    bare: Annotated[bool, typer.Option(
        help="Register every node with only the kubelet's labels (hostname, os, arch), as a "
             "fresh K3s node: edgetrain's labels then come from the chart's node agents "
             "(docs/install.md).")] = False,
    dir: DirOpt = None,
    timeout_s: Annotated[float, typer.Option(help="Readiness timeout per step.")] = 180.0,
) -> None:
    """Start the control plane and nodes in the background (idempotent)."""
    run_dir = (dir or default_dir()).resolve()
    counts = _counts(jetson)
    if jetson_runtime not in ("auto", "real"):
        err.print(f"--jetson-runtime {jetson_runtime!r}: use real (the virtual runtime is "
                  "gone: every node is a real kubelet; docs/cluster.md)", markup=False)
        raise typer.Exit(2)
    if jetson_arch not in JETSON_ARCHES:
        err.print(f"--jetson-arch {jetson_arch!r}: use {' or '.join(JETSON_ARCHES)}",
                  markup=False)
        raise typer.Exit(2)
    existing = LocalCluster.attach(run_dir)
    reused = existing is not None and existing.healthy()
    if not reused:
        teardown_jetsons(run_dir)  # nodes of a stale cluster: stop them before starting over
        teardown(run_dir)
        why_not = real_jetsons_unavailable(jetson_arch)
        if why_not is not None:
            err.print(f"cluster up: this host cannot run a kubelet: {why_not} (elsewhere: the "
                      "kind config in docs/install.md)", markup=False)
            raise typer.Exit(1)
    real = None
    if reused:
        real = "reuse" if (run_dir / "realnode.json").exists() else None
    elif server >= 1 and real_server:
        reason = real_node_unavailable()
        if reason is not None:
            out.print(f"{REAL_SERVER_NAME} namespaced: {reason}", markup=False)
        else:
            real = "new"
    # Every server the host's namespaces do not hold is namespaced.
    ns_servers = server - (1 if real else 0)
    ns_specs = [s for s in node_specs(counts, server, prefix="", bare=bare)
                if s.profile.kind == "jetson" or (
                    ns_servers and not (real and s.name == REAL_SERVER_NAME))]
    # Claimed (its interface made) at once: a cluster started beside this one takes another.
    net = claim_network() if not reused and (real == "new" or ns_specs) else None
    try:
        cluster = LocalCluster(run_dir, detached=True, service_cidr=(
            net.service_cidr if net is not None else SERVICE_CIDR)).start(timeout_s)
    except (ComponentError, binaries.BinaryMissingError) as exc:
        if net is not None:
            remove_links(net)
        err.print(f"[red]cluster up failed:[/red] {exc}")
        raise typer.Exit(1) from exc
    if not reused:
        # The local stand-in for the fleet's shared checkpoint storage (hostPath PV:
        # examples/checkpoint-storage-local.yaml), writable by the worker UID.
        prepare_shared_dir(Path(DEFAULT_CHECKPOINT_DIR))
    if images is None:
        images = ",".join(SERVER_IMAGES)
    if net is not None and real == "new":
        _start_real_node(cluster, net, images, timeout_s, bare, gpus=profile("server").gpus)
    if net is not None and ns_specs:
        _start_real_jetsons(cluster, net, ns_specs, jetson_arch, jetson_images, images,
                            timeout_s)
    if idle:
        with cluster.client() as client:
            create_idle_nodes(client, idle)
            took_s = wait_ready(client, idle, timeout_s)
        out.print(f"{idle} kwok idle nodes Ready in {took_s:.1f} s")
    with cluster.client() as client:
        out.print(_nodes_table(_all_nodes(client)))
    out.print(f"Kubernetes {binaries.K8S_VERSION} at {cluster.server}; logs in {run_dir / 'logs'}")
    out.print(f"export KUBECONFIG={cluster.kubeconfig}")


def _start_real_node(cluster: LocalCluster, net: NodeNetwork, images: str, timeout_s: float,
                     bare: bool = False, gpus: int = 0) -> None:
    node = RealNode(cluster.run_dir, REAL_SERVER_NAME, net, cluster.ports["apiserver"],
                    server_labels(REAL_SERVER_NAME, bare=bare))
    started = time.monotonic()
    try:
        wanted = [i.strip() for i in images.split(",") if i.strip()]
        # Linked from a prepared store before containerd starts, or imported once it runs.
        seeded = imagestore.seed(node.containerd_root, wanted, __version__, PLATFORM,
                                 lambda line: out.print(line, markup=False))
        images_s = time.monotonic() - started
        node.start(timeout_s)
        ready_s = time.monotonic() - started - images_s
        for name, proc in node.procs.items():
            cluster.adopt(name, proc)
        if gpus:
            with cluster.client() as client:
                advertise_gpus(client, REAL_SERVER_NAME, gpus, timeout_s)
        t_import = time.monotonic()
        how = "linked from an image store into" if seeded is not None else "imported into"
        for res in seeded if seeded is not None else import_project_images(
                node.ctr(), node.dir, __version__, wanted):
            if res.missing:
                out.print(f"image {res.ref}: {res.missing}", markup=False)
            else:
                out.print(f"image {res.ref}: {how} the real node's containerd", markup=False)
        images_s += time.monotonic() - t_import
    except (ComponentError, RuntimeError, OSError, TimeoutError) as exc:
        teardown(cluster.run_dir)
        cluster.stop()
        err.print(f"[red]cluster up failed: real node {REAL_SERVER_NAME}:[/red] {exc}")
        raise typer.Exit(1) from exc
    out.print(f"real node {REAL_SERVER_NAME} ({node.runtime}) Ready at {node.address} in "
              f"{ready_s:.1f} s (images: {images_s:.1f} s)"
              + (f", {gpus} simulated {GPU_RESOURCE}" if gpus else ""), markup=False)


def _start_real_jetsons(cluster: LocalCluster, net: NodeNetwork, specs: list[VNodeSpec],
                        arch: str, images: str, server_images: str, timeout_s: float) -> None:
    fleet = JetsonFleet(cluster.run_dir, net, cluster.ports["apiserver"], arch)
    try:
        with cluster.client() as client:
            results = fleet.start(specs, client, _names(images), __version__, timeout_s,
                                  lambda m: out.print(m, markup=False), _names(server_images),
                                  (DEFAULT_CHECKPOINT_DIR,))
        for name, (proc, runs) in fleet.all_procs().items():
            cluster.adopt(name, proc, runs)
    except (ComponentError, RuntimeError, OSError, TimeoutError) as exc:
        teardown_jetsons(cluster.run_dir)
        teardown(cluster.run_dir)
        cluster.stop()
        err.print(f"[red]cluster up failed: namespaced nodes:[/red] {exc}")
        raise typer.Exit(1) from exc
    for res in results:
        where = "in the namespaced nodes' containerd"
        out.print(f"image {res.ref}: {res.missing or where}",
                  markup=False)


def _names(images: str) -> list[str]:
    return [i.strip() for i in images.split(",") if i.strip()]


@app.command()
def down(dir: DirOpt = None) -> None:
    """Stop everything `cluster up` started and remove what its real node left (idempotent)."""
    run_dir = (dir or default_dir()).resolve()
    had_jetsons = teardown_jetsons(run_dir, log=lambda m: out.print(m, markup=False))
    had_node = teardown(run_dir, log=lambda m: out.print(m, markup=False)) or had_jetsons
    cluster = LocalCluster.attach(run_dir)
    if cluster is None:
        if not had_node:
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
    out.print(f"RSS total (control plane, nodes, relay): {sum(rss.values()) / 2**20:.0f} MiB")
    if cluster.healthy():
        with cluster.client() as client:
            out.print(_nodes_table(_all_nodes(client)))
    out.print(f"export KUBECONFIG={cluster.kubeconfig}")
