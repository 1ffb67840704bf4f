"""`edgetrain node-agent`: the DaemonSet process on each Jetson node."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from edgetrain.device.sysfs import ENV_SYSFS_ROOT
from edgetrain.kube import ENV_SERVICE_ACCOUNT_DIR, SERVICE_ACCOUNT_DIR


def node_agent_command(
    node_name: Annotated[str | None, typer.Option(
        "--node-name", envvar=["NODE_NAME", "EDGETRAIN_NODE_NAME"],
        help="This node (chart: spec.nodeName via the downward API).")] = None,
    # readable=False on the paths a pod's mounts give (as `edgetrain worker`'s): click's check
    # is access(2) with the real UID, which a non-root container may fail where it can read.
    sysfs_root: Annotated[Path | None, typer.Option(
        "--sysfs-root", envvar=ENV_SYSFS_ROOT, readable=False,
        help="Root holding sys/, proc/, etc/ ('/' on a Jetson; a twin's root otherwise).")
    ] = None,
    kubeconfig: Annotated[Path | None, typer.Option(
        "--kubeconfig", help="Kubeconfig (default: in-cluster ServiceAccount, then "
                             "$KUBECONFIG).")] = None,
    sa_dir: Annotated[Path | None, typer.Option(
        "--sa-dir", readable=False,
        help=f"ServiceAccount token/CA directory (default {SERVICE_ACCOUNT_DIR}, or"
             f" ${ENV_SERVICE_ACCOUNT_DIR})."
    )] = None,
    state_file: Annotated[Path, typer.Option(
        "--state-file", help="Where the held pin is persisted (hostPath in the chart).")
    ] = Path("/var/lib/edgetrain/node-agent-state.json"),
    metrics_address: Annotated[str, typer.Option(
        "--metrics-address", envvar="EDGETRAIN_METRICS_ADDRESS",
        help="Listen address of /metrics, /healthz, /readyz (chart: the pod IP).")
    ] = "127.0.0.1",
    metrics_port: Annotated[int, typer.Option("--metrics-port", help="0 picks a free port.")
                            ] = 9400,
    guard_window_s: Annotated[float, typer.Option(
        "--guard-window-s", help="Power must stay above the limit this long (window mean) "
                                 "before the guard steps down one level.")] = 30.0,
    sample_interval_s: Annotated[float, typer.Option(
        "--sample-interval-s", help="Power sampling period.")] = 0.1,
    tick_s: Annotated[float, typer.Option("--tick-s", help="Control-loop period.")] = 0.5,
    power_backend: Annotated[str, typer.Option(
        "--power-backend", help="auto (jtop if its socket is there), sysfs or jtop.")] = "auto",
    label_node: Annotated[bool, typer.Option(
        "--label-node/--no-label-node", help="Label/annotate the Node at start.")] = True,
    device_tree: Annotated[Path | None, typer.Option(
        "--device-tree", readable=False,
        help="The host's devicetree directory (model, compatible), read before "
             "<root>/proc/device-tree (a container's /sys/firmware is masked; the chart "
             "mounts the host's).")] = None,
    detect_only: Annotated[bool, typer.Option(
        "--detect-only", help="Read the board, label the Node with its device model (where it "
                              "is a Jetson edgetrain knows) and exit: the chart's detect "
                              "step on every arm64 node.")] = False,
    log_level: Annotated[str, typer.Option("--log-level")] = "INFO",
) -> None:
    """Pin the GPU frequency for annotated pods, guard their power limit, export metrics."""
    from edgetrain.kube import KubeApiError, KubeClient, KubeconfigError
    from edgetrain.node_agent.agent import AgentConfig, NodeAgent
    from edgetrain.node_agent.detect import detect_and_label

    logging.basicConfig(level=log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    node = node_name or os.environ.get("HOSTNAME")
    if not node:
        typer.echo("edgetrain node-agent: --node-name (or NODE_NAME) is required", err=True)
        raise typer.Exit(2)
    config = AgentConfig(
        node=node, state_file=state_file, sysfs_root=sysfs_root,
        metrics_address=metrics_address, metrics_port=metrics_port,
        guard_window_s=guard_window_s, sample_interval_s=sample_interval_s, tick_s=tick_s,
        power_backend=power_backend, label_node=label_node, device_tree=device_tree,
    )
    try:
        client = KubeClient.connect(kubeconfig, sa_dir=sa_dir)
    except KubeconfigError as exc:
        typer.echo(f"edgetrain node-agent: {exc}", err=True)
        raise typer.Exit(2) from None
    if detect_only:
        try:
            detect_and_label(client, node, sysfs_root, device_tree)
        except KubeApiError as exc:
            typer.echo(f"edgetrain node-agent --detect-only: cannot label {node}: {exc}",
                       err=True)
            raise typer.Exit(1) from None
        return
    agent = NodeAgent(config, client)
    try:
        agent.start()
    except Exception as exc:
        typer.echo(f"edgetrain node-agent: cannot start on {node}: {exc}", err=True)
        agent.stop()
        raise typer.Exit(1) from exc
    agent.run_forever()
