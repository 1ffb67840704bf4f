"""The node agent process: watches its node's pods, pins and restores the GPU frequency, runs
the power guard, labels its Node and serves /metrics, /healthz and /readyz.

Decisions live in `logic` (pure); this module is the I/O around them. Slightly over 500 lines
because the GPU range and the power mode share one state file and one restore-on-restart path."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from edgetrain.device import (
    BoardIdentity,
    DeviceError,
    GpuDevfreq,
    PowerSampler,
    detect_board,
    read_thermal_zones,
    resolve_root,
    select_power_sensor,
)
from edgetrain.device.devfreq import FrequencyRange
from edgetrain.device.power_mode import PowerModeWriter
from edgetrain.device.sim import BOARDS
from edgetrain.kube import KubeApiError, KubeClient, Obj, api_path, wait_for_stop_signal
from edgetrain.node_agent import kube as k
from edgetrain.node_agent.detect import agent_labels
from edgetrain.node_agent.logic import (
    Desired,
    EventDeduper,
    ModeRequest,
    ModeTables,
    PodRequest,
    Range,
    guard_ceiling,
    guard_decision,
    pin_first,
    progress_values,
    reconcile,
    target_range,
)
from edgetrain.node_agent.metrics import AgentMetrics
from edgetrain.node_agent.state import PinState, load_state, save_state

log = logging.getLogger("edgetrain.node_agent")

RESYNC_S = 30.0


@dataclass(frozen=True)
class AgentConfig:
    """Settings of one agent (CLI flags / chart values)."""

    node: str
    state_file: Path
    sysfs_root: Path | None = None
    metrics_address: str = "127.0.0.1"
    metrics_port: int = 9400
    guard_window_s: float = 30.0
    sample_interval_s: float = 0.1
    tick_s: float = 0.5
    power_backend: str = "auto"
    label_node: bool = True
    device_tree: Path | None = None  # the host's devicetree directory (chart: a mount)


# An Event to post once a pass has written everything: (pod, reason, message, type).
_Report = tuple[PodRequest, str, str, str]


def _ref(req: PodRequest) -> Obj:
    return {"namespace": req.namespace, "name": req.name, "uid": req.uid}


def _mhz(freq_hz: int) -> str:
    return f"{freq_hz / 1e6:g} MHz"


class NodeAgent:
    """One agent for one node."""

    def __init__(self, config: AgentConfig, client: KubeClient) -> None:
        self.config = config
        self.client = client
        self.node = config.node
        self.root = resolve_root(config.sysfs_root)
        self.metrics = AgentMetrics(self.node)
        self.stop_event = threading.Event()
        self.devfreq: GpuDevfreq | None = None
        self.table: list[int] = []
        self.sampler: PowerSampler | None = None
        self.sensor: Any = None
        self.state = PinState(node=self.node)
        self._pods: dict[str, Obj] = {}
        self._pods_lock = threading.Lock()
        self._dirty = threading.Event()
        self._events = EventDeduper()
        self._guard_since = time.monotonic()
        self._last_tick: float | None = None
        self._last_energy_t: float | None = None
        self._synced = False
        self._labelled = False
        self._errors: list[str] = []
        self._threads: list[threading.Thread] = []
        self._http: ThreadingHTTPServer | None = None
        self._sampler_seen = 0.0
        self._sampler_errors_seen = 0
        self.metrics_port = config.metrics_port
        self.board_id: str | None = None
        self.mode_tables: ModeTables | None = None
        self._mode_refused: list[int] | None = None  # a mode whose writes failed: not retried

    # --- lifecycle ---

    def start(self) -> NodeAgent:
        """Open the device, restore/re-apply the persisted pin, label the Node, start loops."""
        self.devfreq = GpuDevfreq.discover(self.root)
        self.table = sorted(self.devfreq.available_frequencies_hz())
        self.sensor = select_power_sensor(self.root, prefer=self.config.power_backend)
        self.sampler = PowerSampler(self.sensor, interval_s=self.config.sample_interval_s,
                                    history_s=max(120.0, 4 * self.config.guard_window_s)).start()
        self.state = load_state(self.config.state_file)
        self.state.node = self.node
        board = detect_board(self.root, self.config.device_tree)
        self.board_id = board.board_id
        spec = BOARDS.get(board.board_id or "")
        if spec is not None:  # boards whose CPU/EMC controls edgetrain knows (jetson-facts.md)
            self.mode_tables = ModeTables(spec.cpu_cores, spec.cpu_freqs_hz, spec.emc_freqs_hz)
        simulated = (self.root / "run" / "edgetrain-twin").is_dir()
        backend = type(self.sensor).__name__
        self.metrics.node_info.labels(self.node, board.board_id or "unknown", board.l4t or "",
                                      board.soc or "", backend,
                                      str(simulated).lower()).set(1)
        for i, f in enumerate(self.table):
            self.metrics.freq_table.labels(self.node, str(i)).set(f)
        self._serve_http()
        if self.config.label_node:
            self._label_node(board)
        self._list_pods()
        self._tick()  # restore a leaked pin or re-apply a held one before anything else
        self._synced = True  # ready only now: /readyz must not answer before that restore
        for target, name in ((self._watch_pods, "pod-watch"), (self._loop, "control-loop")):
            t = threading.Thread(target=target, name=name, daemon=True)
            t.start()
            self._threads.append(t)
        log.info("node agent for %s ready: %s, %d GPU levels, metrics on %s:%d", self.node,
                 board.board_id, len(self.table), self.config.metrics_address,
                 self.metrics_port)
        return self

    def stop(self) -> None:
        """Stop loops and the HTTP server. A held pin stays (its pod may still run); the state
        file lets the next agent restore it."""
        self.stop_event.set()
        self._dirty.set()
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
        for t in self._threads:
            if t.name == "control-loop":  # the watch thread is a daemon blocked in a stream
                t.join(timeout=5.0)
        if self.sampler is not None:
            self.sampler.stop()

    def run_forever(self) -> None:
        """Block until SIGTERM/SIGINT."""
        try:
            wait_for_stop_signal(self.stop_event)
        finally:
            self.stop()

    # --- API server ---

    def _label_node(self, board: BoardIdentity) -> None:
        """Everything the operator reads of a Jetson, from the device, in one patch."""
        labels, annotations = agent_labels(board, self.table)
        k.label_node(self.client, self.node, labels, annotations)
        self._labelled = True

    def _pods_path(self) -> str:
        return "/api/v1/pods"

    def _list_pods(self) -> None:
        listing = self.client.get(self._pods_path(), fieldSelector=f"spec.nodeName={self.node}")
        with self._pods_lock:
            self._pods = {p["metadata"]["uid"]: p for p in listing.get("items", [])}
        self._dirty.set()

    def _watch_pods(self) -> None:
        stream = self.client.list_watch(self._pods_path(), self.stop_event,
                                        fieldSelector=f"spec.nodeName={self.node}")
        for kind, pod in stream:
            uid = pod["metadata"]["uid"]
            with self._pods_lock:
                if kind == "DELETED":
                    self._pods.pop(uid, None)
                else:
                    self._pods[uid] = pod
            self._dirty.set()

    def _event(self, req: PodRequest, reason: str, message: str, kind: str = "Normal",
               once: bool = True) -> None:
        if once and not self._events.first(req.uid, reason, message):
            return
        log.info("event %s on %s: %s", reason, req.key, message)
        try:
            k.post_event(self.client, _ref(req), self.node, reason, message, kind)
        except KubeApiError as exc:
            log.warning("could not record event %s on %s: %s", reason, req.key, exc)

    # --- control loop ---

    def _loop(self) -> None:
        last_resync = time.monotonic()
        while not self.stop_event.is_set():
            self._dirty.wait(self.config.tick_s)
            self._dirty.clear()
            if self.stop_event.is_set():
                return
            try:
                if time.monotonic() - last_resync > RESYNC_S:
                    last_resync = time.monotonic()
                    self._list_pods()
                self._tick()
            except Exception as exc:
                log.exception("node agent tick failed")
                self._errors = [f"{type(exc).__name__}: {exc}"]

    def _tick(self) -> None:
        with self._pods_lock:
            pods = list(self._pods.values())
        desired = reconcile(pods, self.table, self.mode_tables)
        self._events.keep_only({p["metadata"]["uid"] for p in pods})
        self._announce(desired)
        # A pod's whole setting (GPU range and power mode) lands in one pass, lowering first;
        # only then is it reported, so nothing reads "pinned" while half of it is missing.
        report: list[_Report] = []
        if self._pin_first(desired):
            self._apply(desired, report)
            self._apply_mode(desired, report)
        else:
            self._apply_mode(desired, report)
            self._apply(desired, report)
        for req, reason, message, kind in report:
            self._event(req, reason, message, kind)
        self._guard(desired)
        self._update_metrics(desired, pods)
        self._last_tick = time.monotonic()
        self._errors = []

    def _announce(self, desired: Desired) -> None:
        for req in desired.requests:
            for problem in req.problems:
                self._event(req, "InvalidGpuAnnotation", problem, "Warning")
        for c in desired.conflicts:
            assert c.winner.freq_hz is not None and c.loser.freq_hz is not None
            msg = (f"node {self.node}: pods {c.winner.key} ({_mhz(c.winner.freq_hz)}) and "
                   f"{c.loser.key} ({_mhz(c.loser.freq_hz)}) ask for different GPU "
                   f"frequencies; the lower one, {_mhz(c.winner.freq_hz)}, is pinned")
            self._event(c.loser, "GpuFrequencyConflict", msg, "Warning")
            self._event(c.winner, "GpuFrequencyConflict", msg, "Warning")

    def _saved(self) -> Range:
        st = self.state
        assert st.saved_min_hz is not None and st.saved_max_hz is not None
        return Range(st.saved_min_hz, st.saved_max_hz)

    def _write_range(self, rng: Range) -> None:
        assert self.devfreq is not None
        current = self.devfreq.current_range()
        if (current.min_freq_hz, current.max_freq_hz) != (rng.min_hz, rng.max_hz):
            self.devfreq.set_range(rng.min_hz, rng.max_hz)

    def _pin_first(self, desired: Desired) -> bool:
        """Which of the range and the mode lowers the draw, so goes first (logic.pin_first)."""
        assert self.devfreq is not None
        if desired.mode is None or not desired.active or self.board_id not in BOARDS:
            return True
        assert self.board_id is not None
        current = PowerModeWriter(self.root, self.board_id).read()
        target = target_range(desired, self._saved() if self.state.holding else Range(
            *self._current()), self.state.guard_cap_hz)
        return pin_first(self._current()[1], target,
                         ModeRequest(*current) if current else None, desired.mode)

    def _current(self) -> tuple[int, int]:
        assert self.devfreq is not None
        cur = self.devfreq.current_range()
        return (cur.min_freq_hz, cur.max_freq_hz)

    def _apply(self, desired: Desired, report: list[_Report] | None = None) -> None:
        assert self.devfreq is not None
        st = self.state
        path = self.config.state_file
        if not desired.active:
            if st.holding:
                saved = self._saved()
                self.devfreq.restore(FrequencyRange(min_freq_hz=saved.min_hz,
                                                    max_freq_hz=saved.max_hz))
                log.info("restored GPU range %s-%s (was held for %s)", _mhz(saved.min_hz),
                         _mhz(saved.max_hz), st.owner)
                self.state = PinState(node=self.node, saved_mode_files=st.saved_mode_files,
                                      applied_mode=st.applied_mode, mode_owner=st.mode_owner)
                save_state(path, self.state)
            return
        if not st.holding:
            cur = self.devfreq.current_range()
            st.saved_min_hz, st.saved_max_hz = cur.min_freq_hz, cur.max_freq_hz
            save_state(path, st)  # persist what to restore before changing anything
        signature = [float(desired.freq_hz) if desired.freq_hz is not None else None,
                     desired.power_limit_w]
        if st.guard_signature != signature:
            st.guard_cap_hz = None
            st.guard_signature = signature
            self._guard_since = time.monotonic()
        target = target_range(desired, self._saved(), st.guard_cap_hz)
        assert target is not None
        owner = desired.owner or desired.limit_owner
        changed = (st.applied_min_hz, st.applied_max_hz) != (target.min_hz, target.max_hz)
        try:
            self._write_range(target)
        except DeviceError as exc:
            if owner is not None:
                self._event(owner, "GpuFrequencyPinFailed", str(exc), "Warning")
            raise
        if changed or (owner is not None and st.owner_uid != owner.uid):
            st.applied_min_hz, st.applied_max_hz = target.min_hz, target.max_hz
            st.owner = owner.key if owner else None
            st.owner_uid = owner.uid if owner else None
            save_state(path, st)
            if desired.owner is not None and desired.freq_hz is not None:
                pinned: _Report = (desired.owner, "GpuFrequencyPinned",
                                   f"node {self.node}: GPU pinned at {_mhz(target.min_hz)} "
                                   f"(requested {_mhz(desired.freq_hz)})", "Normal")
                if report is None:
                    self._event(*pinned)
                else:
                    report.append(pinned)

    def _apply_mode(self, desired: Desired, report: list[_Report]) -> None:
        """Set the pinned pod's CPU cores, CPU clock cap and EMC clock; put the originals back
        when no pod asks (also after a restart: they are in the state file)."""
        st, path = self.state, self.config.state_file
        if desired.mode is None:
            if st.saved_mode_files is not None and self.board_id in BOARDS:
                assert self.board_id is not None
                PowerModeWriter(self.root, self.board_id, st.saved_mode_files).restore()
                log.info("restored the power mode (was held for %s)", st.mode_owner)
                st.saved_mode_files = st.applied_mode = st.mode_owner = None
                save_state(path, st)
            return
        mode, owner = desired.mode, desired.mode_owner
        target = [mode.cpu_cores, mode.cpu_freq_hz, mode.emc_freq_hz]
        if st.applied_mode == target or self._mode_refused == target:
            return
        assert self.board_id is not None and owner is not None  # mode_tables imply a board
        writer = PowerModeWriter(self.root, self.board_id, st.saved_mode_files)
        try:
            st.saved_mode_files = writer.snapshot()
            save_state(path, st)  # persist what to restore before changing anything
            writer.apply(*target)
        except OSError as exc:
            # Not fatal: the GPU pin and the guard still hold. Typically the controls are not
            # mounted writable (chart value agent.boards.<board>.powerModes).
            with contextlib.suppress(OSError):
                writer.restore()
            st.saved_mode_files = None
            save_state(path, st)
            self._mode_refused = target
            report.append((owner, "PowerModeFailed",
                           f"node {self.node}: power mode not set ({exc}); the GPU pin and power"
                           " guard still apply. Mount the CPU and EMC controls writable (chart:"
                           f" agent.boards.{self.board_id}.powerModes=true)", "Warning"))
            log.warning("power mode %s for %s not set: %s", target, owner.key, exc)
            return
        st.applied_mode, st.mode_owner = target, owner.key
        save_state(path, st)
        report.append((owner, "PowerModeSet",
                       f"node {self.node}: {mode.cpu_cores} CPU cores at ≤"
                       f" {_mhz(mode.cpu_freq_hz)}, EMC {_mhz(mode.emc_freq_hz)}", "Normal"))

    def _guard(self, desired: Desired) -> None:
        st = self.state
        limit = desired.power_limit_w
        if limit is None or not st.holding or self.sampler is None:
            self.metrics.guard_cap.labels(self.node).set(0)
            return
        saved = self._saved()
        cap = st.guard_cap_hz or guard_ceiling(desired, saved)
        now = time.monotonic()
        window = self.config.guard_window_s
        samples = [(s.timestamp_s, s.power_w)
                   for s in self.sampler.samples(start_s=now - window - 1.0)]
        decision = guard_decision(samples, now, self._guard_since, limit, window, self.table,
                                  cap)
        self.metrics.guard_cap.labels(self.node).set(cap)
        if decision.step_to_hz is None:
            return
        st.guard_cap_hz = decision.step_to_hz
        st.guard_steps += 1
        save_state(self.config.state_file, st)
        self._guard_since = time.monotonic()
        self._apply(desired)
        self.metrics.guard_cap.labels(self.node).set(decision.step_to_hz)
        who = desired.limit_owner
        assert who is not None
        self.metrics.guard_steps.labels(*self.metrics.pod_labels(
            who.namespace, who.name, who.training_job)).inc()
        msg = (f"node {self.node}: {decision.reason}; GPU stepped down {_mhz(cap)} → "
               f"{_mhz(decision.step_to_hz)}")
        self._event(who, "PowerGuardStepDown", msg, "Warning", once=False)
        if desired.owner is not None and desired.owner.uid != who.uid:
            self._event(desired.owner, "PowerGuardStepDown", msg, "Warning", once=False)

    # --- metrics ---

    def _update_metrics(self, desired: Desired, pods: list[Obj]) -> None:
        m, node = self.metrics, self.node
        assert self.devfreq is not None and self.sampler is not None
        with contextlib.suppress(OSError, ValueError, DeviceError):
            m.freq.labels(node, "current").set(self.devfreq.cur_freq_hz())
            m.freq.labels(node, "min").set(self.devfreq.min_freq_hz())
            m.freq.labels(node, "max").set(self.devfreq.max_freq_hz())
        try:
            reading = self.sensor.read()
            for rail in reading.rails:
                m.power.labels(node, rail.name).set(rail.power_mw / 1000.0)
            m.power_total.labels(node, reading.total_rule).set(reading.total_power_w)
        except Exception as exc:  # a sensor hiccup must not stop the loop
            log.debug("power read failed: %s", exc)
        for zone in read_thermal_zones(self.root):
            if zone.temp_c is not None:
                m.temp.labels(node, zone.name).set(zone.temp_c)
        # Sampler health.
        samples = self.sampler.samples()
        now = time.monotonic()
        total = len(samples)
        age = now - samples[-1].timestamp_s if samples else float("inf")
        fresh = age < max(2.0, 10 * self.config.sample_interval_s)
        m.sampler_up.labels(node).set(1 if fresh else 0)
        m.sampler_age.labels(node).set(age if samples else -1)
        errors = self.sampler.errors
        if errors > self._sampler_errors_seen:
            m.sampler_errors.labels(node).inc(errors - self._sampler_errors_seen)
            self._sampler_errors_seen = errors
        m.sampler_errors.labels(node)  # make the series exist at 0
        newest = samples[-1].timestamp_s if samples else 0.0
        new = [s for s in samples if s.timestamp_s > self._sampler_seen] if samples else []
        m.sampler_samples.labels(node).inc(len(new))
        self._sampler_seen = newest if total else self._sampler_seen
        # Pin and per-pod series.
        m.pinned.labels(node).set(desired.freq_hz or 0)
        m.pinned_pod.clear()
        if desired.owner is not None and desired.freq_hz is not None:
            o = desired.owner
            m.pinned_pod.labels(*m.pod_labels(o.namespace, o.name, o.training_job)).set(
                desired.freq_hz)
        m.pods_watched.labels(node).set(len(pods))
        last = self._last_energy_t
        window = [s.power_w for s in samples if last is None or s.timestamp_s > last]
        mean_w = sum(window) / len(window) if window else None
        dt_s = (now - last) if last is not None else 0.0
        self._last_energy_t = now
        keep: set[tuple[str, str, str]] = set()
        by_uid = {p["metadata"]["uid"]: p for p in pods}
        for req in desired.requests:
            key = (req.namespace, req.name, req.training_job)
            labels = m.pod_labels(*key)
            keep.add(key)
            m.touch_pod(key)
            if req.power_limit_w is not None:
                m.limit.labels(*labels).set(req.power_limit_w)
            if mean_w is not None:
                m.pod_power.labels(*labels).set(mean_w)
                m.pod_energy.labels(*labels).inc(mean_w * dt_s)
            ann = (by_uid.get(req.uid, {}).get("metadata", {}).get("annotations") or {})
            progress = progress_values(ann)
            if "samples" in progress:
                m.train_samples.labels(*labels).set(progress["samples"])
            if "accuracy" in progress:
                m.train_accuracy.labels(*labels).set(progress["accuracy"])
        m.retire_pods(keep)

    # --- HTTP ---

    def health(self) -> tuple[bool, str]:
        """Liveness: the control loop ticked recently."""
        if self._last_tick is None:
            return True, "starting"
        age = time.monotonic() - self._last_tick
        limit = max(10.0, 20 * self.config.tick_s)
        return (age < limit, f"last tick {age:.1f} s ago")

    def ready(self) -> tuple[bool, str]:
        """Readiness: device open, Node labelled, pods listed, sampler fresh, no loop error."""
        reasons = []
        if self.devfreq is None:
            reasons.append("GPU devfreq not opened")
        if self.config.label_node and not self._labelled:
            reasons.append("Node not labelled yet")
        if not self._synced:
            reasons.append("pods not listed and applied yet")
        if self.sampler is None or not self.sampler.samples(start_s=time.monotonic() - 5.0):
            reasons.append("no power sample in the last 5 s")
        reasons += self._errors
        return (not reasons, "; ".join(reasons) or "ok")

    def _serve_http(self) -> None:
        agent = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    body = generate_latest(agent.metrics.registry)
                    self._send(200, body, CONTENT_TYPE_LATEST)
                elif path in ("/healthz", "/readyz"):
                    ok, why = agent.health() if path == "/healthz" else agent.ready()
                    self._send(200 if ok else 503, (why + "\n").encode(), "text/plain")
                else:
                    self._send(404, b"not found\n", "text/plain")

            def _send(self, code: int, body: bytes, ctype: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return

        server = ThreadingHTTPServer((self.config.metrics_address, self.config.metrics_port),
                                     Handler)
        server.daemon_threads = True
        self._http = server
        self.metrics_port = server.server_address[1]
        t = threading.Thread(target=server.serve_forever, name="http", daemon=True)
        t.start()
        self._threads.append(t)


__all__ = ["AgentConfig", "NodeAgent", "api_path"]
