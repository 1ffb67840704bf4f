"""`edgetrain pretrain | estimate | profile | train`: the real-PyTorch workloads of a job.

PyTorch is imported inside each command so that light commands (`plan`) start fast.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from edgetrain.api.efficiency import write_efficiency
from edgetrain.api.io import write_text_atomic
from edgetrain.api.plan import PowerMetric
from edgetrain.api.training import LrScaling, OptimizerName, OptimizerSpec, Precision
from edgetrain.cli.common import exit_codes, stderr, stdout
from edgetrain.pipeline.validate import check_output_path, check_workload_options
from edgetrain.planner import PlanInputError
from edgetrain.workloads.progress import Reporter

if TYPE_CHECKING:
    from edgetrain.workloads.device_session import ClockRequest, ModeRequest


def parse_int_list(text: str, option: str) -> list[int]:
    """'4,8,16' → [4, 8, 16], with an error naming the option."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise PlanInputError(f"{option} must be comma-separated integers, got '{text}'") from None
    if not values:
        raise PlanInputError(f"{option} is empty")
    return values


ModelOpt = Annotated[str, typer.Option(help="Architecture: resnet18, resnet8, mobilenetv2, …")]
JsonProgressOpt = Annotated[
    bool | None,
    typer.Option(
        "--json-progress/--bars", help="JSON lines on stdout (default when not a terminal)."
    ),
]


DeviceOpt = Annotated[
    str,
    typer.Option(help="auto (CUDA when present), cpu, cuda or cuda:N.", show_default=True),
]
PrecisionOpt = Annotated[
    str,
    typer.Option(help="fp32 (default: comparable results), fp16 (CUDA) or bf16 (autocast)."),
]


def check_device(device: str, precision: str) -> tuple[str, Precision]:
    """Fail early (exit 2, one line, nothing written) on a device or precision not present here."""
    from edgetrain.workloads.accel import resolve

    accel = resolve(device, precision)
    return device.strip().lower(), accel.precision


def check_sysfs_root(root: Path | None) -> None:
    """--sysfs-root must be a folder (a Jetson's / or a twin's tree)."""
    if root is not None and not root.is_dir():
        raise PlanInputError(
            f"--sysfs-root {root} is not a folder (a Jetson's / or a device twin's tree)"
        )


def _optimizer(name: OptimizerName, lr: float, ref: int, scaling: LrScaling) -> OptimizerSpec:
    return OptimizerSpec(name=name, learning_rate=lr, reference_batch_size=ref, scaling=scaling)


def pretrain_command(
    model: ModelOpt,
    dataset: Annotated[str, typer.Option(help="Data set to pretrain on (e.g. fashion-mnist).")],
    samples: Annotated[int, typer.Option(min=1, help="Training samples to run.")] = 20_000,
    batch_size: Annotated[int, typer.Option(min=1)] = 64,
    learning_rate: Annotated[float, typer.Option(min=0.0)] = 2e-3,
    seed: int = 0,
    dataset_limit: Annotated[int | None, typer.Option(help="Use a fixed subset.")] = None,
    device: DeviceOpt = "auto",
    precision: PrecisionOpt = "fp32",
    json_progress: JsonProgressOpt = None,
) -> None:
    """Pretrain a model and cache the weights by recipe hash; prints the weights path."""
    with exit_codes():
        check_workload_options(model, dataset, [batch_size], dataset_limit)
        from edgetrain.workloads.weights import PretrainSpec, describe, pretrain

        spec = PretrainSpec(
            model=model,
            dataset=dataset,
            samples=samples,
            batch_size=batch_size,
            optimizer=OptimizerSpec(learning_rate=learning_rate, reference_batch_size=batch_size),
            seed=seed,
            dataset_limit=dataset_limit,
        )
        device, prec = check_device(device, precision)
        with Reporter(json_lines=json_progress) as reporter:
            path = pretrain(spec, reporter, device=device, precision=prec)
    info = describe(path)
    stderr.print(f"weights: {path} (test accuracy {info.get('test_accuracy', float('nan')):.3f})")
    typer.echo(str(path))


def estimate_command(
    model: ModelOpt,
    dataset: Annotated[str, typer.Option(help="Proxy data set (e.g. digits, mnist).")],
    batch_sizes: Annotated[str, typer.Option(help="Comma-separated batch sizes.")],
    target_accuracy: Annotated[float, typer.Option(min=0.0, max=1.0)],
    output: Annotated[Path, typer.Option("--output", "-o", help="Efficiency JSON to write.")],
    weights: Annotated[
        Path | None, typer.Option(help="Starting weights (edgetrain pretrain).", readable=False)
    ] = None,
    optimizer: OptimizerName = OptimizerName.adam,
    learning_rate: Annotated[float, typer.Option(help="At the reference batch size.")] = 5e-4,
    reference_batch_size: int = 128,
    lr_scaling: LrScaling = LrScaling.sqrt,
    sample_budget: Annotated[int, typer.Option(min=1)] = 50_000,
    eval_interval: Annotated[int, typer.Option(min=1, help="Evaluate every N samples.")] = 512,
    eval_samples: Annotated[int, typer.Option(min=1, help="Test samples per evaluation.")] = 2000,
    seeds: Annotated[str, typer.Option(help="Comma-separated seeds; the median is kept.")] = "0",
    dataset_limit: Annotated[int | None, typer.Option(help="Use a fixed subset.")] = None,
    device: DeviceOpt = "auto",
    precision: PrecisionOpt = "fp32",
    parallel: Annotated[
        int,
        typer.Option(
            min=0,
            help="Runs side by side (processes); 0: as many as free CUDA memory holds, 1 on CPU.",
        ),
    ] = 0,
    run_index: Annotated[
        int | None,
        typer.Option(
            min=0,
            help="Train only run i of (batch size × seed) and write its part (one completion of"
            " the operator's Indexed Job); needs --part-of.",
        ),
    ] = None,
    part_of: Annotated[
        str | None,
        typer.Option(help="The tag of the estimate the part belongs to (<cache key>/<Job uid>)."),
    ] = None,
    json_progress: JsonProgressOpt = None,
) -> None:
    """Train each batch size to the target on the proxy set; write the efficiency vector.

    With --run-index, train one (batch size, seed) and write that run's part instead; the
    operator merges the parts into the vector. Exit codes: 0 written, 2 bad input or no batch
    size reached the target (raise the budget or lower the target; the message gives the best
    accuracy per batch size).
    """
    with exit_codes():
        sizes = parse_int_list(batch_sizes, "--batch-sizes")
        seed_list = parse_int_list(seeds, "--seeds")
        check_workload_options(model, dataset, sizes, dataset_limit)
        check_output_path(output, "--output")
        if weights is not None and not weights.is_file():
            raise PlanInputError(f"--weights {weights} does not exist (run edgetrain pretrain)")
        if (run_index is None) != (part_of is None):
            raise PlanInputError("--run-index and --part-of go together (one run of an estimate"
                                 " and the estimate it belongs to)")
        runs = len(sizes) * len(seed_list)
        if run_index is not None and run_index >= runs:
            raise PlanInputError(f"--run-index {run_index} is out of range: {len(sizes)} batch"
                                 f" sizes × {len(seed_list)} seeds make runs 0 to {runs - 1}")
        device, prec = check_device(device, precision)
        from edgetrain.api.workload_spec import EstimateSpec
        from edgetrain.workloads.estimate import estimate, estimate_part

        spec = EstimateSpec(
            model=model,
            dataset=dataset,
            batch_sizes=sizes,
            target_accuracy=target_accuracy,
            optimizer=_optimizer(optimizer, learning_rate, reference_batch_size, lr_scaling),
            weights=weights,
            sample_budget=sample_budget,
            eval_interval_samples=eval_interval,
            eval_samples=eval_samples,
            seeds=seed_list,
            dataset_limit=dataset_limit,
            device=device,
            precision=prec,
            parallel=parallel,
        )
        if run_index is not None and part_of is not None:
            with Reporter(json_lines=json_progress) as reporter:
                part = estimate_part(spec, run_index, part_of, reporter)
                write_text_atomic(output, part.model_dump_json() + "\n")
                reporter.event("result", output=str(output), **part.model_dump())
            if not reporter.json_lines:
                reached = part.samples_to_accuracy
                stdout.print(f"run {run_index} (b={part.batch_size}, seed={part.seed}):"
                             f" {'never' if reached is None else reached} samples to the target;"
                             f" wrote {output}")
            return
        with Reporter(json_lines=json_progress) as reporter:
            vector = estimate(spec, reporter)
            write_efficiency(output, vector)
            reporter.event("result", output=str(output), **vector.model_dump())
    if not reporter.json_lines:
        table = Table(title=f"efficiency on {dataset} (target {target_accuracy:g})")
        for col in ("batch size", "samples to accuracy", "r"):
            table.add_column(col, justify="right")
        for b, s, r in zip(vector.batch_sizes, vector.samples_to_accuracy, vector.r, strict=True):
            table.add_row(
                str(b), "never" if s is None else f"{s:g}", "-" if r is None else f"{r:.3f}"
            )
        stdout.print(table)
        stdout.print(f"wrote {output} (trained on {vector.device}, {vector.precision})")


EXIT_BUDGET_EXHAUSTED = 4


def train_command(
    model: ModelOpt,
    dataset: Annotated[str, typer.Option(help="Target data set to fine-tune on.")],
    batch_size: Annotated[int, typer.Option(min=1)],
    target_accuracy: Annotated[float, typer.Option(min=0.0, max=1.0)],
    # readable=False: see `edgetrain worker --sa-dir` (click's access(2) check, cli/operator.py).
    checkpoint_dir: Annotated[
        Path, typer.Option(help="Checkpoints go here; a rerun with the same folder resumes.",
                           readable=False)
    ],
    weights: Annotated[
        Path | None, typer.Option(help="Starting weights (edgetrain pretrain).", readable=False)
    ] = None,
    optimizer: OptimizerName = OptimizerName.adam,
    learning_rate: Annotated[float, typer.Option(help="At the reference batch size.")] = 5e-4,
    reference_batch_size: int = 128,
    lr_scaling: LrScaling = LrScaling.sqrt,
    sample_budget: Annotated[int, typer.Option(min=1)] = 100_000,
    eval_interval: Annotated[int, typer.Option(min=1, help="Evaluate every N samples.")] = 1024,
    eval_samples: Annotated[int, typer.Option(min=1, help="Test samples per evaluation.")] = 2000,
    seed: int = 0,
    dataset_limit: Annotated[int | None, typer.Option(help="Use a fixed subset.")] = None,
    result: Annotated[Path | None, typer.Option(help="Also write the result JSON here.")] = None,
    gpu_freq: Annotated[
        str | None,
        typer.Option(help="Pin this GPU frequency while training (else the node agent pins it)."),
    ] = None,
    await_pin: Annotated[
        str | None,
        typer.Option(help="Wait until the node agent pins the GPU at this frequency (or lower)"
                     " before training: the operator's pods, whose clock the agent sets."),
    ] = None,
    await_power_mode: Annotated[
        str | None,
        typer.Option(help="With --await-pin: also wait for this power mode, CORES,CPU_HZ,EMC_HZ"
                     " (a mode the agent could not set is a warning)."),
    ] = None,
    sysfs_root: Annotated[
        Path | None, typer.Option(help="Sysfs root (a twin's tree); default $EDGETRAIN_SYSFS_ROOT.")
    ] = None,
    device: DeviceOpt = "auto",
    precision: PrecisionOpt = "fp32",
    json_progress: JsonProgressOpt = None,
) -> None:
    """Fine-tune to the target accuracy, checkpointing so a killed run resumes.

    On a Jetson (or a twin) device time, energy and peak power come from the power sensor; with
    no device, device time is wall time. Exit codes: 0 target reached, 4 sample budget
    exhausted, 2 bad input.
    """
    import contextlib
    import os
    import signal

    from edgetrain.cli.plan import parse_frequency_hz
    from edgetrain.device import DeviceError
    from edgetrain.device.sim import TwinWorkload

    with exit_codes():
        check_workload_options(model, dataset, [batch_size], dataset_limit)
        check_output_path(checkpoint_dir, "--checkpoint-dir", folder=True)
        if result is not None:
            check_output_path(result, "--result")
        device, prec = check_device(device, precision)
        if weights is not None and not weights.is_file():
            raise PlanInputError(f"--weights {weights} does not exist (run edgetrain pretrain)")
        has_device = (sysfs_root is not None or bool(os.environ.get("EDGETRAIN_SYSFS_ROOT"))
                      or _jetson_sysfs())
        if gpu_freq:
            parse_frequency_hz(gpu_freq)
            if not has_device:
                raise PlanInputError("--gpu-freq needs a device (--sysfs-root or a Jetson's /sys)")
        awaited = _awaited_setting(await_pin, await_power_mode, gpu_freq, has_device)
        check_sysfs_root(sysfs_root)
        # torch loads only once the options are known to be good.
        from edgetrain.api.workload_spec import TrainSpec
        from edgetrain.workloads.device_session import DeviceSession, SessionMeter
        from edgetrain.workloads.models import is_text_model
        from edgetrain.workloads.train import CheckpointMismatchError, DeviceMeter, train

        spec = TrainSpec(
            model=model,
            dataset=dataset,
            batch_size=batch_size,
            target_accuracy=target_accuracy,
            optimizer=_optimizer(optimizer, learning_rate, reference_batch_size, lr_scaling),
            weights=weights,
            sample_budget=sample_budget,
            eval_interval_samples=eval_interval,
            eval_samples=eval_samples,
            seed=seed,
            dataset_limit=dataset_limit,
            device=device,
            precision=prec,
        )
        session: DeviceSession | None = None
        if has_device:
            try:
                # With --await-pin the node agent pins this pod's clock and restores it when
                # the pod ends: the session asks nothing and restores nothing (a restricted
                # pod's /sys is read-only; restoring there failed the README's real train pod).
                session = DeviceSession(sysfs_root, clock_request=(
                    _agent_holds_the_pin if awaited is not None else None))
            except DeviceError as exc:
                raise PlanInputError(f"no usable device: {exc}") from None

        def _terminate(signum: int, _frame: object) -> None:
            raise KeyboardInterrupt(f"signal {signum}")

        signal.signal(signal.SIGTERM, _terminate)  # restore the GPU range on SIGTERM too
        with contextlib.ExitStack() as stack:
            meter: DeviceMeter | None = None
            if session is not None:
                stack.enter_context(session)
                if gpu_freq:
                    session.pin(parse_frequency_hz(gpu_freq))
                if awaited is not None:
                    try:
                        warning = session.await_agent_setting(*awaited)
                    except DeviceError as exc:
                        raise PlanInputError(str(exc)) from None
                    if warning:
                        print(f"edgetrain train: {warning}", file=sys.stderr)
                from edgetrain.workloads.training import load_task

                task = load_task(dataset, dataset_limit)
                workload = TwinWorkload(
                    model=model,
                    input_shape=tuple(int(d) for d in task.x_train.shape[1:]),
                    num_classes=task.num_classes,
                    batch_size=batch_size,
                    busy=True,
                )
                if is_text_model(model) != (task.kind == "text"):
                    raise PlanInputError(f"model {model} cannot train on {task.kind} set {dataset}")
                session.set_workload(workload)
                meter = SessionMeter(session, workload)
            try:
                reporter = stack.enter_context(Reporter(json_lines=json_progress))
                outcome = train(spec, checkpoint_dir, meter=meter, reporter=reporter)
                reporter.event("result", **outcome.model_dump())
            except CheckpointMismatchError as exc:
                raise PlanInputError(str(exc)) from None
    if result is not None:
        write_text_atomic(result, outcome.model_dump_json(indent=2))
    if not reporter.json_lines:
        usage = outcome.usage
        stdout.print(
            f"{'reached' if outcome.reached_target else 'did not reach'} {target_accuracy:g}:"
            f" accuracy {outcome.accuracy:.3f} after {outcome.samples} samples,"
            f" {usage.device_time_s:.1f} s device time"
            + (" (simulated)" if usage.simulated else "")
            + f" on {outcome.device} ({outcome.precision})"
            + (f", {usage.energy_j:.1f} J" if usage.energy_j is not None else "")
        )
    if not outcome.reached_target:
        raise typer.Exit(EXIT_BUDGET_EXHAUSTED)


def _agent_holds_the_pin(_gpu_freq_hz: int | None) -> None:
    """--await-pin's clock request: none; the pod's annotation asked the node agent already."""


def _jetson_sysfs() -> bool:
    """Whether this machine's /sys has a Jetson GPU's devfreq node: a Jetson, or a pod on a
    real node over a device twin (whose runtime gives containers the twin's sysfs)."""
    from edgetrain.device.devfreq import GpuDevfreq
    from edgetrain.device.errors import DeviceError

    try:
        GpuDevfreq.discover("/")
    except DeviceError:
        return False
    return True


def _awaited_setting(
    await_pin: str | None, await_power_mode: str | None, gpu_freq: str | None, has_device: bool
) -> tuple[int, tuple[int, int, int] | None] | None:
    """--await-pin / --await-power-mode checked: (GPU Hz, mode or None), or None."""
    from edgetrain.cli.plan import parse_frequency_hz

    if await_power_mode and not await_pin:
        raise PlanInputError("--await-power-mode needs --await-pin (the agent sets both together)")
    if not await_pin:
        return None
    if gpu_freq:
        raise PlanInputError("--await-pin waits for the node agent's pin, --gpu-freq pins here:"
                             " give one of them")
    mode: tuple[int, int, int] | None = None
    if await_power_mode:
        parts = [p.strip() for p in await_power_mode.split(",")]
        if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise PlanInputError(f"--await-power-mode {await_power_mode!r}: give CORES,CPU_HZ,"
                                 "EMC_HZ as three positive integers, e.g. 2,921600000,1600000000")
        mode = (int(parts[0]), int(parts[1]), int(parts[2]))
    freq_hz = parse_frequency_hz(await_pin)
    if not has_device:
        raise PlanInputError("--await-pin needs a device (--sysfs-root or a Jetson's /sys)")
    return freq_hz, mode


def _agent_requests(sa_dir: Path | None) -> tuple[ClockRequest, ModeRequest]:
    """--clock-by-agent: this pod's GPU clock and power-mode requests (checked before anything
    is measured)."""
    pod, namespace = os.environ.get("POD_NAME"), os.environ.get("POD_NAMESPACE")
    if not pod or not namespace:
        raise PlanInputError(
            "--clock-by-agent needs POD_NAME and POD_NAMESPACE naming this pod (the operator's"
            " profile pods set them from the downward API)")
    from edgetrain.kube import KubeClient
    from edgetrain.operator.worker import agent_clock_request, agent_mode_request

    client = KubeClient.connect(sa_dir=sa_dir)
    return (agent_clock_request(client, namespace, pod),
            agent_mode_request(client, namespace, pod))


def profile_command(
    model: ModelOpt,
    dataset: Annotated[str, typer.Option(help="Data set giving the input shape and batches.")],
    batch_sizes: Annotated[str, typer.Option(help="Comma-separated batch sizes.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Profile CSV to write.")],
    gpu_freqs: Annotated[
        str | None, typer.Option(help="Comma-separated GPU frequencies (Hz or 307.2MHz).")
    ] = None,
    strategy: Annotated[
        str,
        typer.Option(
            help="frontier: skip points the limit rules out; full: every point; predicted:"
            " profile --points (b, full mode) points, transfer, predict the whole table."
        ),
    ] = "frontier",
    power_limit: Annotated[
        float, typer.Option(help="Watts; frontier needs it. 'inf' = none.")
    ] = float("inf"),
    power_metric: PowerMetric = PowerMetric.peak,
    minibatches: Annotated[int, typer.Option(min=2, help="Per point; the first is dropped.")] = 40,
    min_window: Annotated[float, typer.Option(help="Seconds of power samples per point.")] = 1.0,
    stabilize_window: Annotated[
        float, typer.Option(help="Power is settled when two such windows' means agree (s).")
    ] = 1.0,
    stabilize_timeout: Annotated[float, typer.Option(help="Max seconds to wait for power.")] = 15.0,
    sample_interval: Annotated[float, typer.Option(help="Power sampling interval (s).")] = 0.05,
    sysfs_root: Annotated[
        Path | None, typer.Option(help="Sysfs root (a twin's tree); default $EDGETRAIN_SYSFS_ROOT.")
    ] = None,
    points: Annotated[int, typer.Option(min=2, help="predicted: points to profile (k).")] = 50,
    margin_quantile: Annotated[
        float, typer.Option(min=0.01, max=1.0, help="predicted: quantile of power residuals.")
    ] = 0.9,
    seed: Annotated[int, typer.Option(help="predicted: sampling and training seed.")] = 0,
    epochs: Annotated[int, typer.Option(min=1, help="predicted: transfer epochs.")] = 100,
    device: DeviceOpt = "auto",
    precision: PrecisionOpt = "fp32",
    json_progress: JsonProgressOpt = None,
    clock_by_agent: Annotated[
        bool,
        typer.Option(help="Ask edgetrain's node agent for each GPU clock and, with --strategy"
                     " predicted, each power mode (annotations on this pod,"
                     " $POD_NAMESPACE/$POD_NAME) and only read them back: for a pod whose"
                     " /sys is read-only."),
    ] = False,
    sa_dir: Annotated[
        Path | None,
        typer.Option(help="With --clock-by-agent: the service-account mount.", readable=False),
    ] = None,
) -> None:
    """Measure time per sample and peak/mean power per (batch size, GPU frequency).

    Pins each frequency through devfreq (or the node agent), trains real minibatches, waits
    for power to settle, and writes the profile CSV plus `<name>.meta.json`. The GPU range is
    restored on exit, also on Ctrl-C or SIGTERM. On a device twin every figure is simulated
    (the sidecar says so).
    """
    import signal

    from edgetrain.api.profile import write_profile, write_profile_metadata
    from edgetrain.cli.plan import parse_frequency_hz
    from edgetrain.device import DeviceError

    def _terminate(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, _terminate)
    with exit_codes():
        sizes = parse_int_list(batch_sizes, "--batch-sizes")
        check_workload_options(model, dataset, sizes)
        check_output_path(output, "--output")
        if strategy not in ("frontier", "full", "predicted"):
            raise PlanInputError(
                f"--strategy must be frontier, full or predicted, got '{strategy}'"
            )
        freqs = (
            [parse_frequency_hz(f) for f in gpu_freqs.split(",") if f.strip()]
            if gpu_freqs
            else None
        )
        clock_request, mode_request = _agent_requests(sa_dir) if clock_by_agent else (None, None)
        check_sysfs_root(sysfs_root)
        device, prec = check_device(device, precision)
        # torch loads only once the options are known to be good.
        from edgetrain.api.workload_spec import ProfileSpec, ProfilingStrategy
        from edgetrain.workloads.device_session import DeviceSession
        from edgetrain.workloads.profile import profile

        chosen = ProfilingStrategy(strategy)
        spec = ProfileSpec(
            model=model,
            dataset=dataset,
            batch_sizes=sizes,
            gpu_freqs_hz=freqs,
            strategy=chosen,
            power_limit_w=power_limit,
            power_metric=power_metric,
            minibatches=minibatches,
            min_window_s=min_window,
            stabilize_window_s=stabilize_window,
            stabilize_timeout_s=stabilize_timeout,
            predict_points=points,
            predict_seed=seed,
            margin_quantile=margin_quantile,
            predict_epochs=epochs,
            device=device,
            precision=prec,
        )
        try:
            session = DeviceSession(sysfs_root, sample_interval, clock_request=clock_request,
                                    mode_request=mode_request)
        except DeviceError as exc:
            raise PlanInputError(f"no usable device: {exc}") from None
        with session, Reporter(json_lines=json_progress) as reporter:
            try:
                run = profile(spec, session, reporter)
            except DeviceError as exc:
                raise PlanInputError(str(exc)) from None
            write_profile(output, run.points)
            write_profile_metadata(output, run.metadata)
            if run.prediction is not None:
                from edgetrain.workloads.profile_predicted import write_prediction_report

                write_prediction_report(output, run.prediction)
            reporter.event("result", output=str(output), **run.metadata.model_dump())
    meta = run.metadata
    stderr.print(
        f"profiled {meta.measured_points} of {meta.grid_points} points on {meta.device_model}"
        f"{' (simulated)' if meta.simulated else ''} ({meta.device}, {meta.precision})"
        f" in {meta.duration_s:.1f} s; wrote {output}"
    )
