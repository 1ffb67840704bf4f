"""`edgetrain operator` (kopf), `edgetrain crds` (generate the CRD), `edgetrain worker` (pods)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from edgetrain.api.io import write_text_atomic
from edgetrain.cli.common import exit_codes, stderr

REPO_CRD_DIRS = (Path("crds"), Path("charts/edgetrain/crds"))


def operator_command(
    kubeconfig: Annotated[
        Path | None, typer.Option(help="Kubeconfig; default $KUBECONFIG, else in-cluster.")
    ] = None,
    namespace: Annotated[
        list[str] | None,
        typer.Option("--namespace", "-n", help="Watch this namespace (repeat); default all."),
    ] = None,
    estimator_image: Annotated[str | None, typer.Option(
        help="Image of the estimate pods (GPU servers).")] = None,
    trainer_image: Annotated[str | None, typer.Option(
        help="Image of the profile and train pods (Jetsons).")] = None,
    server_selector: Annotated[
        str | None, typer.Option(help="Labels k=v[,k=v] every GPU server must carry besides "
                                      "nvidia.com/gpu or edgetrain.io/node-kind=server.")
    ] = None,
    retry_limit: Annotated[int | None, typer.Option(help="Retries per phase.")] = None,
    retry_backoff: Annotated[float | None, typer.Option(help="First retry delay (s).")] = None,
    poll_interval: Annotated[float | None, typer.Option(help="Reconcile period (s).")] = None,
    checkpoint_dir: Annotated[str | None, typer.Option(help="Shared checkpoint root.")] = None,
    checkpoint_pvc: Annotated[
        str | None, typer.Option(help="RWX PVC mounted at the checkpoint root.")
    ] = None,
    pin_frequency_in_pod: Annotated[
        bool | None,
        typer.Option(
            "--pin-frequency-in-pod/--node-agent-pins",
            help="Pass --gpu-freq to the trainer (only where no node agent runs).",
        ),
    ] = None,
    peering: Annotated[
        str | None, typer.Option(help="kopf peering name: one active replica (needs crds/).")
    ] = None,
    verbose: Annotated[bool, typer.Option(help="Log every reconcile with its duration.")] = False,
) -> None:
    """Run the PowerAwareTrainingJob operator (kopf) until interrupted.

    Settings come from EDGETRAIN_OPERATOR_* variables (docs/operator.md); flags override them.
    """
    import logging

    flags = {
        "NAMESPACES": ",".join(namespace) if namespace else None,
        "ESTIMATOR_IMAGE": estimator_image,
        "TRAINER_IMAGE": trainer_image,
        "SERVER_SELECTOR": server_selector,
        "RETRY_LIMIT": retry_limit,
        "RETRY_BACKOFF_S": retry_backoff,
        "POLL_INTERVAL_S": poll_interval,
        "CHECKPOINT_DIR": checkpoint_dir,
        "CHECKPOINT_PVC": checkpoint_pvc,
        "PIN_FREQUENCY_IN_POD": pin_frequency_in_pod,
        "PEERING": peering,
    }
    for name, value in flags.items():
        if value is not None:
            os.environ[f"EDGETRAIN_OPERATOR_{name}"] = str(value)
    if kubeconfig is not None:
        os.environ["KUBECONFIG"] = str(kubeconfig)
    from edgetrain.operator.settings import load_settings

    try:
        settings = load_settings()
    except ValueError as exc:
        stderr.print(f"error: {exc}", markup=False)
        raise typer.Exit(2) from None
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("urllib3").setLevel(logging.WARNING)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)  # a line per probe
    if verbose:
        logging.getLogger("edgetrain.operator.stats").setLevel(logging.DEBUG)
    from edgetrain.operator.runner import run_operator

    run_operator(settings)


def crds_command(
    output: Annotated[
        list[Path] | None,
        typer.Option("--output", "-o", help="Folder to write into (repeat); default crds/ and"
                     " charts/edgetrain/crds/."),
    ] = None,
    check: Annotated[
        bool, typer.Option(help="Exit 1 if a file differs from what would be generated.")
    ] = False,
) -> None:
    """Generate the PowerAwareTrainingJob CRD (and kopf's peering CRDs) from the models."""
    from edgetrain.api.crd_files import crd_files

    # Here, not at the top: the job's models and the board table it loads are not what
    # `edgetrain worker`, the wrapper of every pod, needs at its start.
    from edgetrain.pipeline.validate import check_output_path

    dirs = list(output) if output else list(REPO_CRD_DIRS)
    with exit_codes():
        for folder in dirs if not check else []:
            check_output_path(folder, "--output", folder=True)
    stale = []
    for folder in dirs:
        for name, text in crd_files().items():
            path = folder / name
            if check:
                if not path.is_file() or path.read_text(encoding="utf-8") != text:
                    stale.append(path)
                continue
            folder.mkdir(parents=True, exist_ok=True)
            write_text_atomic(path, text)
            typer.echo(f"wrote {path}")
    if stale:
        stderr.print("stale (run `make crds`): " + ", ".join(map(str, stale)), markup=False)
        raise typer.Exit(1)


def _pairs(values: list[str] | None, option: str) -> dict[str, str]:
    out = {}
    for item in values or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise typer.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint=option)
        out[key] = value
    return out


def worker_command(
    command: Annotated[list[str], typer.Argument(help="The workload command, after --.")],
    publish: Annotated[
        str | None, typer.Option(help="ConfigMap to write --file entries into on success.")
    ] = None,
    file: Annotated[list[str] | None, typer.Option(help="KEY=PATH (repeat).")] = None,
    label: Annotated[list[str] | None, typer.Option(help="KEY=VALUE label (repeat).")] = None,
    apply_as: Annotated[
        str | None,
        typer.Option(help="Publish by server-side apply as this field manager (one request;"
                     " writers of other keys never conflict) instead of adding missing keys."),
    ] = None,
    owner: Annotated[
        str | None,
        typer.Option(help="API_VERSION:KIND:NAME:UID of the published ConfigMap's controller."),
    ] = None,
    progress: Annotated[
        str | None, typer.Option(help="ConfigMap receiving the trainer's JSON progress.")
    ] = None,
    progress_interval: Annotated[float, typer.Option(help="Seconds between updates.")] = 1.0,
    hold: Annotated[bool, typer.Option(help="After success, wait for SIGTERM.")] = False,
    inject_failure: Annotated[
        str | None, typer.Option(help="Fail at once with this message (fault injection).")
    ] = None,
    hold_at_progress: Annotated[
        str | None,
        typer.Option(
            help="Pause the workload at its first progress line until this ConfigMap exists"
            " (fault injection)."
        ),
    ] = None,
    # readable=False on paths a pod's mounts give: click's check is access(2), i.e. the real
    # UID without capabilities, which refuses what a virtual node's non-root pod may read
    # (docs/cluster.md, "One deviation"); reading them says what is wrong instead.
    carry_from: Annotated[
        Path | None, typer.Option(help="Checkpoint folder of the previous run (re-plan).",
                                  readable=False)
    ] = None,
    carry_to: Annotated[Path | None, typer.Option(help="Weights file made from it.")] = None,
    pretrain: Annotated[
        str | None, typer.Option(help="Pretrain recipe JSON; its weights are passed on.")
    ] = None,
    sa_dir: Annotated[
        Path | None, typer.Option(help="Service-account mount (token, ca.crt).", readable=False)
    ] = None,
) -> None:
    """Run a workload in an operator pod and publish its results as ConfigMaps."""
    from edgetrain.operator.worker import parse_owner, run_worker

    try:
        owner_ref = parse_owner(owner) if owner else None
    except ValueError as exc:
        print(f"edgetrain worker: {exc}", file=sys.stderr)
        raise typer.Exit(2) from None
    code = run_worker(
        command,
        namespace=os.environ.get("POD_NAMESPACE", "default"),
        publish=publish,
        files={k: Path(v) for k, v in _pairs(file, "--file").items()},
        labels=_pairs(label, "--label"),
        apply_as=apply_as,
        owner=owner_ref,
        progress=progress,
        progress_interval_s=progress_interval,
        hold=hold,
        inject_failure=inject_failure,
        hold_at_progress=hold_at_progress,
        carry_from=carry_from,
        carry_to=carry_to,
        pretrain=json.loads(pretrain) if pretrain else None,
        sa_dir=sa_dir,
    )
    sys.stdout.flush()
    raise typer.Exit(code)
