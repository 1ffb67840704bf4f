"""Builders of Jobs, DaemonSets and ConfigMaps: plain dicts checked without a cluster."""

from __future__ import annotations

from typing import Any

from edgetrain.api.job import PowerAwareTrainingJobSpec
from edgetrain.api.keys import (
    ANNOTATION_GPU_FREQUENCY_HZ,
    ANNOTATION_INJECT_FAILURES,
    ANNOTATION_INJECT_HOLD,
    ANNOTATION_POWER_LIMIT_WATTS,
    POWER_MODE_ANNOTATIONS,
)
from edgetrain.kube import SERVICE_ACCOUNT_DIR
from edgetrain.operator import estimate_manifests as em
from edgetrain.operator import manifests as mf
from edgetrain.operator.settings import load_settings

SPEC = PowerAwareTrainingJobSpec.model_validate(
    {
        "model": {"architecture": "resnet8-w025"},
        "dataset": {"name": "digits", "limit": 900},
        "proxyDataset": {"name": "digits"},
        "targetAccuracy": 0.8,
        "powerLimitWatts": 5,
        "batchSizes": [64, 16],
        "gpuFrequenciesHz": [307200000, 614400000],
        "budget": {"profileMinibatches": 2},
    }
)
PATJ: dict[str, Any] = {
    "metadata": {"name": "j1", "namespace": "ns", "uid": "0123456789abcdef", "annotations": {}},
}


def _args(obj: dict[str, Any]) -> list[str]:
    return list(obj["spec"]["template"]["spec"]["containers"][0]["args"])


def test_each_phase_runs_its_roles_image() -> None:
    """Estimation the estimator image; profiling and training the trainer image."""
    settings = load_settings({"EDGETRAIN_OPERATOR_ESTIMATOR_IMAGE": "reg/estimator:1",
                              "EDGETRAIN_OPERATOR_TRAINER_IMAGE": "reg/trainer:1-jp6"})
    estimate = em.estimate_job(PATJ, SPEC, settings, key="k", attempt=0)
    profile = mf.profile_daemonset(PATJ, SPEC, settings, device_model="jetson-nano",
                                   node="n1", l4t="32.7.1", key="p")
    train = mf.train_job(PATJ, SPEC, settings, node="n1", batch_size=16,
                         gpu_frequency_hz=307200000, attempt=1, ckpt_dir="/c")

    def image(obj: dict[str, Any]) -> str:
        return str(obj["spec"]["template"]["spec"]["containers"][0]["image"])

    assert image(estimate) == "reg/estimator:1"
    assert image(profile) == image(train) == "reg/trainer:1-jp6"


def test_estimate_job_runs_on_the_server_and_publishes() -> None:
    settings = load_settings({})
    seeds = SPEC.model_copy(update={"budget": SPEC.budget.model_copy(update={"seeds": [0, 1]})})
    job = em.estimate_job(PATJ, seeds, settings, key="k1", attempt=0, parallelism=3)
    pod = job["spec"]["template"]["spec"]
    # A GPU server by its nvidia.com/gpu (the request), never a Jetson, and only where the
    # estimator image has a member for the node's architecture.
    assert pod["nodeSelector"] == {}
    assert pod["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    (term,) = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]
    assert {"key": "edgetrain.io/node-kind", "operator": "NotIn",
            "values": ["jetson", "idle"]} in term["matchExpressions"]
    assert {"key": "kubernetes.io/arch", "operator": "In",
            "values": ["amd64"]} in term["matchExpressions"]
    assert pod["containers"][0]["image"] == settings.estimator_image
    assert pod["restartPolicy"] == "Never" and job["spec"]["backoffLimit"] == 0
    assert job["metadata"]["ownerReferences"][0]["uid"] == PATJ["metadata"]["uid"]
    # One completion per (batch size, seed), at most `parallelism` at once, spread softly.
    assert job["spec"]["completionMode"] == "Indexed"
    assert (job["spec"]["completions"], job["spec"]["parallelism"]) == (4, 3)
    (spread,) = pod["topologySpreadConstraints"]
    assert spread["whenUnsatisfiable"] == "ScheduleAnyway"
    assert spread["topologyKey"] == "kubernetes.io/hostname"
    assert spread["labelSelector"]["matchLabels"] == job["spec"]["template"]["metadata"]["labels"]
    args = _args(job)
    sep = args.index("--")
    # Each pod patches its own key into the parts ConfigMap the operator made for this Job.
    assert args[:sep][args.index("--publish") + 1] == "j1-estimate-0-parts"
    part_file = args[:sep][args.index("--file") + 1]
    assert part_file == "part-$(JOB_COMPLETION_INDEX).json=/work/part.json"
    assert args[sep + 1 : sep + 3] == ["edgetrain", "estimate"]
    assert args[args.index("--batch-sizes") + 1] == "16,64"
    assert args[args.index("--seeds") + 1] == "0,1"
    assert args[args.index("--run-index") + 1] == "$(JOB_COMPLETION_INDEX)"
    assert args[args.index("--part-of") + 1] == "k1/$(EDGETRAIN_ESTIMATE_JOB_UID)"
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert env["EDGETRAIN_ESTIMATE_JOB_UID"]["valueFrom"]["fieldRef"]["fieldPath"] == (
        "metadata.labels['batch.kubernetes.io/controller-uid']")
    assert "--inject-failure" not in args
    # No more pods than runs, and never none.
    assert em.estimate_job(PATJ, SPEC, settings, key="k", attempt=0, parallelism=9)["spec"][
        "parallelism"] == 2 * 3  # 2 batch sizes × the 3 default seeds
    assert em.estimate_job(PATJ, SPEC, settings, key="k", attempt=0, parallelism=0)["spec"][
        "parallelism"] == 1


def test_parts_and_merged_vector_configmaps() -> None:
    from edgetrain.api.efficiency import EfficiencyVector

    parts = em.parts_configmap(PATJ, "j1-estimate-2", "k1")
    assert parts["metadata"]["name"] == "j1-estimate-2-parts" and parts["data"] == {}
    # Owned by the job; labelled so that the cache index holds it and a part wakes the job.
    assert parts["metadata"]["ownerReferences"][0]["uid"] == PATJ["metadata"]["uid"]
    assert parts["metadata"]["labels"]["edgetrain.io/cache"] == "estimate-parts"
    vector = EfficiencyVector.from_samples(model="resnet8-w025", dataset="digits",
                                           target_accuracy=0.8, batch_sizes=[16, 64],
                                           samples_to_accuracy=[100.0, 200.0])
    cache = em.efficiency_configmap("ns", SPEC, "k1", vector)
    assert cache["metadata"]["name"] == "edgetrain-efficiency-k1"
    assert "ownerReferences" not in cache["metadata"]  # the cache outlives the job
    assert cache["metadata"]["labels"] == {
        "edgetrain.io/cache": "efficiency", "edgetrain.io/cache-key": "k1",
        "edgetrain.io/model": "resnet8-w025", "app.kubernetes.io/managed-by": "edgetrain-operator"}
    assert EfficiencyVector.model_validate_json(cache["data"]["efficiency.json"]) == vector


def test_profile_daemonset_one_node_per_model() -> None:
    settings = load_settings({})
    ds = mf.profile_daemonset(PATJ, SPEC, settings, device_model="jetson-nano", node="n1",
                              l4t="32.7.1", key="pk")
    pod = ds["spec"]["template"]["spec"]
    exprs = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"][0]["matchExpressions"]
    assert {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1"]} in exprs
    assert pod["restartPolicy"] == "Always"
    args = _args(ds)
    assert "--hold" in args
    assert args[args.index("--gpu-freqs") + 1] == "307200000,614400000"
    assert args[args.index("--power-limit") + 1] == "5.0"
    assert args[args.index("--minibatches") + 1] == "2"
    assert "edgetrain.io/l4t=32.7.1" in args
    assert ds["spec"]["selector"]["matchLabels"] == ds["spec"]["template"]["metadata"]["labels"]


def test_train_job_carries_plan_annotations() -> None:
    settings = load_settings({})
    job = mf.train_job(PATJ, SPEC, settings, node="n1", batch_size=16,
                       gpu_frequency_hz=614400000, attempt=2, ckpt_dir="/c/run2-b16")
    meta = job["spec"]["template"]["metadata"]
    assert meta["annotations"] == {
        ANNOTATION_GPU_FREQUENCY_HZ: "614400000",
        ANNOTATION_POWER_LIMIT_WATTS: "5",
    }
    pod = job["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"kubernetes.io/hostname": "n1"}
    args = _args(job)
    assert args[args.index("--batch-size") + 1] == "16"
    assert args[args.index("--checkpoint-dir") + 1] == "/c/run2-b16"
    assert args[args.index("--dataset-limit") + 1] == "900"
    assert "--gpu-freq" not in args  # the node agent pins by default
    assert job["metadata"]["name"] == "j1-train-2"


def test_train_job_carries_a_full_power_mode_for_the_agent() -> None:
    from edgetrain.api.job_status import SelectionStatus
    from edgetrain.operator.phases import power_mode

    sel = SelectionStatus.model_validate({
        "node": "n1", "deviceModel": "jetson-orin-nano", "batchSize": 16,
        "gpuFrequencyHz": 1020000000, "gpuFrequencyMHz": 1020, "cpuCores": 1,
        "cpuFrequencyHz": 1510400000, "emcFrequencyHz": 2133000000, "powerWatts": 9.9,
        "powerLimitWatts": 10, "predictedSeconds": None, "relativeTime": 0.1,
        "objective": "time"})
    mode = power_mode(sel)
    assert mode == (1, 1510400000, 2133000000)
    assert power_mode(sel.model_copy(update={"cpu_cores": None})) is None  # GPU-only plan
    job = mf.train_job(PATJ, SPEC, load_settings({}), node="n1", batch_size=16,
                       gpu_frequency_hz=1020000000, attempt=1, ckpt_dir="/c", power_mode=mode)
    ann = job["spec"]["template"]["metadata"]["annotations"]
    assert {k: ann[k] for k in POWER_MODE_ANNOTATIONS} == {
        "edgetrain.io/cpu-cores": "1", "edgetrain.io/cpu-frequency-hz": "1510400000",
        "edgetrain.io/emc-frequency-hz": "2133000000"}


def test_pin_in_pod_setting_and_carry() -> None:
    settings = load_settings({}, pin_frequency_in_pod=True, checkpoint_pvc="ckpt")
    job = mf.train_job(PATJ, SPEC, settings, node="n1", batch_size=64, gpu_frequency_hz=1,
                       attempt=1, ckpt_dir="/c/run1-b64", carry_from="/c/run0-b16")
    args = _args(job)
    assert args[args.index("--gpu-freq") + 1] == "1"
    assert args[args.index("--carry-from") + 1] == "/c/run0-b16"
    pod = job["spec"]["template"]["spec"]
    assert {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "ckpt"}} in pod["volumes"]


def test_names_fit_and_labels_are_valid() -> None:
    long = "x" * 80
    name = mf.short_name(long, "estimate-12")
    assert len(name) <= 52 and name.endswith("-estimate-12")
    assert mf.short_name(long, "a") != mf.short_name("y" * 80, "a")
    assert mf.label_value("-a/b:c-") == "a-b-c"


def test_fault_injection_needs_the_setting() -> None:
    patj = {"metadata": {**PATJ["metadata"],
                         "annotations": {ANNOTATION_INJECT_FAILURES: "estimate=2, train=1"}}}
    assert mf.injected_failures(patj, load_settings({})) == {}
    on = load_settings({}, fault_injection=True)
    assert mf.injected_failures(patj, on) == {"estimate": 2, "train": 1}


def test_injected_hold_names_a_release_configmap_per_phase() -> None:
    patj = {"metadata": {**PATJ["metadata"],
                         "annotations": {ANNOTATION_INJECT_HOLD: " estimate ,train,profile"}}}
    on = load_settings({}, fault_injection=True)
    assert mf.injected_hold(patj, load_settings({}), "train") is None
    assert mf.injected_hold(patj, on, "train") == "j1-release-train"
    assert mf.injected_hold(patj, on, "estimate") == "j1-release-estimate"
    assert mf.injected_hold(patj, on, "profile") is None  # a pause would enter its timings
    assert mf.injected_hold(PATJ, on, "train") is None
    job = mf.train_job(patj, SPEC, on, node="n1", batch_size=64, gpu_frequency_hz=1,
                       attempt=1, ckpt_dir="/c", hold_release="j1-release-train")
    args = _args(job)
    assert args[args.index("--hold-at-progress") + 1] == "j1-release-train"


def test_cache_keys_are_stable_and_distinct() -> None:
    a = mf.profile_key(SPEC, "jetson-nano", "32.7.1")
    assert a == mf.profile_key(SPEC, "jetson-nano", "32.7.1")
    assert a != mf.profile_key(SPEC, "jetson-orin-nano", "36.4.3")
    other = SPEC.model_copy(update={"dataset": SPEC.dataset.model_copy(update={"name": "mnist"})})
    assert a != mf.profile_key(other, "jetson-nano", "32.7.1")
    assert mf.weights_identity(SPEC) is None


def test_estimate_requests_a_gpu_and_every_pod_passes_the_device() -> None:
    settings = load_settings({})
    job = em.estimate_job(PATJ, SPEC, settings, key="k1", attempt=0)
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"] == {"limits": {"nvidia.com/gpu": "1"}}
    args = _args(job)
    assert args[args.index("--device") + 1] == "auto"
    assert args[args.index("--precision") + 1] == "fp32"
    ds = mf.profile_daemonset(PATJ, SPEC, settings, device_model="jetson-nano", node="n1",
                              l4t=None, key="pk")
    train = mf.train_job(PATJ, SPEC, settings, node="n1", batch_size=16,
                         gpu_frequency_hz=614400000, attempt=0, ckpt_dir="/c")
    for obj in (ds, train):  # Jetsons reach the GPU through the container runtime, no request
        pod_container = obj["spec"]["template"]["spec"]["containers"][0]
        assert "resources" not in pod_container
        assert _args(obj)[_args(obj).index("--device") + 1] == "auto"


def test_gpu_request_is_configurable_and_absent_at_zero_or_on_cpu() -> None:
    two = em.estimate_job(PATJ, SPEC, load_settings({"EDGETRAIN_OPERATOR_ESTIMATE_GPUS": "2"}),
                          key="k", attempt=0)
    assert two["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] == {
        "nvidia.com/gpu": "2"
    }
    none = em.estimate_job(PATJ, SPEC, load_settings({"EDGETRAIN_OPERATOR_ESTIMATE_GPUS": "0"}),
                           key="k", attempt=0)
    assert "resources" not in none["spec"]["template"]["spec"]["containers"][0]
    cpu_spec = PowerAwareTrainingJobSpec.model_validate(
        {**SPEC.model_dump(by_alias=True), "compute": {"device": "cpu"}}
    )
    on_cpu = em.estimate_job(PATJ, cpu_spec, load_settings({}), key="k", attempt=0)
    assert "resources" not in on_cpu["spec"]["template"]["spec"]["containers"][0]
    assert _args(on_cpu)[_args(on_cpu).index("--device") + 1] == "cpu"


def test_precision_changes_cache_keys_only_when_not_fp32() -> None:
    from edgetrain.api.job import efficiency_cache_key

    bf16 = PowerAwareTrainingJobSpec.model_validate(
        {**SPEC.model_dump(by_alias=True), "compute": {"precision": "bf16"}}
    )
    same = PowerAwareTrainingJobSpec.model_validate(
        {**SPEC.model_dump(by_alias=True), "compute": {"device": "auto", "precision": "fp32"}}
    )
    assert efficiency_cache_key(same, None) == efficiency_cache_key(SPEC, None)
    assert efficiency_cache_key(bf16, None) != efficiency_cache_key(SPEC, None)
    assert mf.profile_key(bf16, "jetson-nano", None) != mf.profile_key(SPEC, "jetson-nano", None)
    assert mf.profile_key(same, "jetson-nano", None) == mf.profile_key(SPEC, "jetson-nano", None)


def test_jetson_pods_get_the_runtime_class_when_set() -> None:
    settings = load_settings({"EDGETRAIN_OPERATOR_JETSON_RUNTIME_CLASS": "nvidia"})
    ds = mf.profile_daemonset(PATJ, SPEC, settings, device_model="jetson-nano", node="n1",
                              l4t=None, key="pk")
    train = mf.train_job(PATJ, SPEC, settings, node="n1", batch_size=16,
                         gpu_frequency_hz=614400000, attempt=0, ckpt_dir="/c")
    for obj in (ds, train):
        assert obj["spec"]["template"]["spec"]["runtimeClassName"] == "nvidia"
    est = em.estimate_job(PATJ, SPEC, settings, key="k", attempt=0)
    assert "runtimeClassName" not in est["spec"]["template"]["spec"]
    default = mf.train_job(PATJ, SPEC, load_settings({"EDGETRAIN_OPERATOR_JETSON_RUNTIME_CLASS":
                                                      "none"}), node="n1", batch_size=16,
                           gpu_frequency_hz=1, attempt=0, ckpt_dir="/c")
    assert "runtimeClassName" not in default["spec"]["template"]["spec"]


def test_worker_threads_reach_every_workload_pod_when_set() -> None:
    def threads(env: dict[str, str]) -> list[str | None]:
        settings = load_settings(env)
        objs = (mf.profile_daemonset(PATJ, SPEC, settings, device_model="jetson-nano",
                                     node="n1", l4t=None, key="pk"),
                mf.train_job(PATJ, SPEC, settings, node="n1", batch_size=16,
                             gpu_frequency_hz=614400000, attempt=0, ckpt_dir="/c"),
                em.estimate_job(PATJ, SPEC, settings, key="k", attempt=0))
        return [next((e["value"] for e in o["spec"]["template"]["spec"]["containers"][0]["env"]
                      if e["name"] == "OMP_NUM_THREADS"), None) for o in objs]

    assert threads({"EDGETRAIN_OPERATOR_WORKER_THREADS": "1"}) == ["1", "1", "1"]
    assert threads({}) == threads({"EDGETRAIN_OPERATOR_WORKER_THREADS": "none"}) == [None] * 3


def test_pretrain_in_the_worker_uses_the_jobs_compute_choice() -> None:
    import json

    spec = PowerAwareTrainingJobSpec.model_validate(
        {
            **SPEC.model_dump(by_alias=True),
            "model": {"architecture": "resnet8-w025", "pretrain": {"dataset": "fashion-mnist"}},
            "compute": {"device": "cpu", "precision": "bf16"},
        }
    )
    args = _args(em.estimate_job(PATJ, spec, load_settings({}), key="k", attempt=0))
    recipe = json.loads(args[args.index("--pretrain") + 1])
    assert recipe["device"] == "cpu" and recipe["precision"] == "bf16"
    assert recipe["dataset"] == "fashion-mnist" and recipe["model"] == "resnet8-w025"


SHELLS = {"sh", "bash", "dash", "ash", "zsh", "busybox"}


def _containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    pod = obj["spec"]["template"]["spec"]
    return [*pod.get("initContainers", []), *pod["containers"]]


def test_no_container_runs_a_shell_and_names_stay_one_argument() -> None:
    """Every pod the operator makes runs `edgetrain` with an argv list: no shell parses a
    spec's text, so a path with spaces or `;` reaches the workload as one argument."""
    odd = "/weights/a b;$(reboot)'.pt"
    spec = SPEC.model_copy(update={"model": SPEC.model.model_copy(update={"weights": odd})})
    settings = load_settings({})
    objects = [
        em.estimate_job(PATJ, spec, settings, key="k", attempt=0),
        mf.profile_daemonset(PATJ, spec, settings, device_model="jetson-nano", node="n1",
                             l4t="36.4", key="k"),
        mf.train_job(PATJ, spec, settings, node="n1", batch_size=16,
                     gpu_frequency_hz=307200000, attempt=1, ckpt_dir="/c/run1-b16"),
    ]
    for obj in objects:
        for container in _containers(obj):
            argv = [*container.get("command", []), *container.get("args", [])]
            assert argv[0] == "edgetrain", argv
            assert not {a.rsplit("/", 1)[-1] for a in argv} & SHELLS, argv
            assert "-c" not in argv, argv
        assert odd in [*_containers(obj)[0]["args"]] or obj["kind"] == "DaemonSet"


def test_profile_pods_ask_the_agent_for_clocks_where_the_setting_says() -> None:
    """PROFILE_CLOCKS_BY_AGENT: the profile command asks the node agent (naming its pod) for
    every strategy (predicted asks for its power modes too)."""
    by_agent = load_settings({"EDGETRAIN_OPERATOR_PROFILE_CLOCKS_BY_AGENT": "true"})
    for settings, strategy, asks in ((load_settings({}), "frontier", False),
                                     (by_agent, "frontier", True), (by_agent, "full", True),
                                     (by_agent, "predicted", True)):
        body = SPEC.model_dump(by_alias=True, exclude_none=True)
        spec = PowerAwareTrainingJobSpec.model_validate(
            {**body, "strategy": {**body.get("strategy", {}), "profiling": strategy}})
        ds = mf.profile_daemonset(PATJ, spec, settings, device_model="jetson-nano", node="n1",
                                  l4t="32.7.1", key="pk")
        args = _args(ds)
        container = ds["spec"]["template"]["spec"]["containers"][0]
        env = {e["name"]: e for e in container["env"]}
        assert ("--clock-by-agent" in args) is asks, (strategy, args)
        assert ("POD_NAME" in env) is asks
        if asks:
            assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
            assert args[args.index("--clock-by-agent") + 1:][:2] == [
                "--sa-dir", str(SERVICE_ACCOUNT_DIR)]


def test_training_pods_wait_for_the_agents_pin_and_mode_where_an_agent_runs() -> None:
    """With the agent setting the clocks, `edgetrain train` waits until the agent holds the
    pod's pin (and power mode) before it trains; with the pin in the pod, or no agent, not."""
    by_agent = load_settings({"EDGETRAIN_OPERATOR_PROFILE_CLOCKS_BY_AGENT": "true"})
    in_pod = load_settings({"EDGETRAIN_OPERATOR_PROFILE_CLOCKS_BY_AGENT": "true",
                            "EDGETRAIN_OPERATOR_PIN_FREQUENCY_IN_POD": "true"})
    mode = (2, 921_600_000, 1_600_000_000)
    for settings, power_mode, want in (
            (by_agent, None, ["--await-pin", "307200000"]),
            (by_agent, mode, ["--await-pin", "307200000", "--await-power-mode",
                              "2,921600000,1600000000"]),
            (in_pod, mode, []), (load_settings({}), mode, [])):
        args = _args(mf.train_job(PATJ, SPEC, settings, node="n1", batch_size=16,
                                  gpu_frequency_hz=307_200_000, attempt=1, ckpt_dir="/c/r",
                                  power_mode=power_mode))
        got = [a for i, a in enumerate(args) if a.startswith("--await")
               or (i and args[i - 1].startswith("--await"))]
        assert got == want, args
