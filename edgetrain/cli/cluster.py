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

from edgetrain import __version__
from edgetrain.api.keys import (
    GPU_RESOURCE,
    LABEL_DEVICE_MODEL,
    LABEL_EMULATED_ARCH,
    LABEL_NODE_KIND,
)
from edgetrain.api.pod_security import DEFAULT_CHECKPOINT_DIR, WORKER_UID
from edgetrain.cluster import binaries
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
from edgetrain.cluster.images import CORE_IMAGES, import_project_images
from edgetrain.cluster.jetsons import ARCHES as JETSON_ARCHES
from edgetrain.cluster.jetsons import JETSON_IMAGES, SERVER_IMAGES, JetsonFleet, teardown_jetsons
from edgetrain.cluster.jetsons import STATE_FILE as JETSONS_STATE
from edgetrain.cluster.kwok import create_idle_nodes, wait_ready
from edgetrain.cluster.nodes import VNodeSpec, node_specs
from edgetrain.cluster.pki import Pki
from edgetrain.cluster.process import ComponentError, ManagedProcess
from edgetrain.cluster.realnode import (
    RealNode,
    kubelet_running,
    missing_binaries,
    server_labels,
    teardown,
)
from edgetrain.cluster.vnode import VNodeAgent, prepare_shared_dir
from edgetrain.kube import KubeClient, KubeconfigError, Obj, node_ready, node_schedulable

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


REAL_SERVER_NAME = "gpu-server-0"


VNODE_PREFIX = "vnode"


def _virtual_nodes(client: KubeClient) -> list[Obj]:
    """The nodes `cluster up`'s vnodes process runs, by name: bare ones carry no label of ours."""
    return [n for n in client.get("/api/v1/nodes")["items"]
            if str(n["metadata"]["name"]).startswith(f"{VNODE_PREFIX}-")]


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
        help="GPU-server nodes (amd64, each advertising simulated nvidia.com/gpu where real): "
             "the first in the host's namespaces where this host can run one, the others "
             "namespaced; with --jetson-runtime virtual, the others virtual.")] = 1,
    real_server: Annotated[bool, typer.Option(
        help="Run the first server node in the host's namespaces where this host can "
             "(--no-real-server: namespaced with a real runtime, virtual with a virtual "
             "one).")] = True,
    images: Annotated[str | None, typer.Option(
        help="Project images to copy from podman into each real server node's containerd "
             f"(default {','.join(SERVER_IMAGES)} with a real runtime, "
             f"{','.join(CORE_IMAGES)} with a virtual one).")] = None,
    idle: Annotated[int, typer.Option(help="Idle kwok nodes (scale).")] = 0,
    jetson_runtime: Annotated[str, typer.Option(
        help="real: every node a kubelet with containerd (each Jetson and each server beyond "
             "the first in namespaces of its own, the Jetsons over their device twins); "
             "virtual: the Jetsons' pods as local processes (docs/cluster.md); auto: real "
             "where this host can, else virtual.")] = "auto",
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
    if jetson_runtime not in ("auto", "real", "virtual"):
        err.print(f"--jetson-runtime {jetson_runtime!r}: use auto, real or virtual",
                  markup=False)
        raise typer.Exit(2)
    if jetson_arch not in JETSON_ARCHES:
        err.print(f"--jetson-arch {jetson_arch!r}: use {' or '.join(JETSON_ARCHES)}",
                  markup=False)
        raise typer.Exit(2)
    existing = LocalCluster.attach(run_dir)
    reused = existing is not None and existing.healthy()
    if reused:
        real_runtime = (run_dir / JETSONS_STATE).exists()
    else:
        teardown_jetsons(run_dir)  # nodes of a stale cluster: stop them before starting over
        teardown(run_dir)
        why_not = real_jetsons_unavailable(jetson_arch) if jetson_runtime != "virtual" else None
        if why_not is not None and jetson_runtime == "real":
            err.print(f"--jetson-runtime real: this host cannot run a kubelet: {why_not}",
                      markup=False)
            raise typer.Exit(1)
        if why_not is not None:
            out.print(f"virtual Jetsons and servers: this host cannot run a kubelet: "
                      f"{why_not}", markup=False)
        real_runtime = jetson_runtime != "virtual" and why_not is None
    real = None
    if reused:
        real = "reuse" if (run_dir / "realnode.json").exists() else None
    elif server >= 1 and real_server:
        reason = real_node_unavailable()
        if reason is not None and not real_runtime:
            out.print(f"server node virtual: this host cannot run a kubelet: {reason}",
                      markup=False)
        elif reason is not None:
            out.print(f"{REAL_SERVER_NAME} namespaced: {reason}", markup=False)
        else:
            real = "new"
    # With a real runtime every server the host's namespaces do not hold is namespaced.
    ns_servers = server - (1 if real else 0) if real_runtime else 0
    ns_specs = [s for s in node_specs(counts if real_runtime else {}, server, prefix="",
                                      bare=bare)
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
    virtual_servers = 0 if real_runtime else server - (1 if real else 0)
    virtual_jetsons = "" if real_runtime else jetson
    expected = (0 if real_runtime else sum(counts.values())) + virtual_servers
    vnodes = cluster.components.get("vnodes")
    if expected and (vnodes is None or not vnodes.alive()):
        argv = [sys.executable, "-m", "edgetrain", "vnodes", "--kubeconfig",
                str(cluster.kubeconfig), "--cluster-pki", str(cluster.pki.dir),
                "--jetson", virtual_jetsons, "--server", str(virtual_servers),
                "--prefix", VNODE_PREFIX, "--work-dir", str(run_dir / "vnodes"),
                *(["--bare"] if bare else [])]
        proc = ManagedProcess("vnodes", argv, cluster.log_path("vnodes"), detached=True).start()
        cluster.adopt("vnodes", proc)
        with cluster.client() as client:
            deadline = time.monotonic() + timeout_s
            while True:
                proc.check()
                nodes = _virtual_nodes(client)
                if sum(node_schedulable(n) for n in nodes) >= expected:
                    break
                if time.monotonic() > deadline:
                    err.print(f"[red]virtual nodes not Ready after {timeout_s:.0f} s[/red]; "
                              f"see {proc.log_path}")
                    raise typer.Exit(1)
                time.sleep(0.5)
    if real_runtime and not reused:
        # The local stand-in for the fleet's shared checkpoint storage (hostPath PV:
        # examples/checkpoint-storage-local.yaml), writable by the worker UID.
        prepare_shared_dir(Path(DEFAULT_CHECKPOINT_DIR))
    if images is None:
        images = ",".join(SERVER_IMAGES if real_runtime else CORE_IMAGES)
    if net is not None and real == "new":
        # Its simulated GPUs only beside real Jetsons: with virtual ones the estimate pods
        # stay on the virtual servers (the real node holds no estimator image then).
        _start_real_node(cluster, net, images, timeout_s, bare,
                         gpus=profile("server").gpus if real_runtime else 0)
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
        node.start(timeout_s)
        ready_s = time.monotonic() - started
        for name, proc in node.procs.items():
            cluster.adopt(name, proc)
        if gpus:
            with cluster.client() as client:
                advertise_gpus(client, REAL_SERVER_NAME, gpus, timeout_s)
        wanted = [i.strip() for i in images.split(",") if i.strip()]
        for res in import_project_images(node.ctr(), node.dir, __version__, wanted):
            if res.missing:
                out.print(f"image {res.ref}: {res.missing}", markup=False)
            else:
                out.print(f"image {res.ref}: imported into the real node's containerd",
                          markup=False)
    except (ComponentError, RuntimeError, OSError, TimeoutError) as exc:
        teardown(cluster.run_dir)
        cluster.stop()
        err.print(f"[red]cluster up failed: real node {REAL_SERVER_NAME}:[/red] {exc}")
        raise typer.Exit(1) from exc
    out.print(f"real node {REAL_SERVER_NAME} ({node.runtime}) Ready at {node.address} in "
              f"{ready_s:.1f} s (images: {time.monotonic() - started - ready_s:.1f} s)"
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
        out.print(f"image {res.ref}: {res.missing or 'imported into the namespaced nodes'}",
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
    shared_dir: Annotated[list[Path] | None, typer.Option(
        help="A host directory the pods share, made writable by the worker UID "
             f"{WORKER_UID} (repeatable; default the operator's checkpoint root "
             f"{DEFAULT_CHECKPOINT_DIR}).")] = None,
    preload: Annotated[bool, typer.Option(
        help="Fork `edgetrain` containers from one interpreter that imported torch (6 s less "
             "per pod); --no-preload starts each as a new process.")] = True,
    bare: Annotated[bool, typer.Option(
        help="Register the nodes with only hostname, os and arch labels (a fresh K3s node); "
             "the chart's node agents label the Jetsons.")] = False,
) -> None:
    """Attach virtual Jetson nodes to a cluster (ours, kind, k3s) and run their pods locally."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        client = KubeClient.from_kubeconfig(kubeconfig, context)
    except KubeconfigError as exc:
        err.print(f"[red]{exc}[/red]")
        raise typer.Exit(2) from exc
    specs = node_specs(_counts(jetson), server, prefix, bare=bare)
    for path in shared_dir or []:
        try:
            prepare_shared_dir(path)
        except OSError as exc:
            err.print(f"[red]--shared-dir {path}: {exc.strerror or exc}[/red]")
            raise typer.Exit(2) from exc
    agent = VNodeAgent(
        client, specs, (work_dir or Path.home() / ".cache" / "edgetrain" / "vnodes").resolve(),
        restart_backoff_s=restart_backoff_s, delete_nodes_on_stop=not keep_nodes,
        cluster_ca=Pki(cluster_pki) if cluster_pki is not None else None,
        shared_dirs=shared_dir or (Path(DEFAULT_CHECKPOINT_DIR),), preload_pods=preload,
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
