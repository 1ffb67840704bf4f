"""The run report: report.json and PNG plots (every simulated figure is labelled so)."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; no display on a node or in CI
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from edgetrain.api.io import write_text_atomic
from edgetrain.api.job_status import HistoryStatus
from edgetrain.api.plan import PlanPoint
from edgetrain.pipeline.run import RunOutcome
from edgetrain.planner import Lut

MARKERS = {
    "edgetrain": ("*", "tab:red"),
    "B1": ("s", "tab:blue"),
    "B2": ("^", "tab:green"),
    "oracle": ("D", "tab:purple"),
}


def _title(text: str, simulated: bool) -> str:
    return f"{text} (simulated)" if simulated else text


def _save(fig: Figure, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _points(outcome: RunOutcome) -> dict[str, PlanPoint]:
    plan = outcome.plan
    return {"edgetrain": plan, **plan.baselines}


def _heatmap(
    ax: Axes, lut: Lut, values: np.ndarray, label: str, outcome: RunOutcome, limit_w: float
) -> None:
    freqs_mhz = lut.gpu_freqs_hz / 1e6
    image = ax.imshow(values, aspect="auto", origin="lower", cmap="viridis")
    ax.figure.colorbar(image, ax=ax, label=label)
    ax.set_xticks(range(len(freqs_mhz)), [f"{f:g}" for f in freqs_mhz], rotation=60, fontsize=7)
    ax.set_yticks(range(len(lut.batch_sizes)), [str(b) for b in lut.batch_sizes])
    ax.set_xlabel("GPU frequency (MHz)")
    ax.set_ylabel("batch size")
    power = lut.power(outcome.plan.power_metric)
    if math.isfinite(limit_w):
        feasible = np.where(np.isnan(power), np.nan, (power <= limit_w).astype(float))
        if np.nanmax(feasible) > 0 and np.nanmin(feasible) < 1:
            ax.contour(
                np.nan_to_num(feasible, nan=0.0), levels=[0.5], colors="white", linewidths=1.5
            )
        # Feasible frontier: the highest feasible measured frequency per batch size.
        xs, ys = [], []
        for i in range(len(lut.batch_sizes)):
            ok = np.flatnonzero(~np.isnan(power[i]) & (power[i] <= limit_w))
            if ok.size:
                xs.append(int(ok[-1]))
                ys.append(i)
        ax.plot(xs, ys, "w--", linewidth=1, label=f"frontier at {limit_w:g} W")
    for name, point in _points(outcome).items():
        marker, color = MARKERS.get(name, ("o", "black"))
        j = int(np.flatnonzero(lut.gpu_freqs_hz == point.gpu_freq_hz)[0])
        i = int(np.flatnonzero(lut.batch_sizes == point.batch_size)[0])
        ax.plot(j, i, marker, color=color, markersize=11, markeredgecolor="white", label=name)
    ax.legend(fontsize=7, loc="upper left")


def _mode_scatter(ax: Axes, lut: Lut, outcome: RunOutcome, limit_w: float) -> None:
    """Time per sample against power for every (b, mode) cell, the choice and baselines marked."""
    power = lut.power(outcome.plan.power_metric)
    for i, b in enumerate(lut.batch_sizes):
        ok = lut.measured[i]
        ax.scatter(power[i][ok], lut.time_per_sample_s[i][ok] * 1e3, s=4, alpha=0.5,
                   label=f"b={int(b)}")
    for name, point in _points(outcome).items():
        marker, color = MARKERS.get(name, ("o", "black"))
        ax.plot(point.power_w, point.time_per_sample_s * 1e3, marker, color=color,
                markersize=11, markeredgecolor="white", label=name)
    if math.isfinite(limit_w):
        ax.axvline(limit_w, color="red", linestyle="--", label=f"limit {limit_w:g} W")
    ax.set_yscale("log")
    ax.set_xlabel(f"{outcome.plan.power_metric.value} power (W)")
    ax.set_ylabel("ms per sample")
    ax.legend(fontsize=6, ncol=2, loc="upper right")


def write_report(outcome: RunOutcome, folder: Path) -> Path:
    """Write report.json and the plots into `folder`; returns the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    write_text_atomic(folder / "report.json", outcome.model_dump_json(indent=2) + "\n")
    sim = outcome.simulated
    lut = Lut.from_points(outcome.profile)
    limit = outcome.spec.power_limit_w
    device = outcome.device_model

    metric = outcome.plan.power_metric
    if lut.has_full_modes:
        # Thousands of (b, power mode) cells: a b × mode heatmap is unreadable, a scatter is not.
        fig, ax = plt.subplots(figsize=(8, 5))
        _mode_scatter(ax, lut, outcome, limit)
        ax.set_title(_title(
            f"{outcome.spec.model.architecture} on {device}: every (b, power mode)"
            f" ({outcome.profile_metadata.measured_points} measured, rest predicted)", sim))
        _save(fig, folder / "modes.png")
    else:
        fig, ax = plt.subplots(figsize=(8, 4.5))
        _heatmap(ax, lut, lut.time_per_sample_s * 1e3, "ms per sample", outcome, limit)
        ax.set_title(
            _title(f"time per sample, {outcome.spec.model.architecture} on {device}", sim))
        _save(fig, folder / "time-heatmap.png")

        fig, ax = plt.subplots(figsize=(8, 4.5))
        _heatmap(ax, lut, lut.power(metric), f"{metric.value} power (W)", outcome, limit)
        ax.set_title(_title(f"{metric.value} power on {device}, limit {limit:g} W", sim))
        _save(fig, folder / "power-heatmap.png")

    fig, ax = plt.subplots(figsize=(6, 4))
    names, values, colors = [], [], []
    for name, point in _points(outcome).items():
        names.append(f"{name}\nb={point.batch_size}\n{point.gpu_freq_hz / 1e6:g} MHz")
        values.append(point.predicted_seconds or point.relative_time)
        colors.append(MARKERS.get(name, ("o", "gray"))[1])
    ax.bar(names, values, color=colors)
    ax.set_ylabel("predicted time to accuracy (s)")
    ax.set_title(_title("edgetrain against the baselines", sim))
    _save(fig, folder / "choice.png")

    fig, ax = plt.subplots(figsize=(6, 4))
    eff = outcome.efficiency
    ax.bar([str(b) for b in eff.batch_sizes], [r or 0.0 for r in eff.r], color="tab:orange")
    ax.set_xlabel("batch size")
    ax.set_ylabel("r = samples to accuracy / max")
    ax.set_title(f"efficiency on proxy {eff.dataset} (target {eff.target_accuracy:g})")
    _save(fig, folder / "efficiency.png")

    fig, ax = plt.subplots(figsize=(6, 4))
    curve = outcome.training.curve
    usage = outcome.training.usage
    total_samples = max(outcome.training.samples, 1)
    seconds = [usage.device_time_s * s / total_samples for s, _ in curve]
    ax.plot(seconds, [a for _, a in curve], "o-")
    ax.axhline(outcome.spec.target_accuracy, color="gray", linestyle="--", label="target")
    ax.set_xlabel("device time (s)" + (", simulated" if usage.simulated else ""))
    ax.set_ylabel(f"test accuracy on {outcome.spec.dataset.name}")
    ax.set_title(_title(f"training at b={outcome.plan.batch_size}", usage.simulated))
    ax.legend()
    _save(fig, folder / "training.png")

    fig, ax = plt.subplots(figsize=(7, 3.5))
    if outcome.power_trace:
        t, p = (np.asarray(v) for v in zip(*outcome.power_trace, strict=True))
        ax.step(t, p, where="pre", linewidth=0.6, color="tab:blue", alpha=0.35,
                label="per minibatch")
        # The level being held: mean power over a sliding window of device time (from the
        # cumulative energy, so stretches of any length weigh by their duration).
        window_s = float(t[-1]) / 40
        energy = np.concatenate([[0.0], np.cumsum(p * np.diff(np.concatenate([[0.0], t])))])
        edges = np.concatenate([[0.0], t])
        if window_s > 0 and len(t) > 40:
            start = np.clip(t - window_s, 0.0, None)
            mean = (energy[1:] - np.interp(start, edges, energy)) / np.maximum(t - start, 1e-12)
            ax.plot(t, mean, color="tab:blue", linewidth=1.8,
                    label=f"mean over {window_s:.2g} s")
        ax.set_xlim(0, float(t[-1]))
    if math.isfinite(limit):
        ax.axhline(limit, color="red", linestyle="--", label=f"limit {limit:g} W")
    ax.legend(fontsize=7, loc="lower right")
    ax.set_xlabel("device time since training start (s)" + (", simulated" if sim else ""))
    ax.set_ylabel("board power (W)")
    ax.set_title(_title(f"power while training on {device}", sim))
    _save(fig, folder / "power-trace.png")
    if outcome.history is not None:
        fig, ax = plt.subplots(figsize=(6.5, 4))
        _history(ax, outcome)
        _save(fig, folder / "history.png")
    return folder


def history_summary(h: HistoryStatus) -> list[tuple[str, str]]:
    """Where the planned r came from and what the gate did, as (label, value) rows."""
    src = h.sources
    tilt = (f"{src.tilt_prior_mean:+.3f} ± {src.tilt_prior_sd:.3f} per doubling"
            f" ({src.tilt_pairs} pairs)" if src.tilt_trusted
            else f"not used ({src.tilt_pairs} pairs, < 6)")  # fmt: skip
    if src.noise_shape_used:
        noise = f"B_noise proxy {src.noise_scale_proxy:.3g}, target {src.noise_scale_target:.3g}"
    elif src.noise_scale_proxy is not None or src.noise_scale_target is not None:
        noise = "measured on one set only: not used"
    else:
        noise = "not measured"
    rows = [
        ("planned r", ", ".join(f"{b}: {r:.3f}" for b, r in zip(h.batch_sizes, h.planned_r,
                                                                  strict=True))),
        ("r from", f"proxy ({src.proxy_seeds or 1} seed(s)), {src.observations} observation(s)"),
        ("tilt prior", tilt),
        ("noise scale", noise),
    ]  # fmt: skip
    gate = h.gate
    if gate is not None:
        weighed = ("" if gate.candidate_batch_size is None else
                   f" b={gate.candidate_batch_size}: value {gate.value:.3f}, cost {gate.cost:.3f},"
                   f" pessimistic {gate.pessimistic:.3f}, budget left {gate.budget_left:.3f}")
        rows.append(("exploration gate", f"{'explored' if gate.explored else 'exploited'}"
                     f" (incumbent b={gate.incumbent_batch_size};{weighed})"))  # fmt: skip
    return rows


def _history(ax: Axes, outcome: RunOutcome) -> None:
    """Prior r, posterior r (± 1 sd of log N) and planned r per batch size, and the observed N."""
    h = outcome.history
    assert h is not None
    xs = np.arange(len(h.batch_sizes))
    prior, post = np.asarray(h.prior_r), np.asarray(h.posterior_r)
    sd = np.asarray(h.posterior_log_sd)
    ax.plot(xs, prior, "o--", color="tab:gray", label="prior r (proxy)")
    ax.errorbar(xs, post, yerr=[post - post * np.exp(-sd), post * np.exp(sd) - post],
                fmt="o-", color="tab:blue", capsize=3, label="posterior r (± 1 sd)")
    ax.plot(xs, h.planned_r, "*", color="tab:red", markersize=10, label=f"planned ({h.chooser})")
    ax.set_xticks(xs, [str(b) for b in h.batch_sizes])
    ax.set_xlabel("batch size")
    ax.set_ylabel("r = samples to accuracy / max")
    if h.observations:
        twin = ax.twinx()
        index = {b: i for i, b in enumerate(h.batch_sizes)}
        seen = [(index[o.batch_size], o.samples) for o in h.observations if o.batch_size in index]
        if seen:
            twin.plot(*zip(*seen, strict=True), "x", color="black", label="observed N")
        twin.set_ylabel("observed samples to target")
        twin.legend(fontsize=7, loc="lower right")
    ax.legend(fontsize=7, loc="upper left")
    gate = h.gate
    explored = "" if gate is None else ("; gate explored" if gate.explored else "; gate exploited")
    ax.set_title(
        f"learned from {h.observations_total} earlier job(s) on {outcome.spec.dataset.name}"
        f" (proxy seeds {h.sources.proxy_seeds or 1}{explored})", fontsize=9
    )
