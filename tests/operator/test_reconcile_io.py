"""Against the real API server: what one tick reads. Cluster-wide facts come from the indexes,
so every request a reconcile makes is inside the job's namespace, and only a few per phase."""

from __future__ import annotations

import time
from typing import Any

import pytest

from edgetrain.api.job_status import Phase, PowerAwareTrainingJobStatus, TrainingStatus
from edgetrain.cluster import KubeApiError, KubeClient, api_path
from edgetrain.operator import gather
from edgetrain.operator import manifests as mf
from edgetrain.operator import world as wd
from edgetrain.operator.informer import OwnWatch
from edgetrain.operator.phases import NodeInfo
from edgetrain.operator.reconcile import Indexes, Reconciler
from edgetrain.operator.settings import load_settings
from edgetrain.operator.worker_security import restrict
from tests.cluster.fixtures import SERVER_NAMES
from tests.operator.conftest import job_manifest, patj_path
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


@pytest.mark.parametrize("watched", [False, True], ids=["reads", "watches"])
@pytest.mark.parametrize("phase", list(STATUSES))
def test_a_tick_reads_only_the_jobs_namespace(kube: KubeClient, namespace: str, phase: str,
                                              watched: bool,
                                              request: pytest.FixtureRequest) -> None:
    """Without the operator's watches a tick reads its own objects in its namespace; with
    them (here: watches that show nothing yet), nothing but what they cannot tell: the GPU
    servers before an estimate starts, and a training Job the status names."""
    if phase == "estimating":
        request.getfixturevalue("real_fleet")  # the session's GPU servers, Ready
    client = RecordingClient(kube.configuration)
    rec = Reconciler(client, load_settings({}))
    patj = {"metadata": {"name": "j", "namespace": namespace, "uid": "0123456789abcdef",
                         "generation": 1}}
    indexes = Indexes(nodes={"n1": [node("n1")], "n2": [node("n2")]},
                      training={"n1": ["other/x-train-1"]},
                      estimators={(namespace, "k"): [wd.Producer("o", "job o")]},
                      own=OwnWatch(kube, [namespace]) if watched else None)
    world = rec.world(patj, STATUSES[phase], SPEC, indexes)
    sent = list(client.sent)
    if phase == "estimating":
        # No estimate Job yet: the GPU servers, once, for the new Job's parallelism (the
        # session's real servers advertise 8 nvidia.com/gpu each).
        sent.remove(("GET", "/api/v1/nodes"))
        assert [(s.name, s.allocatable_gpus) for s in world.servers] == [
            (name, 8) for name in SERVER_NAMES]
    for method, path in sent:
        assert method == "GET" and f"/namespaces/{namespace}/" in path, client.sent
    assert len(client.sent) <= 3, client.sent
    if watched or phase == "selecting":  # the cache index has every entry: none is fetched
        expected = [("GET", api_path("batch/v1", "jobs", namespace, "j-train-1"))] if (
            phase == "training") else []
        assert sent == expected, sent
    else:
        assert sent, "without watches each phase reads its own objects"
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
    clock = time.monotonic() + gather.FLEET_SNAPSHOT_S + 1
    monkeypatch.setattr(gather.time, "monotonic", lambda: clock)
    assert {n.name for n in rec.fleet(indexes)} == {"n1", "n2"}


# --- Training: the Job, its pods and the progress ConfigMap from watches ------------------

TRAIN_JOB = "j-train-1"


def _training_objects(kube: KubeClient, ns: str) -> tuple[dict[str, Any], str]:
    """A job `j` in Training with its training Job, one pod of that Job and its progress
    ConfigMap, as the operator makes them (labels, controller references). Nothing runs them:
    the Job is managed by no controller (`spec.managedBy`) and the pod is gated from scheduling,
    so they stay exactly as made. Returns the job (status Training) and the pod's name."""
    created = kube.create(patj_path(ns), job_manifest("j"))
    patj = {"metadata": created["metadata"], "spec": created["spec"]}
    labels = {"edgetrain.io/job": "j", "edgetrain.io/phase": "train",
              mf.LABEL_MANAGED: mf.MANAGER}
    job_obj = kube.create(api_path("batch/v1", "jobs", ns), {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": TRAIN_JOB, "labels": labels,
                     "ownerReferences": [mf.owner_reference(patj)]},
        "spec": {"managedBy": "edgetrain.io/test", "template": {
            "metadata": {"labels": labels},
            "spec": {"restartPolicy": "Never",
                     "containers": [{"name": "train", "image": "train:never"}]}}}})
    pod = kube.create(api_path("v1", "pods", ns), {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"{TRAIN_JOB}-abcde", "labels": {**labels, "job-name": TRAIN_JOB},
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                          "name": TRAIN_JOB, "uid": job_obj["metadata"]["uid"],
                                          "controller": True}]},
        # Confined as the operator's own worker pods are: the namespace enforces `restricted`.
        "spec": restrict({"schedulingGates": [{"name": "edgetrain.io/test"}],
                          "containers": [{"name": "train", "image": "train:never"}]})})
    try:
        kube.create(api_path("v1", "configmaps", ns), mf.progress_configmap(patj))
    except KubeApiError as exc:
        # The session's operator, where an earlier test on this worker started it, makes the
        # same ConfigMap when it sees `j` Pending (a full run's failure).
        if exc.code != 409:
            raise
    patj["status"] = STATUSES["training"].model_dump(by_alias=True, mode="json")
    return patj, str(pod["metadata"]["name"])


def _shows(watch: OwnWatch, ns: str, patj: dict[str, Any]) -> bool:
    uid = patj["metadata"]["uid"]
    job_obj = watch.job(ns, TRAIN_JOB, uid)
    return (job_obj is not None and bool(watch.pods(ns, job_obj["metadata"]["uid"]))
            and watch.configmap(ns, mf.progress_configmap_name("j"), uid) is not None)


class LateView:
    """The watches' view, but one that shows the training Job finished: news the API server
    does not confirm (a view that trails it may show a state from before a restart)."""

    def __init__(self, watch: OwnWatch) -> None:
        self.watch = watch

    def __getattr__(self, name: str) -> Any:
        return getattr(self.watch, name)

    def job(self, ns: str, name: str, owner: str) -> dict[str, Any] | None:
        got = self.watch.job(ns, name, owner)
        return None if got is None else {**got, "status": {"failed": 1, "conditions": [
            {"type": "Failed", "status": "True"}]}}


def test_a_training_tick_reads_nothing_while_the_watches_show_its_objects(
    kube: KubeClient, namespace: str, crds: None
) -> None:
    patj, pod_name = _training_objects(kube, namespace)
    watch = OwnWatch(kube, [namespace]).start()
    try:
        deadline = time.monotonic() + 30
        while not _shows(watch, namespace, patj):
            assert time.monotonic() < deadline, watch.sizes()
            time.sleep(0.1)
        nodes = {"n1": [node("n1")]}
        client = RecordingClient(kube.configuration)
        rec = Reconciler(client, load_settings({}))

        # The watches show the Job, its pod and the progress: the tick sends nothing.
        step = rec.reconcile(patj, Indexes(nodes=nodes, own=watch))
        assert client.sent == []
        assert step.status.phase is Phase.training
        assert step.status.training is not None and step.status.training.pod == pod_name

        # A view that shows none of them (a watch not listed yet): the Job the status names is
        # read by name (taken as gone, it would be started again next to a running one); the
        # rest is what the watches say (no pod yet, no progress yet).
        unlisted = OwnWatch(kube, ["not-listed"])
        step = rec.reconcile(patj, Indexes(nodes=nodes, own=unlisted))
        assert client.sent == [("GET", api_path("batch/v1", "jobs", namespace, TRAIN_JOB))]
        assert step.status.phase is Phase.training
        assert step.status.training is not None and step.status.training.job == TRAIN_JOB

        # A view whose news would fail an attempt (and delete its Job) is confirmed by reads
        # first; they say the Job runs, so the job still trains, its Job kept.
        client.sent.clear()
        step = rec.reconcile(patj, Indexes(nodes=nodes, own=LateView(watch)))
        assert ("GET", api_path("batch/v1", "jobs", namespace, TRAIN_JOB)) in client.sent
        assert step.status.phase is Phase.training, step.status.message
        assert not any(m == "DELETE" for m, _ in client.sent), client.sent
        assert not step.events
    finally:
        watch.stop()
