"""The node agent's decisions as plain functions: which frequency a node's pods ask for, what
range to write, and when the power guard steps down. No I/O here (the agent does that)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from edgetrain.api.keys import (
    ANNOTATION_GPU_FREQUENCY_HZ,
    ANNOTATION_POWER_LIMIT_WATTS,
    ANNOTATION_TRAINING_ACCURACY,
    ANNOTATION_TRAINING_SAMPLES,
    JOB_LABELS,
    POWER_MODE_ANNOTATIONS,
)
from edgetrain.kube import Obj

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})



@dataclass(frozen=True)
class ModeRequest:
    """The non-GPU part of a full power mode a pod asks for."""

    cpu_cores: int
    cpu_freq_hz: int
    emc_freq_hz: int


@dataclass(frozen=True)
class ModeTables:
    """What the board can set: core count and the CPU and EMC clock tables."""

    cpu_cores: int
    cpu_freqs_hz: tuple[int, ...]
    emc_freqs_hz: tuple[int, ...]


@dataclass(frozen=True)
class PodRequest:
    """What one active pod on the node asks of the agent."""

    namespace: str
    name: str
    uid: str
    training_job: str
    freq_hz: int | None = None  # already snapped onto the frequency table
    requested_hz: int | None = None  # as written in the annotation
    power_limit_w: float | None = None
    mode: ModeRequest | None = None  # snapped onto the board's tables
    problems: tuple[str, ...] = ()  # annotation values that were rejected or adjusted

    @property
    def key(self) -> str:
        """namespace/name."""
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class Conflict:
    """Two pods ask for different frequencies; `winner` (the lower) is pinned."""

    winner: PodRequest
    loser: PodRequest


@dataclass(frozen=True)
class Desired:
    """What the node's pods want right now."""

    freq_hz: int | None = None
    owner: PodRequest | None = None  # the pod whose frequency is pinned
    power_limit_w: float | None = None
    limit_owner: PodRequest | None = None
    requests: tuple[PodRequest, ...] = ()
    conflicts: tuple[Conflict, ...] = ()
    mode: ModeRequest | None = None  # the pinned pod's power mode (or the first one asked)
    mode_owner: PodRequest | None = None

    @property
    def active(self) -> bool:
        """True if any pod asks for a pin or a power limit (a mode alone holds no GPU range)."""
        return self.freq_hz is not None or self.power_limit_w is not None

    @property
    def signature(self) -> tuple[int | None, float | None]:
        """(frequency, limit): the guard restarts from the top when this changes."""
        return (self.freq_hz, self.power_limit_w)


def pod_active(pod: Obj) -> bool:
    """A pod holds its request until it finishes (Succeeded/Failed) or disappears."""
    return pod.get("status", {}).get("phase", "Pending") not in TERMINAL_PHASES


def training_job(pod: Obj) -> str:
    """The job a pod belongs to: an edgetrain/Job label, else the pod name."""
    meta = pod.get("metadata", {})
    labels = meta.get("labels") or {}
    for key in JOB_LABELS:
        if labels.get(key):
            return str(labels[key])
    return str(meta.get("name", ""))


def snap_down(freq_hz: int, table: Sequence[int]) -> int:
    """The highest table frequency ≤ freq_hz (the lowest one if freq_hz is below the table)."""
    ordered = sorted(table)
    below = [f for f in ordered if f <= freq_hz]
    return below[-1] if below else ordered[0]


def _positive_int(raw: str) -> int | None:
    try:
        value = int(float(raw))
    except (ValueError, OverflowError):
        return None
    return value if value > 0 else None


def mode_request(
    ann: Mapping[str, str], tables: ModeTables | None, problems: list[str]
) -> ModeRequest | None:
    """The power mode of a pod's annotations snapped onto the board's tables (None: not asked,
    incomplete, invalid or unsupported; each case appends to `problems`)."""
    given = [k for k in POWER_MODE_ANNOTATIONS if k in ann]
    if not given:
        return None
    if len(given) != len(POWER_MODE_ANNOTATIONS):
        missing = [k for k in POWER_MODE_ANNOTATIONS if k not in ann]
        problems.append(f"a power mode needs all of {', '.join(POWER_MODE_ANNOTATIONS)};"
                        f" missing {', '.join(missing)}; power mode ignored")
        return None
    values = [_positive_int(str(ann[k]).strip()) for k in POWER_MODE_ANNOTATIONS]
    bad = [f"{k}={ann[k]!r}" for k, v in zip(POWER_MODE_ANNOTATIONS, values, strict=True)
           if v is None]
    if bad:
        problems.append(f"{', '.join(bad)} not a positive integer; power mode ignored")
        return None
    cores, cpu, emc = (int(v or 0) for v in values)
    if tables is None:
        problems.append("this board's CPU and memory clock controls are unknown to the agent;"
                        " power mode ignored (the GPU frequency is still pinned)")
        return None
    snapped = ModeRequest(min(cores, tables.cpu_cores), snap_down(cpu, tables.cpu_freqs_hz),
                          snap_down(emc, tables.emc_freqs_hz))
    if snapped != ModeRequest(cores, cpu, emc):
        problems.append(
            f"power mode {cores} cores, CPU {cpu} Hz, EMC {emc} Hz is not on this board's"
            f" tables; using {snapped.cpu_cores} cores, CPU {snapped.cpu_freq_hz} Hz,"
            f" EMC {snapped.emc_freq_hz} Hz")
    return snapped


def pod_request(
    pod: Obj, table: Sequence[int], mode_tables: ModeTables | None = None
) -> PodRequest | None:
    """The request of one pod, or None if it is finished or asks for nothing."""
    if not pod_active(pod):
        return None
    meta = pod.get("metadata", {})
    ann = meta.get("annotations") or {}
    if (ANNOTATION_GPU_FREQUENCY_HZ not in ann and ANNOTATION_POWER_LIMIT_WATTS not in ann
            and not any(k in ann for k in POWER_MODE_ANNOTATIONS)):
        return None
    problems: list[str] = []
    freq: int | None = None
    requested: int | None = None
    if ANNOTATION_GPU_FREQUENCY_HZ in ann:
        raw = str(ann[ANNOTATION_GPU_FREQUENCY_HZ]).strip()
        try:
            requested = int(float(raw))
            if requested <= 0:
                raise ValueError(raw)
        except ValueError:
            problems.append(
                f"{ANNOTATION_GPU_FREQUENCY_HZ}={raw!r} is not a positive frequency in Hz; ignored"
            )
            requested = None
        if requested is not None:
            if table:
                freq = snap_down(requested, table)
                if freq != requested:
                    problems.append(
                        f"{ANNOTATION_GPU_FREQUENCY_HZ}={requested} is not in the GPU table; "
                        f"using {freq} Hz (table: "
                        f"{', '.join(f'{f / 1e6:g}' for f in sorted(table))} MHz)")
            else:
                freq = requested
    limit: float | None = None
    if ANNOTATION_POWER_LIMIT_WATTS in ann:
        raw = str(ann[ANNOTATION_POWER_LIMIT_WATTS]).strip()
        try:
            limit = float(raw)
            if not math.isfinite(limit) or limit <= 0:
                raise ValueError(raw)
        except ValueError:
            problems.append(f"{ANNOTATION_POWER_LIMIT_WATTS}={raw!r} is not a positive number of "
                            "watts; ignored")
            limit = None
    mode = mode_request(ann, mode_tables, problems)
    return PodRequest(
        namespace=str(meta.get("namespace", "")), name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")), training_job=training_job(pod), freq_hz=freq,
        requested_hz=requested, power_limit_w=limit, mode=mode, problems=tuple(problems),
    )


def reconcile(
    pods: Iterable[Obj], table: Sequence[int], mode_tables: ModeTables | None = None
) -> Desired:
    """Desired state of the node from its pods: the lowest requested frequency wins (ties go
    to the first pod by namespace/name), and so does the lowest power limit. The power mode
    comes with the pinned pod (its profile was measured in that mode), else the first asked."""
    requests = sorted((r for p in pods if (r := pod_request(p, table, mode_tables)) is not None),
                      key=lambda r: r.key)
    freq_reqs = sorted((r for r in requests if r.freq_hz is not None),
                       key=lambda r: (r.freq_hz, r.key))
    limit_reqs = sorted((r for r in requests if r.power_limit_w is not None),
                        key=lambda r: (r.power_limit_w, r.key))
    owner = freq_reqs[0] if freq_reqs else None
    conflicts = tuple(Conflict(owner, r) for r in freq_reqs[1:]
                      if owner is not None and r.freq_hz != owner.freq_hz)
    limit_owner = limit_reqs[0] if limit_reqs else None
    mode_owner = (owner if owner is not None and owner.mode is not None
                  else next((r for r in requests if r.mode is not None), None))
    return Desired(
        freq_hz=owner.freq_hz if owner else None,
        owner=owner,
        power_limit_w=limit_owner.power_limit_w if limit_owner else None,
        limit_owner=limit_owner,
        requests=tuple(requests),
        conflicts=conflicts,
        mode=mode_owner.mode if mode_owner else None,
        mode_owner=mode_owner,
    )


@dataclass(frozen=True)
class Range:
    """A devfreq min/max pair in Hz."""

    min_hz: int
    max_hz: int


def target_range(desired: Desired, saved: Range, guard_cap_hz: int | None) -> Range | None:
    """The range to write, or None to restore `saved` (nothing asked).

    A pinned frequency gives min = max = min(pin, guard cap). A power limit alone caps the
    saved range's max at the guard cap (the guard starts at the saved max)."""
    if not desired.active:
        return None
    if desired.freq_hz is not None:
        f = desired.freq_hz if guard_cap_hz is None else min(desired.freq_hz, guard_cap_hz)
        return Range(f, f)
    cap = saved.max_hz if guard_cap_hz is None else min(saved.max_hz, guard_cap_hz)
    return Range(min(saved.min_hz, cap), cap)


def mode_raises(current: ModeRequest | None, target: ModeRequest) -> bool:
    """True when `target` raises any of the mode's controls above `current` (unknown: raises)."""
    if current is None:
        return True
    return (target.cpu_cores > current.cpu_cores or target.cpu_freq_hz > current.cpu_freq_hz
            or target.emc_freq_hz > current.emc_freq_hz)


def pin_first(current_max_hz: int, target: Range | None, current_mode: ModeRequest | None,
              mode: ModeRequest | None) -> bool:
    """Whether the GPU range goes before the power mode in one pass: whichever lowers the
    draw goes first, so the state in between never draws more than both the old and the new
    setting. The pin goes first unless it raises the GPU clock while the mode only lowers."""
    if target is None or mode is None:
        return True
    return not (target.max_hz > current_max_hz and not mode_raises(current_mode, mode))


def guard_ceiling(desired: Desired, saved: Range) -> int:
    """The frequency the guard starts from: the pin, else the saved max."""
    return desired.freq_hz if desired.freq_hz is not None else saved.max_hz


@dataclass(frozen=True)
class GuardDecision:
    """Outcome of one guard evaluation."""

    step_to_hz: int | None  # the next lower table level, or None (no action)
    mean_power_w: float | None  # mean over the evaluated window (None: not enough samples)
    reason: str


def guard_decision(
    samples: Sequence[tuple[float, float]],
    now_s: float,
    since_s: float,
    limit_w: float,
    window_s: float,
    table: Sequence[int],
    current_cap_hz: int,
    min_coverage: float = 0.8,
) -> GuardDecision:
    """Step down one level when power stayed above `limit_w` over the last `window_s`.

    `samples` are (monotonic time, watts). Only samples after `since_s` (the pin, or the last
    step) count, so every step waits a full window at the new level before the next one. The
    window counts as "sustained" once the samples cover `min_coverage` of it and their mean is
    above the limit. Never returns a level above `current_cap_hz`."""
    start = max(since_s, now_s - window_s)
    window = [(t, w) for t, w in samples if start <= t <= now_s]
    if len(window) < 2 or now_s - since_s < window_s:
        return GuardDecision(None, None, "window not yet full")
    span = window[-1][0] - window[0][0]
    if span < min_coverage * window_s:
        return GuardDecision(None, None, f"samples cover {span:.2f} s of {window_s:.2f} s")
    mean = sum(w for _, w in window) / len(window)
    if mean <= limit_w:
        return GuardDecision(None, mean, f"mean {mean:.2f} W ≤ limit {limit_w:.2f} W")
    lower = [f for f in sorted(table) if f < current_cap_hz]
    if not lower:
        return GuardDecision(None, mean, f"mean {mean:.2f} W > limit {limit_w:.2f} W at the "
                                         "lowest GPU frequency; nothing left to step down")
    return GuardDecision(lower[-1], mean, f"mean {mean:.2f} W over {window_s:g} s > limit "
                                          f"{limit_w:.2f} W")


@dataclass
class EventDeduper:
    """Remembers which (object, reason, message) Events were already sent."""

    seen: set[tuple[str, str, str]] = field(default_factory=set)

    def first(self, obj_key: str, reason: str, message: str) -> bool:
        """True the first time this triple is seen."""
        key = (obj_key, reason, message)
        if key in self.seen:
            return False
        self.seen.add(key)
        return True

    def keep_only(self, obj_keys: set[str]) -> None:
        """Forget objects that are gone (bounded memory over a long-running agent)."""
        self.seen = {k for k in self.seen if k[0] in obj_keys}


def progress_values(annotations: Mapping[str, str]) -> dict[str, float]:
    """Training progress from pod annotations (samples, accuracy); bad values are skipped."""
    out: dict[str, float] = {}
    for key, name in ((ANNOTATION_TRAINING_SAMPLES, "samples"),
                      (ANNOTATION_TRAINING_ACCURACY, "accuracy")):
        if key in annotations:
            try:
                value = float(annotations[key])
            except (TypeError, ValueError):
                continue
            if math.isfinite(value):
                out[name] = value
    return out
