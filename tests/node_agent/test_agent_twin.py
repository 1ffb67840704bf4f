"""The node agent as a real process against the real API server, over a device twin of the
test's own, for the pods of the session's real Nano node (its sleeper pods run there, in
containers): pin/restore across pod lifetimes and agent restarts, conflicts, node labels, the
power guard."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from edgetrain.cluster import KubeClient, LocalCluster, api_path
from edgetrain.cluster.twin import SimTwin
from edgetrain.device import GpuDevfreq
from edgetrain.node_agent.state import load_state
from tests.cluster.fixtures import NANO, enforce_pod_security
from tests.cluster.realnodes import RealCluster
from tests.helpers import http_get
from tests.node_agent.helpers import (
    AgentProcess,
    events,
    sample_value,
    sleeper_pod,
    wait_until,
)

NODE = NANO
MHZ = 1_000_000


class Nano:
    """The session's Nano as this test's agent sees it: a twin of its own (`host_root`, what the
    agent reads as /sys), the real node running the pods."""

    def __init__(self, twin: SimTwin) -> None:
        self.twin = twin
        self.host_root = twin.root


@pytest.fixture
def nano(trainer_images: RealCluster, kube: KubeClient, tmp_path: Path) -> Iterator[Nano]:
    """The session's first Nano, once no earlier test's pod is stopping on it, and an idle twin
    at its full range for this test's agent."""
    wait_until(lambda: not _stopping_pods(kube), 180, f"no pod stopping on {NODE}",
               interval_s=0.5)
    twin = SimTwin("jetson-nano", tmp_path / "twin")
    try:
        yield Nano(twin)
    finally:
        twin.close()


def _stopping_pods(kube: KubeClient) -> list[str]:
    """Pods on NODE being deleted, or in a namespace being deleted."""
    leaving = {ns["metadata"]["name"] for ns in kube.get(api_path("v1", "namespaces"))["items"]
               if ns["metadata"].get("deletionTimestamp")}
    pods = kube.get(api_path("v1", "pods"), fieldSelector=f"spec.nodeName={NODE}")["items"]
    return [f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in pods
            if p["metadata"].get("deletionTimestamp") or p["metadata"]["namespace"] in leaving]


@pytest.fixture
def agent(cluster: LocalCluster, nano: Nano, tmp_path: Path) -> Iterator[AgentProcess]:
    proc = AgentProcess(NODE, nano.host_root, cluster.kubeconfig, tmp_path / "state.json",
                        tmp_path / "agent.log", guard_window_s=1.0)
    try:
        yield proc
    finally:
        proc.stop()


def rng(root: Path) -> tuple[int, int]:
    r = GpuDevfreq.discover(root).current_range()
    return (r.min_freq_hz, r.max_freq_hz)


def twin_mode(root: Path) -> tuple[int, int, int]:
    """The twin's power mode as its model reads it: (CPU cores, CPU clock Hz, EMC Hz)."""
    from edgetrain.device.sim import read_state

    st = read_state(root)
    assert st is not None
    return (st.cpu_cores, st.cpu_freq_hz, st.emc_freq_hz)


def create(kube: KubeClient, ns: str, pod: dict[str, Any]) -> None:
    kube.create(api_path("v1", "pods", ns), pod)


def phase(kube: KubeClient, ns: str, name: str) -> str:
    obj = kube.get_or_none(api_path("v1", "pods", ns, name))
    return "Gone" if obj is None else str(obj.get("status", {}).get("phase"))


def delete_and_wait(kube: KubeClient, ns: str, name: str) -> None:
    kube.delete_ignore_missing(api_path("v1", "pods", ns, name))
    wait_until(lambda: phase(kube, ns, name) == "Gone", 30, f"pod {name} gone")


def test_labels_pin_restore_and_restart(kube: KubeClient, namespace: str, nano: Nano,
                                        agent: AgentProcess) -> None:
    root: Path = nano.host_root
    original = rng(root)
    assert original[0] < original[1]
    # The agent (not only the node setup) labels its Node: drop a label, the agent restores it.
    kube.patch(api_path("v1", "nodes", name=NODE),
               {"metadata": {"labels": {"edgetrain.io/l4t": None}}}, "merge")
    agent.start()
    node = kube.get(api_path("v1", "nodes", name=NODE))
    assert node["metadata"]["labels"]["edgetrain.io/l4t"] == "32.7.1"
    assert node["metadata"]["labels"]["edgetrain.io/device-model"] == "jetson-nano"
    ann = node["metadata"]["annotations"]
    assert ann["edgetrain.io/gpu-frequencies-hz"].split(",")[0] == "76800000"
    assert ann["edgetrain.io/node-agent"] == "running"
    assert http_get(f"{agent.url}/healthz").status_code == 200

    # 1. Pin while the pod runs, restore when it finishes. The pod is a restricted one (UID
    #    65532, no capabilities) in a namespace that enforces `restricted`, as the operator's.
    enforce_pod_security(kube, namespace)
    create(kube, namespace, sleeper_pod("short", NODE, 5, freq_hz=460_800_000))
    wait_until(lambda: rng(root) == (460_800_000, 460_800_000), 20, "pin at 460.8 MHz")
    # The agent writes the clock, posts its Event, then updates its metrics: the files can
    # show the pin a moment (an API round trip on a busy machine) before /metrics does.
    def pin_exported() -> bool:
        text = agent.metrics()
        return (sample_value(text, "edgetrain_gpu_pinned_frequency_hz", node=NODE) == 460_800_000
                and sample_value(text, "edgetrain_pinned_pod_info", pod="short") == 460_800_000)

    wait_until(pin_exported, 5, "the pin in the agent's metrics")
    assert load_state(agent.state_file).holding
    wait_until(lambda: phase(kube, namespace, "short") == "Succeeded", 30, "pod finished")
    wait_until(lambda: rng(root) == original, 10, "range restored after the pod finished")
    # The range is restored first, then the state cleared (a crash in between re-restores).
    wait_until(lambda: not load_state(agent.state_file).holding, 5, "state cleared")
    assert events(kube, namespace, "GpuFrequencyPinned")

    # 2. The pod is deleted while the agent is down: the restarted agent restores (no leak).
    create(kube, namespace, sleeper_pod("leak", NODE, 120, freq_hz=307_200_000))
    wait_until(lambda: rng(root) == (307_200_000, 307_200_000), 20, "pin at 307.2 MHz")
    agent.kill()
    delete_and_wait(kube, namespace, "leak")
    assert rng(root) == (307_200_000, 307_200_000)  # nobody restored it yet
    agent.start()
    assert rng(root) == original  # restored before the agent reported ready

    # 3. The agent restarts while the pod runs: the pin holds, and the *original* range (not
    #    the pinned one) is restored when the pod ends.
    create(kube, namespace, sleeper_pod("held", NODE, 120, freq_hz=614_400_000))
    wait_until(lambda: rng(root) == (614_400_000, 614_400_000), 20, "pin at 614.4 MHz")
    agent.kill()
    agent.start()
    assert rng(root) == (614_400_000, 614_400_000)
    state = load_state(agent.state_file)
    assert (state.saved_min_hz, state.saved_max_hz) == original and state.owner == \
        f"{namespace}/held"
    delete_and_wait(kube, namespace, "held")
    wait_until(lambda: rng(root) == original, 10, "original range restored")


def test_two_pods_lower_wins_with_event(kube: KubeClient, namespace: str, nano: Nano,
                                        agent: AgentProcess) -> None:
    root: Path = nano.host_root
    original = rng(root)
    agent.start()
    create(kube, namespace, sleeper_pod("fast", NODE, 120, freq_hz=921_600_000))
    wait_until(lambda: rng(root) == (921_600_000, 921_600_000), 20, "pin at 921.6 MHz")
    create(kube, namespace, sleeper_pod("slow", NODE, 120, freq_hz=384_000_000))
    wait_until(lambda: rng(root) == (384_000_000, 384_000_000), 20, "lower frequency wins")
    found = wait_until(lambda: events(kube, namespace, "GpuFrequencyConflict"), 10,
                       "conflict event")
    objs = {e["involvedObject"]["name"] for e in found}
    assert objs == {"fast", "slow"}
    assert "the lower one, 384 MHz, is pinned" in found[0]["message"]
    assert found[0]["source"]["component"] == "edgetrain-node-agent"
    # The low one ends: the remaining pod's frequency applies.
    delete_and_wait(kube, namespace, "slow")
    wait_until(lambda: rng(root) == (921_600_000, 921_600_000), 10, "back to 921.6 MHz")
    delete_and_wait(kube, namespace, "fast")
    wait_until(lambda: rng(root) == original, 10, "restored")


def test_power_guard_steps_down_one_level_at_a_time(kube: KubeClient, namespace: str,
                                                    nano: Nano, agent: AgentProcess) -> None:
    root: Path = nano.host_root
    table = sorted(GpuDevfreq.discover(root).available_frequencies_hz())
    original = rng(root)
    window_s = 2.0  # > the twin's settling (tau 0.8 s), so a step's tail does not trip the next
    agent.guard_window_s = window_s
    agent.start()
    limit_w = 6.0
    # resnet18 b=128 draws ~9.5 W (simulated) at 921.6 MHz; the guard must bring it under 6 W.
    nano.twin.device.set_workload("resnet18", 128)
    create(kube, namespace, sleeper_pod("hot", NODE, 120, freq_hz=921_600_000, limit_w=limit_w,
                                        labels={"edgetrain.io/job": "hot-job"}))
    wait_until(lambda: events(kube, namespace, "PowerGuardStepDown"), 30, "first step-down")
    seen: list[int] = []
    history: list[tuple[float, int, float]] = []

    def settled() -> bool:
        cur = rng(root)[1]
        if not seen or seen[-1] != cur:
            seen.append(cur)
        steps = sample_value(agent.metrics(), "edgetrain_guard_stepdowns_total", pod="hot") or 0
        now = time.monotonic()
        history.append((now, cur, steps))
        # Settled: no change of frequency or step count for two guard windows.
        stable = [h for h in history if h[0] >= now - 2 * window_s]
        return (steps > 0 and history[0][0] <= now - 2 * window_s
                and all((h[1], h[2]) == (cur, steps) for h in stable)
                and any(h[0] <= now - 2 * window_s and (h[1], h[2]) == (cur, steps)
                        for h in history))

    wait_until(settled, 90, "guard settled", interval_s=0.5)
    final = rng(root)
    assert final[0] == final[1] <= 614_400_000
    total = sample_value(agent.metrics(), "edgetrain_power_total_watts", node=NODE)
    assert total is not None and total < limit_w
    # Never above the pin, one table level per step.
    assert all(f <= 921_600_000 for f in seen)
    steps = events(kube, namespace, "PowerGuardStepDown")
    levels = table.index(921_600_000) - table.index(final[1])
    text = agent.metrics()
    assert sample_value(text, "edgetrain_guard_stepdowns_total", pod="hot") == levels
    assert len(steps) == levels
    assert sample_value(text, "edgetrain_power_limit_watts", training_job="hot-job") == limit_w
    assert sample_value(text, "edgetrain_guard_cap_hz", node=NODE) == final[1]
    # The cap survives an agent restart (the state file keeps it).
    agent.kill()
    agent.start()
    assert rng(root) == final
    delete_and_wait(kube, namespace, "hot")
    wait_until(lambda: rng(root) == original, 10, "restored after the guarded pod")


def test_power_mode_is_set_held_across_a_restart_and_restored(
    kube: KubeClient, namespace: str, nano: Nano, agent: AgentProcess
) -> None:
    """A training pod planned on a full power mode: the agent sets CPU cores, CPU cap and EMC
    on the twin with the GPU pin, and puts the originals back, also after a crash."""
    from edgetrain.api.keys import POWER_MODE_ANNOTATIONS

    root: Path = nano.host_root

    def mode() -> tuple[int, int, int]:
        return twin_mode(root)

    original = mode()
    wanted = (2, 921_600_000, 1_600_000_000)  # near the Nano's 5 W preset, on its tables
    assert wanted != original
    agent.start()
    pod = sleeper_pod("moded", NODE, 120, freq_hz=460_800_000)
    pod["metadata"]["annotations"].update(
        zip(POWER_MODE_ANNOTATIONS, map(str, wanted), strict=True))
    create(kube, namespace, pod)
    # The agent writes the range and the mode in one pass, records them, then posts its
    # Events; the twin reads its files on its own clock. Wait for the whole setting as every
    # reader sees it, not for one half of it.
    def whole_setting() -> bool:
        state = load_state(agent.state_file)
        return ((mode(), rng(root)) == (wanted, (460_800_000, 460_800_000))
                and state.applied_mode == list(wanted) and bool(state.saved_mode_files)
                and bool(events(kube, namespace, "PowerModeSet")))

    wait_until(whole_setting, 20, "power mode, GPU pin, state and Event on the twin")
    # The agent dies holding the mode, the pod is deleted meanwhile: the restart restores it.
    agent.kill()
    delete_and_wait(kube, namespace, "moded")
    assert mode() == wanted
    agent.start()
    wait_until(lambda: mode() == original and load_state(agent.state_file).saved_mode_files
               is None, 10, "original power mode restored and the state cleared")


def test_a_predicted_profile_asks_the_agent_for_each_power_mode(
    kube: KubeClient, namespace: str, nano: Any, agent: AgentProcess
) -> None:
    """A restricted profile pod of the `predicted` strategy cannot write CPU and EMC controls:
    it asks the agent for each power mode with its GPU clock (annotations on its own pod, as
    `edgetrain profile --clock-by-agent` does) and reads each back; letting go restores the
    board's mode."""
    from edgetrain.operator.worker import agent_clock_request, agent_mode_request
    from edgetrain.workloads.device_session import DeviceSession
    from edgetrain.workloads.profile_predicted import power_modes

    root: Path = nano.host_root

    def mode() -> tuple[int, int, int]:
        return twin_mode(root)

    original = mode()
    agent.start()
    create(kube, namespace, sleeper_pod("profiler", NODE, 120))
    session = DeviceSession(root, clock_request=agent_clock_request(kube, namespace, "profiler"),
                            mode_request=agent_mode_request(kube, namespace, "profiler"),
                            clock_timeout_s=20)
    modes = [(2, 921_600_000, 1_600_000_000), (1, 710_400_000, 1_600_000_000)]
    assert original not in modes
    with session, power_modes(session, "jetson-nano") as set_mode:
        for wanted in modes:
            set_mode(*wanted)
            assert mode() == wanted
            session.pin(460_800_000)  # as each point's measurement pins its clock
            assert rng(root) == (460_800_000, 460_800_000) and mode() == wanted
    wait_until(lambda: mode() == original, 10, "the board's power mode restored")
    meta = kube.get(api_path("v1", "pods", namespace, "profiler"))["metadata"]
    assert not {k for k in meta.get("annotations") or {} if k.startswith("edgetrain.io/")}, meta


def test_a_pods_whole_setting_is_written_before_it_is_reported(
    cluster: LocalCluster, kube: KubeClient, namespace: str, nano: Nano, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The agent in-process, every device write and Event recorded in order: a pod asking for
    a pin and a power mode gets both written in one pass, lowering first (the pin here), and
    only then its Events; /readyz answers only after the first pass (a restart's restore)."""
    from edgetrain.api.keys import POWER_MODE_ANNOTATIONS
    from edgetrain.device.power_mode import PowerModeWriter
    from edgetrain.node_agent import agent as agent_module
    from edgetrain.node_agent.agent import AgentConfig, NodeAgent

    log: list[str] = []
    set_range, apply_mode = GpuDevfreq.set_range, PowerModeWriter.apply
    post_event = agent_module.k.post_event

    def recording_range(self: GpuDevfreq, lo: int, hi: int) -> None:
        set_range(self, lo, hi)
        log.append(f"range {lo}-{hi}")

    def recording_mode(self: PowerModeWriter, *mode: int) -> None:
        apply_mode(self, *mode)
        log.append("mode")

    def recording_event(client: Any, ref: Any, node: str, reason: str, *rest: Any) -> None:
        post_event(client, ref, node, reason, *rest)
        log.append(f"event {reason}")

    monkeypatch.setattr(GpuDevfreq, "set_range", recording_range)
    monkeypatch.setattr(PowerModeWriter, "apply", recording_mode)
    monkeypatch.setattr(agent_module.k, "post_event", recording_event)
    # Hold the first pass: /readyz must not answer 200 until it is done.
    first_pass_may_go = threading.Event()
    tick = NodeAgent._tick

    def held_tick(self: NodeAgent) -> None:
        first_pass_may_go.wait(10)
        tick(self)

    monkeypatch.setattr(NodeAgent, "_tick", held_tick)
    agent = NodeAgent(AgentConfig(node=NODE, state_file=tmp_path / "state.json",
                                  sysfs_root=nano.host_root, metrics_port=0, tick_s=0.2,
                                  guard_window_s=30.0),
                      KubeClient.from_kubeconfig(cluster.kubeconfig))
    starter = threading.Thread(target=agent.start)
    starter.start()
    try:
        wait_until(lambda: agent._http is not None, 10, "the agent serving HTTP")
        time.sleep(0.3)
        assert http_get(f"http://127.0.0.1:{agent.metrics_port}/readyz").status_code == 503
        first_pass_may_go.set()
        starter.join(10)
        assert http_get(f"http://127.0.0.1:{agent.metrics_port}/readyz").status_code == 200
        log.clear()
        pod = sleeper_pod("whole", NODE, 60, freq_hz=460_800_000)
        pod["metadata"]["annotations"].update(zip(
            POWER_MODE_ANNOTATIONS, map(str, (2, 921_600_000, 1_600_000_000)), strict=True))
        create(kube, namespace, pod)
        wait_until(lambda: {"event GpuFrequencyPinned", "event PowerModeSet"} <= set(log), 20,
                   "both Events posted")
        writes = [i for i, entry in enumerate(log) if not entry.startswith("event")]
        reports = [i for i, entry in enumerate(log) if entry.startswith("event")]
        assert log[writes[0]] == "range 460800000-460800000", log  # the pin lowers: first
        assert max(writes) < min(reports), log
    finally:
        first_pass_may_go.set()
        agent.stop()
        PowerModeWriter(nano.host_root, "jetson-nano",
                        load_state(tmp_path / "state.json").saved_mode_files).restore()
