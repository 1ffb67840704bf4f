"""Site power budgets: one cap shared by the jobs of a site's nodes (pure, numpy only).

A job's options are its profiled points: the node's draw while it trains there (W, idle
included, as the profiles measure it) and the predicted time-to-accuracy (s). `allocate`
admits jobs (running ones first, then waiting ones in arrival order, backfilling smaller ones)
while every admitted job's cheapest point fits the cap, then picks one point per admitted job
that minimises the summed time-to-accuracy (or the makespan) with the planned draw ≤ the cap.
How the changes land without the site's draw ever passing the cap is the operator's
(`operator/grants.py`: issue → acknowledge → raise).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from edgetrain.api.efficiency import EfficiencyVector
from edgetrain.api.errors import BadInputError
from edgetrain.api.plan import PowerMetric
from edgetrain.planner.lut import Lut
from edgetrain.planner.plan import align_efficiency

BudgetObjective = Literal["sum", "makespan"]
# Power sums are compared with this slack: float rounding must not turn an exact fit away.
EPS_W = 1e-9
# Above this many partial sums the exact search thins its front to 1 mW buckets (still ≤ cap).
MAX_STATES = 200_000


class BudgetInputError(BadInputError):
    """The jobs or the cap cannot be allocated as given."""


@dataclass(frozen=True, eq=False)
class JobOptions:
    """One job's points: node draw (W) and predicted time-to-accuracy (s) per point."""

    name: str
    power_w: NDArray[np.float64]
    seconds: NDArray[np.float64]
    limit_w: float = math.inf  # the job's own powerLimitWatts
    node: str = ""  # where it runs or will run; its idle draw is then inside its points
    running: bool = False  # admitted earlier: keeps its place ahead of waiting jobs
    order: float = 0.0  # arrival (e.g. creation time): admission order among equals
    labels: tuple[tuple[int, int], ...] = ()  # (batch size, GPU Hz) per point, for messages

    def __post_init__(self) -> None:
        power = np.asarray(self.power_w, dtype=np.float64)
        seconds = np.asarray(self.seconds, dtype=np.float64)
        if power.ndim != 1 or power.shape != seconds.shape:
            raise BudgetInputError(
                f"job {self.name}: power_w and seconds must be 1-D of one length,"
                f" got {power.shape} and {seconds.shape}")
        if self.labels and len(self.labels) != power.size:
            raise BudgetInputError(f"job {self.name}: {len(self.labels)} labels for"
                                   f" {power.size} points")
        if not self.limit_w > 0:
            raise BudgetInputError(f"job {self.name}: its own limit must be > 0 W,"
                                   f" got {self.limit_w}")
        object.__setattr__(self, "power_w", power)
        object.__setattr__(self, "seconds", seconds)

    @property
    def eligible(self) -> NDArray[np.int64]:
        """Indices of points that are measured, positive and within the job's own limit."""
        ok = (np.isfinite(self.power_w) & np.isfinite(self.seconds) & (self.power_w > 0)
              & (self.seconds > 0) & (self.power_w <= self.limit_w + EPS_W))
        return np.flatnonzero(ok)

    @property
    def min_power_w(self) -> float:
        """The cheapest eligible point's draw (inf: none)."""
        idx = self.eligible
        return float(self.power_w[idx].min()) if idx.size else math.inf


@dataclass(frozen=True)
class Allocation:
    """A job's share: its point and watts, or waiting (watts None) with the reason."""

    job: str
    watts: float | None
    point: int | None
    seconds: float | None
    reason: str = ""

    @property
    def waiting(self) -> bool:
        """The job gets no power now."""
        return self.watts is None


@dataclass(frozen=True)
class SitePlan:
    """The allocation of one site: per job, and the planned draw it adds up to."""

    cap_w: float
    idle_w: float  # idle draw of the site's nodes that run no admitted job
    planned_w: float  # idle_w + the admitted jobs' watts
    objective: BudgetObjective
    allocations: tuple[Allocation, ...] = field(default_factory=tuple)

    def by_job(self) -> dict[str, Allocation]:
        """Allocations by job name."""
        return {a.job: a for a in self.allocations}

    def grants(self) -> dict[str, float | None]:
        """Watts per job (None: waiting)."""
        return {a.job: a.watts for a in self.allocations}

    @property
    def sum_seconds(self) -> float:
        """Summed predicted time-to-accuracy of the admitted jobs."""
        return sum(a.seconds or 0.0 for a in self.allocations)

    @property
    def makespan_seconds(self) -> float:
        """The longest predicted time-to-accuracy among the admitted jobs."""
        return max((a.seconds or 0.0 for a in self.allocations), default=0.0)


def job_options(
    name: str,
    lut: Lut,
    efficiency: EfficiencyVector,
    *,
    limit_w: float = math.inf,
    metric: PowerMetric = PowerMetric.peak,
    node: str = "",
    running: bool = False,
    order: float = 0.0,
    remaining_fraction: float = 1.0,
) -> JobOptions:
    """A job's options from its LUT and efficiency vector: time per sample × samples to the
    target at that batch size (× the fraction still to train)."""
    _r, samples, _warnings = align_efficiency(lut, efficiency)
    seconds = lut.time_per_sample_s * samples[:, None] * remaining_fraction
    power = lut.power(metric)
    rows, cols = np.nonzero(lut.measured & ~np.isnan(samples)[:, None])
    labels = tuple((int(lut.batch_sizes[i]), int(lut.gpu_freqs_hz[j]))
                   for i, j in zip(rows, cols, strict=True))
    return JobOptions(name, power[rows, cols], seconds[rows, cols], limit_w=limit_w, node=node,
                      running=running, order=order, labels=labels)


def site_draw_w(grants: Mapping[str, float | None], node_of: Mapping[str, str],
                node_idle_w: Mapping[str, float]) -> float:
    """Planned site draw: every granted job's watts, plus the idle draw of nodes running none."""
    busy = {node_of.get(j, "") for j, w in grants.items() if w is not None}
    idle = sum(w for n, w in node_idle_w.items() if n not in busy)
    return idle + sum(w for w in grants.values() if w is not None)


def admit(jobs: Sequence[JobOptions], cap_w: float, node_idle_w: Mapping[str, float],
          ) -> tuple[list[JobOptions], dict[str, str]]:
    """Running jobs first, then waiting ones by arrival; each joins while every admitted job's
    cheapest point still fits (a smaller later job may pass a larger one that does not fit).
    Returns the admitted jobs and, for the others, why they wait."""
    admitted: list[JobOptions] = []
    waiting: dict[str, str] = {}
    for job in sorted(jobs, key=lambda j: (not j.running, j.order, j.name)):
        if not math.isfinite(job.min_power_w):
            waiting[job.name] = (f"no profiled point is within its own limit of"
                                 f" {job.limit_w:g} W")
            continue
        trial = [*admitted, job]
        need = site_draw_w({j.name: j.min_power_w for j in trial},
                           {j.name: j.node for j in trial}, node_idle_w)
        if need <= cap_w + EPS_W:
            admitted.append(job)
        else:
            have = site_draw_w({j.name: j.min_power_w for j in admitted},
                               {j.name: j.node for j in admitted}, node_idle_w)
            waiting[job.name] = (f"its cheapest point needs {job.min_power_w:.2f} W; the cap"
                                 f" is {cap_w:g} W and {have:.2f} W is planned without it")
    return admitted, waiting


def _min_sum(jobs: Sequence[JobOptions], points: Sequence[NDArray[np.int64]],
             available_w: float) -> list[int] | None:
    """Exact multiple-choice knapsack over Pareto fronts: one point per job, Σ power ≤
    available, Σ seconds minimal (ties: lower power). None if nothing fits."""
    front_p = np.zeros(1)
    front_t = np.zeros(1)
    backs: list[tuple[NDArray[np.int64], NDArray[np.int64]]] = []
    for job, idx in zip(jobs, points, strict=True):
        if idx.size == 0:
            return None
        p = front_p[:, None] + job.power_w[idx][None, :]
        t = front_t[:, None] + job.seconds[idx][None, :]
        grid = np.indices(p.shape)
        p, t = p.ravel(), t.ravel()
        prev: NDArray[np.int64] = grid[0].ravel()
        choice: NDArray[np.int64] = grid[1].ravel()
        fits = p <= available_w + EPS_W
        p, t, prev, choice = p[fits], t[fits], prev[fits], choice[fits]
        if p.size == 0:
            return None
        if p.size > MAX_STATES:  # thin: the fastest state per 1 mW bucket (still within cap)
            bucket = np.ceil(p * 1000.0)
            order = np.lexsort((t, bucket))
            first = np.r_[True, bucket[order][1:] != bucket[order][:-1]]
            keep_idx = order[first]
            p, t, prev, choice = p[keep_idx], t[keep_idx], prev[keep_idx], choice[keep_idx]
        order = np.lexsort((t, p))  # by power, then time
        t_sorted = t[order]
        best_before = np.minimum.accumulate(t_sorted)
        keep = np.r_[True, t_sorted[1:] < best_before[:-1]]
        sel = order[keep]
        front_p, front_t = p[sel], t[sel]
        backs.append((prev[sel], idx[choice[sel]]))
    state = int(np.argmin(front_t))  # fronts are sorted by power: first minimum = lowest power
    out: list[int] = []
    for prev_states, chosen in reversed(backs):
        out.append(int(chosen[state]))
        state = int(prev_states[state])
    return out[::-1]


def _cheapest_within(job: JobOptions, idx: NDArray[np.int64], limit_s: float) -> float:
    ok = idx[job.seconds[idx] <= limit_s]
    return float(job.power_w[ok].min()) if ok.size else math.inf


def _min_makespan(jobs: Sequence[JobOptions], points: Sequence[NDArray[np.int64]],
                  available_w: float) -> float:
    """The smallest τ such that every job has a point of ≤ τ seconds and their cheapest such
    points fit together."""
    candidates = np.unique(np.concatenate([j.seconds[i] for j, i in zip(jobs, points,
                                                                          strict=True)]))
    lo, hi = 0, candidates.size - 1
    while lo < hi:
        mid = (lo + hi) // 2
        need = sum(_cheapest_within(j, i, float(candidates[mid]))
                   for j, i in zip(jobs, points, strict=True))
        if need <= available_w + EPS_W:
            hi = mid
        else:
            lo = mid + 1
    return float(candidates[lo])


def allocate(
    jobs: Iterable[JobOptions],
    cap_w: float,
    node_idle_w: Mapping[str, float] | None = None,
    *,
    objective: BudgetObjective = "sum",
    prefer: Mapping[str, float | None] | None = None,
) -> SitePlan:
    """Each job's share of the cap (see the module docstring). `node_idle_w`: every site node's
    idle draw; nodes without an admitted job count against the cap with it. `prefer`: each
    job's current grant (W), which wins among splits of equal merit: a swap of equals would
    stop two trainings for nothing."""
    if not cap_w > 0:
        raise BudgetInputError(f"the cap must be > 0 W, got {cap_w}")
    jobs = list(jobs)
    names = [j.name for j in jobs]
    if len(set(names)) != len(names):
        raise BudgetInputError(f"job names must be unique, got {names}")
    idle_by_node = dict(node_idle_w or {})
    admitted, waiting = admit(jobs, cap_w, idle_by_node)
    busy = {j.node for j in admitted}
    idle_w = sum(w for n, w in idle_by_node.items() if n not in busy)
    available_w = cap_w - idle_w
    points = [j.eligible for j in admitted]
    if objective == "makespan" and admitted:
        tau = _min_makespan(admitted, points, available_w)
        points = [i[j.seconds[i] <= tau] for j, i in zip(admitted, points, strict=True)]
    search = [_preferring(j, (prefer or {}).get(j.name)) for j in admitted]
    chosen = _min_sum(search, points, available_w) if admitted else []
    if chosen is None:  # admission guarantees the cheapest points fit; float slack aside
        raise BudgetInputError("no combination of points fits the cap")
    out: list[Allocation] = []
    for job, k in zip(admitted, chosen, strict=True):
        out.append(Allocation(job.name, float(job.power_w[k]), k, float(job.seconds[k])))
    out += [Allocation(name, None, None, None, reason) for name, reason in waiting.items()]
    order = {n: i for i, n in enumerate(names)}
    out.sort(key=lambda a: order[a.job])
    planned = idle_w + sum(a.watts or 0.0 for a in out)
    return SitePlan(cap_w=cap_w, idle_w=idle_w, planned_w=planned, objective=objective,
                    allocations=tuple(out))


# Seconds of a point other than the current grant's are weighed this much more in the search:
# far below any real difference, enough to break an exact tie.
TIE_WEIGHT = 1e-9


def _preferring(job: JobOptions, grant_w: float | None) -> JobOptions:
    """`job` with every point but its current grant's a hair slower (ties go to the grant)."""
    if grant_w is None:
        return job
    current = np.abs(job.power_w - grant_w) <= EPS_W
    seconds = np.where(current, job.seconds, job.seconds * (1 + TIE_WEIGHT))
    return JobOptions(job.name, job.power_w, seconds, limit_w=job.limit_w, node=job.node,
                      running=job.running, order=job.order, labels=job.labels)
