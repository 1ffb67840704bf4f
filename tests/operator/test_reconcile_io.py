"""Against the real API server: what one tick reads. Cluster-wide facts come from the indexes,
so every request a reconcile makes is inside the job's namespace, and only a few per phase."""

from __future__ import annotations

import time
from typing import Any

import pytest

from edgetrain.api.job_status import Phase, PowerAwareTrainingJobStatus, TrainingStatus
from edgetrain.cluster import KubeClient
from edgetrain.operator import reconcile
from edgetrain.operator import world as wd
from edgetrain.operator.phases import NodeInfo
from edgetrain.operator.reconcile import Indexes, Reconciler
from edgetrain.operator.settings import load_settings
from tests.cluster.fixtures import SERVERS
from tests.operator.test_decide import EFF, PROF, SEL, SPEC, node


class RecordingClient(KubeClient):
    """The real client, noting each request it sends."""

    def __init__(self, configuration: Any) -> None:
        super().__init__(configuration)
        self.sent: list[tuple[str, str]] = []

    def request(self, method: str, path: str, **kw: Any) -> Any:
        self.sent.append((method, path))
        return super().request(method, path, **kw)


STATUSES = {
    "estimating": PowerAwareTrainingJobStatus(phase=Phase.estimating),
    "profiling": PowerAwareTrainingJobStatus(phase=Phase.profiling, efficiency=EFF),
    "selecting": PowerAwareTrainingJobStatus(phase=Phase.selecting, efficiency=EFF,
                                             profiles=[PROF]),
    "training": PowerAwareTrainingJobStatus(phase=Phase.training, efficiency=EFF,
                                            profiles=[PROF], selection=SEL,
                                            training=TrainingStatus(job="j-train-1")),
}


@pytest.mark.parametrize("phase", list(STATUSES))
def test_a_tick_reads_only_the_jobs_namespace(kube: KubeClient, namespace: str, phase: str,
                                              request: pytest.FixtureRequest) -> None:
    if phase == "estimating":
        request.getfixturevalue("vnodes")  # the session's GPU servers, Ready
    client = RecordingClient(kube.configuration)
    rec = Reconciler(client, load_settings({}))
    patj = {"metadata": {"name": "j", "namespace": namespace, "uid": "0123456789abcdef",
                         "generation": 1}}
    indexes = Indexes(nodes={"n1": [node("n1")], "n2": [node("n2")]},
                      training={"n1": ["other/x-train-1"]},
                      estimators={(namespace, "k"): [wd.Producer("o", "job o")]})
    world = rec.world(patj, STATUSES[phase], SPEC, indexes)
    assert client.sent, "each phase reads at least its own objects or a cache entry"
    sent = list(client.sent)
    if phase == "estimating":
        # No estimate Job yet: the GPU servers, once, for the new Job's parallelism (the
        # session's virtual servers advertise 8 nvidia.com/gpu each).
        sent.remove(("GET", "/api/v1/nodes"))
        assert [(s.name, s.allocatable_gpus) for s in world.servers] == [
            (f"vn-gpu-server-{i}", 8) for i in range(SERVERS)]
    for method, path in sent:
        assert method == "GET" and f"/namespaces/{namespace}/" in path, client.sent
    assert len(client.sent) <= 3, client.sent
    if phase in ("profiling", "selecting"):
        assert {n.name for n in world.nodes} == {"n1", "n2"}  # from the index, not the API
    if phase == "selecting":
        assert world.training_load == {"n1": 1}  # nodes that train; absent means idle


def test_the_fleet_snapshot_is_shared_briefly_then_taken_again(
    kube: KubeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    rec = Reconciler(kube, load_settings({}))
    nodes: dict[str, list[NodeInfo]] = {"n1": [node("n1")]}
    indexes = Indexes(nodes=nodes)
    first = rec.fleet(indexes)
    nodes["n2"] = [node("n2")]
    assert rec.fleet(indexes) is first  # within FLEET_SNAPSHOT_S: the same snapshot
    clock = time.monotonic() + reconcile.FLEET_SNAPSHOT_S + 1
    monkeypatch.setattr(reconcile.time, "monotonic", lambda: clock)
    assert {n.name for n in rec.fleet(indexes)} == {"n1", "n2"}
