"""Every `edgetrain.io/*` label and annotation key, and the label defaults built from them.

One place so the operator, the node agent, the virtual nodes and the chart's users agree.
"""

from __future__ import annotations

# ---- Nodes. On a Jetson the node agent sets them from what it reads on the device: the chart's
# detect step (any arm64 node) sets the device model, the board's agent the rest, node-kind
# last; `edgetrain cluster up` sets them on virtual nodes unless they start bare (--bare).
LABEL_DEVICE_MODEL = "edgetrain.io/device-model"
LABEL_L4T = "edgetrain.io/l4t"
LABEL_JETPACK = "edgetrain.io/jetpack"
LABEL_NODE_KIND = "edgetrain.io/node-kind"  # jetson | server | idle
LABEL_VIRTUAL = "edgetrain.io/virtual"  # "true" on every node edgetrain simulates
# On a real node that runs another architecture's containers under emulation (an arm64 Jetson
# node on an x86-64 host): the architecture `kubernetes.io/arch` must say (cluster/archpolicy.py)
LABEL_EMULATED_ARCH = "edgetrain.io/emulated-arch"
ANNOTATION_GPU_FREQUENCIES_HZ = "edgetrain.io/gpu-frequencies-hz"
ANNOTATION_SIMULATED = "edgetrain.io/simulated"
ANNOTATION_NODE_AGENT = "edgetrain.io/node-agent"  # "running" once the board's agent labelled
# The devicetree model string the detect step read ("" where the node has no device tree), so
# `edgetrain doctor` can say why an arm64 node is not a Jetson.
ANNOTATION_DEVICE_TREE_MODEL = "edgetrain.io/device-tree-model"
# Set by you: keeps every edgetrain node agent (detect step included) off this node.
LABEL_NODE_AGENT_OPT_OUT = "edgetrain.io/node-agent"
NODE_AGENT_DISABLED = "disabled"
# Well-known labels and resources edgetrain reads.
LABEL_ARCH = "kubernetes.io/arch"
LABEL_HOSTNAME = "kubernetes.io/hostname"
GPU_RESOURCE = "nvidia.com/gpu"  # the NVIDIA device plugin's resource

# The chart's node-agent pods (templates/agent.yaml) and how Prometheus finds their endpoint:
# the operator reads a site's measured draw from them the same way.
NODE_AGENT_POD_SELECTOR = "app.kubernetes.io/name=edgetrain,app.kubernetes.io/component=node-agent"
ANNOTATION_PROMETHEUS_PORT = "prometheus.io/port"
ANNOTATION_PROMETHEUS_PATH = "prometheus.io/path"

NODE_KIND_SERVER = "server"
NODE_KIND_JETSON = "jetson"
NODE_KIND_IDLE = "idle"  # kwok scale nodes: never a Jetson or a server

# ---- Objects the operator creates for a job (Jobs, ConfigMaps)
LABEL_JOB = "edgetrain.io/job"
LABEL_PHASE = "edgetrain.io/phase"
LABEL_CACHE = "edgetrain.io/cache"
LABEL_CACHE_KEY = "edgetrain.io/cache-key"
LABEL_MODEL = "edgetrain.io/model"
# Test hook on a job: fail its worker pods this many times (fault tests).
ANNOTATION_INJECT_FAILURES = "edgetrain.io/inject-failures"
# Test hook on a job: `estimate,train` pauses those workers' workloads at their first progress
# line (training: its first checkpoint) until the ConfigMap `<job>-release-<phase>` exists, so
# a fault test hits the phase it means to (fault tests). Profiling is not held: a pause would
# enter its timings.
ANNOTATION_INJECT_HOLD = "edgetrain.io/inject-hold"
# `edgetrain bench operator`: on a pod of a kwok node, "the simulated workload has finished";
# the bench's kwok stage completes the pod (exit 0) only then, after its results are published.
ANNOTATION_BENCH_DONE = "edgetrain.io/bench-done"
# Labels a pod's job is found by, ours first, then Kubernetes' own.
JOB_LABELS = (LABEL_JOB, "batch.kubernetes.io/job-name", "job-name")

# ---- On a training pod: the frequency the node agent pins, and the limit its guard holds.
ANNOTATION_GPU_FREQUENCY_HZ = "edgetrain.io/gpu-frequency-hz"
ANNOTATION_POWER_LIMIT_WATTS = "edgetrain.io/power-limit-watts"
# On a training or profiling pod under a site budget: the grant sequence it runs under.
ANNOTATION_POWER_GRANT_SEQUENCE = "edgetrain.io/power-grant-sequence"
# The rest of a full power mode (plans from predicted profiles): all three or none.
ANNOTATION_CPU_CORES = "edgetrain.io/cpu-cores"
ANNOTATION_CPU_FREQUENCY_HZ = "edgetrain.io/cpu-frequency-hz"
ANNOTATION_EMC_FREQUENCY_HZ = "edgetrain.io/emc-frequency-hz"
POWER_MODE_ANNOTATIONS = (
    ANNOTATION_CPU_CORES,
    ANNOTATION_CPU_FREQUENCY_HZ,
    ANNOTATION_EMC_FREQUENCY_HZ,
)
# On a training pod while it trains (set by the operator from the job's progress); the node
# agent exports them as gauges, so the dashboards show progress without reading ConfigMaps.
ANNOTATION_TRAINING_SAMPLES = "edgetrain.io/training-samples"
ANNOTATION_TRAINING_ACCURACY = "edgetrain.io/training-accuracy"
