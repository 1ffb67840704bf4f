"""The exploration gate of recurring jobs: try another batch size only when it pays, and never
at a risk beyond a small budget (numpy, no I/O).

The plan exploits the posterior mean. The gate weighs one alternative: a batch size one doubling
from the incumbent (the posterior mean's choice). Trying it costs this job its expected extra time;
it pays back over the recurrences still expected if what it teaches makes a later plan better (the
value of information of one observation there, exact under the Gaussian model). It explores only
when that value beats the cost **and** a conservative budget holds (conservative bandits, Wu et
al. 2016): the pessimistic overrun of every exploring job so far, this one included, stays within
α × the number of jobs, in incumbent trainings: the cumulative pessimistic time to accuracy stays
≤ (1 + α) × the incumbent's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from edgetrain.api.plan import Objective, PowerMetric
from edgetrain.planner.history import Posterior, normalised
from edgetrain.planner.lut import Lut
from edgetrain.planner.select import objective_matrix

#: Jobs expected with one history key, this one included, when the job does not say.
DEFAULT_RECURRENCES = 10
#: The budget: exploration may cost at most this share of the incumbent's time, cumulatively.
DEFAULT_ALPHA = 0.01
#: The pessimistic bound of a cost: mean + z·sd of its log (one-sided 95 %).
DEFAULT_Z = 1.645


@dataclass(frozen=True)
class GateSettings:
    """How many jobs to expect, and how much exploring may cost at worst."""

    expected_recurrences: int = DEFAULT_RECURRENCES
    alpha: float = DEFAULT_ALPHA
    z: float = DEFAULT_Z

    def __post_init__(self) -> None:
        if self.expected_recurrences < 1:
            raise ValueError(f"expected recurrences must be ≥ 1, got {self.expected_recurrences}")
        if not (math.isfinite(self.alpha) and self.alpha >= 0):
            raise ValueError(f"alpha must be a finite number ≥ 0, got {self.alpha}")
        if not (math.isfinite(self.z) and self.z >= 0):
            raise ValueError(f"z must be a finite number ≥ 0, got {self.z}")


@dataclass(frozen=True)
class GateDecision:
    """What the gate weighed and decided (costs in incumbent trainings: 0.1 = 10 % of one)."""

    incumbent: int  # the batch size the posterior mean plans
    candidate: int | None  # the size one doubling away it weighed (None: none feasible)
    explored: bool
    value: float  # expected saving over the remaining recurrences
    cost: float  # expected extra time of this job at the candidate
    pessimistic: float  # this job's overrun at the pessimistic bound
    budget_left: float  # α × jobs − the pessimistic overruns of earlier explorations
    remaining: int  # recurrences still expected after this job
    reason: str

    @property
    def batch_size(self) -> int:
        """The size this job trains at."""
        return self.candidate if self.explored and self.candidate is not None else self.incumbent


def cost_per_sample(
    lut: Lut,
    batch_sizes: Sequence[int],
    power_limit_w: float,
    metric: PowerMetric = PowerMetric.peak,
    objective: Objective = Objective.time,
) -> NDArray[np.float64]:
    """Per batch size, the plan's cost per sample (time, or energy) at its best mode within the
    limit; NaN where no profiled mode fits (or the size is not profiled)."""
    ones = np.ones(lut.batch_sizes.size)
    cost = objective_matrix(lut, ones, objective)
    with np.errstate(invalid="ignore"):
        feasible = lut.measured & (lut.power(metric) <= power_limit_w) & ~np.isnan(cost)
    best = np.where(feasible, cost, np.inf).min(axis=1)
    row = {int(b): i for i, b in enumerate(lut.batch_sizes)}
    out = [best[row[int(b)]] if int(b) in row else np.inf for b in batch_sizes]
    return np.where(np.isfinite(out), out, np.nan)


def _normal_pdf(x: float) -> float:
    return math.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)


def _normal_cdf(x: float) -> float:
    return 0.5 * (1 + math.erf(x / math.sqrt(2)))


def expected_gain(mu: float, spread: float) -> float:
    """E[max(0, −Δ')] for Δ' ~ N(mu, spread²): what switching saves when the candidate turns
    out cheaper (in log time, ≈ the relative saving)."""
    if spread <= 0:
        return max(0.0, -mu)
    u = mu / spread
    return spread * _normal_pdf(u) - mu * _normal_cdf(-u)


def incumbent_row(cost: NDArray[np.float64]) -> int:
    """The cheapest finite row; ties go to the larger batch (as `select` breaks them)."""
    rows = np.flatnonzero(np.isfinite(cost))
    if rows.size == 0:
        raise ValueError("no batch size is feasible")
    return int(min(rows, key=lambda i: (float(cost[i]), -int(i))))


def gate(
    post: Posterior,
    cost_per_sample_by_row: NDArray[np.float64],
    *,
    jobs_before: int,
    spent: float = 0.0,
    settings: GateSettings = GateSettings(),
) -> GateDecision:
    """Whether this job tries a size one doubling from the incumbent (see the module docstring).

    `cost_per_sample_by_row`: `cost_per_sample` on the posterior's batch sizes. `jobs_before`:
    earlier jobs of this history; `spent`: the pessimistic overruns their explorations recorded.
    """
    log_cost = np.log(cost_per_sample_by_row) + post.log_samples()
    # The incumbent exactly as the plan computes it (time × r), so ties and rounding agree.
    inc = incumbent_row(cost_per_sample_by_row * post.r())
    remaining = max(0, settings.expected_recurrences - jobs_before - 1)
    budget_left = settings.alpha * (jobs_before + 1) - spent
    bs = post.batch_sizes
    best: GateDecision | None = None
    for j in range(bs.size):
        if not np.isfinite(log_cost[j]) or j == inc or bs[j] not in (2 * bs[inc], bs[inc] // 2):
            continue
        if bs[inc] % 2 and bs[j] < bs[inc]:
            continue  # not one doubling (odd incumbent)
        d = post.design[j] - post.design[inc]
        h = post.design[j]
        ch = post.cov @ h
        mu = float(log_cost[j] - log_cost[inc])
        var = max(float(d @ post.cov @ d), 0.0)
        # The doubt about Δ that one observation at j would remove (its preposterior spread).
        learnable = float(d @ ch) ** 2 / (float(h @ ch) + post.noise_sd**2)
        value = remaining * expected_gain(mu, math.sqrt(max(learnable, 0.0)))
        cost = math.exp(mu + var / 2) - 1
        pessimistic = math.exp(mu + settings.z * math.sqrt(var)) - 1
        explore = value > cost and pessimistic <= budget_left
        if explore:
            reason = "explores: worth more than it costs, within the budget"
        elif value <= cost:
            reason = "exploits: trying it is not worth its expected cost"
        else:
            reason = "exploits: worth trying, but its pessimistic cost exceeds the budget left"
        decision = GateDecision(
            incumbent=int(bs[inc]),
            candidate=int(bs[j]),
            explored=explore,
            value=value,
            cost=cost,
            pessimistic=pessimistic,
            budget_left=budget_left,
            remaining=remaining,
            reason=reason,
        )
        if best is None or (explore, value - cost) > (best.explored, best.value - best.cost):
            best = decision
    if best is None:
        return GateDecision(int(bs[inc]), None, False, 0.0, 0.0, 0.0, budget_left, remaining,
                            "exploits: no size one doubling away is feasible")  # fmt: skip
    return best


def gated_r(
    post: Posterior, cost_per_sample_by_row: NDArray[np.float64], decision: GateDecision
) -> NDArray[np.float64]:
    """The r the plan reads: the posterior mean's, and when the gate explores, the candidate's r
    lowered just below the incumbent's cost, so the same plan picks it."""
    log_n = post.log_samples()
    if not decision.explored or decision.candidate is None:
        return normalised(log_n)
    rows = {int(b): i for i, b in enumerate(post.batch_sizes)}
    inc, cand = rows[decision.incumbent], rows[decision.candidate]
    r = normalised(log_n)
    cost = cost_per_sample_by_row
    r[cand] = min(r[cand], r[inc] * cost[inc] / cost[cand] * (1 - 1e-9))
    out: NDArray[np.float64] = r / r.max()
    return out


__all__ = [
    "DEFAULT_ALPHA",
    "DEFAULT_RECURRENCES",
    "DEFAULT_Z",
    "GateDecision",
    "GateSettings",
    "cost_per_sample",
    "expected_gain",
    "gate",
    "gated_r",
    "incumbent_row",
]
