"""`edgetrain doctor`'s verdict on a cluster, from objects already read (pure): each node as the
operator sees it (Jetson, GPU server or ignored, and why), the image each phase would run, the
worker namespaces and their checkpoint claim, and one line per problem with its fix."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from edgetrain.api.keys import (
    ANNOTATION_DEVICE_TREE_MODEL,
    LABEL_DEVICE_MODEL,
    LABEL_NODE_AGENT_OPT_OUT,
    NODE_AGENT_DISABLED,
)
from edgetrain.kube import Obj
from edgetrain.operator import roles
from edgetrain.operator.phases import NodeInfo
from edgetrain.operator.settings import ENV_PREFIX, OperatorSettings, load_settings

OPERATOR_SELECTOR = "app.kubernetes.io/name=edgetrain,app.kubernetes.io/component=operator"


@dataclass(frozen=True)
class NodeView:
    """One node's line."""

    name: str
    arch: str
    kind: str  # jetson | server | ignored
    why: str
    ready: bool


@dataclass(frozen=True)
class NamespaceView:
    """One worker namespace: has it the worker ServiceAccount, and what of its claim."""

    name: str
    service_account: bool
    claim: str  # "Bound, ReadWriteMany", "missing", "-" (no claim configured)


@dataclass
class Report:
    """What `doctor` prints."""

    operator: str  # where the settings came from
    nodes: list[NodeView] = field(default_factory=list)
    images: list[tuple[str, str, str]] = field(default_factory=list)  # phase, image, platforms
    namespaces: list[NamespaceView] = field(default_factory=list)
    claim: str = ""
    problems: list[str] = field(default_factory=list)


def operator_settings(deployments: Sequence[Obj]) -> tuple[OperatorSettings, str, list[str]]:
    """The settings of the chart's operator Deployment (its EDGETRAIN_OPERATOR_* values), where
    they came from, and the problems met on the way (none found, several, not available)."""
    if not deployments:
        return (load_settings({}), "defaults (no operator found)",
                ["no edgetrain operator Deployment in the cluster (label"
                 f" {OPERATOR_SELECTOR}): install the chart (docs/install.md); the checks below"
                 " use the operator's defaults"])
    problems: list[str] = []
    dep = deployments[0]
    where = f"{dep['metadata']['namespace']}/{dep['metadata']['name']}"
    if len(deployments) > 1:
        others = ", ".join(f"{d['metadata']['namespace']}/{d['metadata']['name']}"
                           for d in deployments[1:])
        problems.append(f"several edgetrain operators ({where}, {others}): each acts on the"
                        " jobs it watches; keep one per namespace set (doctor reads the first)")
    status = dep.get("status") or {}
    if int(status.get("availableReplicas") or 0) < 1 and int(
            (dep.get("spec") or {}).get("replicas", 1) or 0) > 0:
        problems.append(f"operator {where} has no available replica: kubectl describe -n"
                        f" {dep['metadata']['namespace']} deploy/{dep['metadata']['name']}")
    env: dict[str, str] = {}
    for container in dep["spec"]["template"]["spec"].get("containers", []):
        for var in container.get("env") or []:
            if str(var.get("name", "")).startswith(ENV_PREFIX) and "value" in var:
                env[var["name"]] = str(var["value"])
    try:
        return load_settings(env), where, problems
    except ValueError as exc:
        return load_settings({}), where, [*problems, f"operator {where}: {exc}"]


def diagnose(nodes: Sequence[Obj], deployments: Sequence[Obj],
             service_accounts: Mapping[str, bool], claims: Mapping[str, Obj | None],
             runtime_classes: Sequence[str]) -> Report:
    """The report. `service_accounts`: namespace → has the worker ServiceAccount (every
    namespace where it exists, plus the watched ones); `claims`: namespace → its checkpoint
    claim (None: missing) for each worker namespace."""
    settings, where, problems = operator_settings(deployments)
    report = Report(operator=where, problems=problems)
    _nodes(report, nodes, settings)
    for phase, role in roles.PHASE_IMAGES.items():
        image, platforms = roles.image_of(role, settings)
        report.images.append((phase, image, ",".join(platforms)))
    _namespaces(report, settings, service_accounts, claims)
    runtime = settings.jetson_runtime_class
    if runtime and runtime not in runtime_classes:
        report.problems.append(
            f"RuntimeClass {runtime} (operator.settings.jetsonRuntimeClass) does not exist:"
            " profile and train pods would be refused; K3s creates `nvidia` where it finds"
            " nvidia-container-runtime, else apply examples/runtimeclass-nvidia.yaml")
    return report


def _nodes(report: Report, nodes: Sequence[Obj], settings: OperatorSettings) -> None:
    infos = []
    for node in sorted(nodes, key=lambda n: str(n["metadata"]["name"])):
        info = NodeInfo.of(node)
        infos.append(info)
        annotations = dict(node["metadata"].get("annotations") or {})
        role = roles.node_role(info, settings, annotations)
        report.nodes.append(NodeView(info.name, roles.node_arch(info) or "?", role.kind,
                                     role.why, info.schedulable))
        labels = info.label_map
        opted_out = labels.get(LABEL_NODE_AGENT_OPT_OUT) == NODE_AGENT_DISABLED
        if role.kind == "ignored" and not opted_out and roles.node_arch(info) == "arm64" and (
                ANNOTATION_DEVICE_TREE_MODEL not in annotations
                or roles.is_jetson_board(labels.get(LABEL_DEVICE_MODEL))):
            report.problems.append(f"node {info.name}: {role.why}")
        refusal = roles.image_refusal("trainer", info, settings) if role.kind == "jetson" \
            else None
        if refusal is not None:
            report.problems.append(refusal)
    jetsons = [v for v in report.nodes if v.kind == "jetson"]
    servers = [v for v in report.nodes if v.kind == "server"]
    if not jetsons:
        report.problems.append(
            "no node is a Jetson (edgetrain.io/node-kind=jetson and a device model, set by the"
            " chart's node agent on each arm64 Jetson): every job would end NoMatchingNode")
    elif not any(v.ready for v in jetsons):
        report.problems.append("no Jetson node is Ready: jobs wait, then end NoMatchingNode")
    if not servers:
        report.problems.append(
            "no GPU server (a node with nvidia.com/gpu from the NVIDIA device plugin, or labelled"
            " edgetrain.io/node-kind=server): estimate pods would stay Pending, then the job"
            " fails Unschedulable")
    refusal = roles.estimator_refusal(infos, settings)
    if refusal is not None:
        report.problems.append(refusal)


def _namespaces(report: Report, settings: OperatorSettings,
                service_accounts: Mapping[str, bool], claims: Mapping[str, Obj | None]) -> None:
    sa = settings.worker_service_account
    watched = settings.namespaces or sorted(n for n, has in service_accounts.items() if has)
    pvc = settings.checkpoint_pvc
    report.claim = pvc or ""
    if not watched:
        report.problems.append(
            f"no namespace has the worker ServiceAccount {sa}: set worker.namespaces (or"
            " worker.namespaceSelector) and helm upgrade; jobs elsewhere fail NoWorkerIdentity")
    for ns in watched:
        has = service_accounts.get(ns, False)
        claim = "-"
        if not has:
            report.problems.append(
                f"namespace {ns} is watched but has no ServiceAccount {sa}: add it to"
                " worker.namespaces and helm upgrade")
        if pvc:
            claim = _claim(report, ns, pvc, claims.get(ns))
        report.namespaces.append(NamespaceView(ns, has, claim))
    if not pvc:
        report.problems.append(
            "operator.settings.checkpointPvc is empty: training pods keep checkpoints on their"
            " node's disk, and a job moved to another node starts again from sample 0; give each"
            " worker namespace a ReadWriteMany claim (docs/install.md, \"Checkpoint storage\")")


def _claim(report: Report, ns: str, pvc: str, claim: Obj | None) -> str:
    if claim is None:
        report.problems.append(f"namespace {ns}: no PersistentVolumeClaim {pvc}"
                               " (operator.settings.checkpointPvc): training pods there would"
                               " stay ContainerCreating; create it ReadWriteMany")
        return "missing"
    phase = str((claim.get("status") or {}).get("phase") or "Pending")
    modes = list((claim.get("spec") or {}).get("accessModes") or [])
    if "ReadWriteMany" not in modes:
        report.problems.append(f"namespace {ns}: claim {pvc} is {','.join(modes) or 'without'}"
                               " access modes, not ReadWriteMany: a job moved to another node"
                               " could not mount its checkpoints")
    if phase != "Bound":
        report.problems.append(f"namespace {ns}: claim {pvc} is {phase}, not Bound: kubectl"
                               f" describe -n {ns} pvc/{pvc}")
    return f"{phase}, {','.join(modes)}"


def render(report: Report) -> list[str]:
    """The report as lines of text (columns aligned), problems last."""
    lines = [f"operator settings: {report.operator}", "", "nodes:"]
    rows = [("NAME", "ARCH", "ROLE", "READY", "WHY")] + [
        (n.name, n.arch, n.kind, "yes" if n.ready else "no", n.why) for n in report.nodes]
    lines += _table(rows)
    lines += ["", "images:", *_table([("PHASE", "IMAGE", "PLATFORMS"), *report.images])]
    lines += ["", f"worker namespaces (checkpoint claim: {report.claim or 'none'}):"]
    lines += _table([("NAMESPACE", "WORKER SA", "CLAIM")] + [
        (n.name, "yes" if n.service_account else "no", n.claim) for n in report.namespaces])
    lines.append("")
    if report.problems:
        lines += [f"problem: {p}" for p in report.problems]
    else:
        lines.append("no problems found")
    return lines


def _table(rows: Sequence[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
            for r in rows]
