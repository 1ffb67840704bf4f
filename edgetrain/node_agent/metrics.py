"""Prometheus metrics of the node agent (prometheus-client, one registry per agent).

Every series carries `node`, so fleet panels work whatever the scrape config relabels."""

from __future__ import annotations

import contextlib

from prometheus_client import CollectorRegistry, Counter, Gauge

POD_LABELS = ("node", "namespace", "pod", "training_job")

# Names every component exports; the dashboard test checks each panel against this set.
METRIC_NAMES = (
    "edgetrain_node_info",
    "edgetrain_power_watts",
    "edgetrain_power_total_watts",
    "edgetrain_gpu_frequency_hz",
    "edgetrain_gpu_frequency_table_hz",
    "edgetrain_gpu_pinned_frequency_hz",
    "edgetrain_pinned_pod_info",
    "edgetrain_power_limit_watts",
    "edgetrain_guard_stepdowns_total",
    "edgetrain_guard_cap_hz",
    "edgetrain_temperature_celsius",
    "edgetrain_sampler_up",
    "edgetrain_sampler_samples_total",
    "edgetrain_sampler_errors_total",
    "edgetrain_sampler_last_sample_age_seconds",
    "edgetrain_pod_energy_joules_total",
    "edgetrain_pod_power_watts",
    "edgetrain_training_samples",
    "edgetrain_training_accuracy",
    "edgetrain_agent_pods_watched",
)


class AgentMetrics:
    """The gauges and counters the agent updates every tick."""

    def __init__(self, node: str, registry: CollectorRegistry | None = None) -> None:
        self.node = node
        r = self.registry = registry or CollectorRegistry()
        self.node_info = Gauge("edgetrain_node_info", "Device facts of this node (value 1)",
                               ["node", "device_model", "l4t", "soc", "power_backend",
                                "simulated"], registry=r)
        self.power = Gauge("edgetrain_power_watts", "Power per INA3221 rail", ["node", "rail"],
                           registry=r)
        self.power_total = Gauge("edgetrain_power_total_watts",
                                 "Board total power (input rail, else sum of rails)",
                                 ["node", "rule"], registry=r)
        self.freq = Gauge("edgetrain_gpu_frequency_hz", "GPU devfreq frequency",
                          ["node", "kind"], registry=r)
        self.freq_table = Gauge("edgetrain_gpu_frequency_table_hz",
                                "Available GPU frequencies (value = frequency)",
                                ["node", "level"], registry=r)
        self.pinned = Gauge("edgetrain_gpu_pinned_frequency_hz",
                            "Frequency pinned for a pod (0: none)", ["node"], registry=r)
        self.pinned_pod = Gauge("edgetrain_pinned_pod_info",
                                "The pod whose frequency is pinned (value = requested Hz)",
                                list(POD_LABELS), registry=r)
        self.limit = Gauge("edgetrain_power_limit_watts", "Power limit of a pod on this node",
                           list(POD_LABELS), registry=r)
        self.guard_steps = Counter("edgetrain_guard_stepdowns",
                                   "Power-guard step-downs (one GPU table level each)",
                                   list(POD_LABELS), registry=r)
        self.guard_cap = Gauge("edgetrain_guard_cap_hz",
                               "Frequency cap set by the power guard (0: not armed)", ["node"],
                               registry=r)
        self.temp = Gauge("edgetrain_temperature_celsius", "Thermal zone temperature",
                          ["node", "zone"], registry=r)
        self.sampler_up = Gauge("edgetrain_sampler_up",
                                "1 while the power sampler delivers fresh samples", ["node"],
                                registry=r)
        self.sampler_samples = Counter("edgetrain_sampler_samples",
                                       "Power samples taken", ["node"], registry=r)
        self.sampler_errors = Counter("edgetrain_sampler_errors",
                                      "Power sensor read errors", ["node"], registry=r)
        self.sampler_age = Gauge("edgetrain_sampler_last_sample_age_seconds",
                                 "Age of the newest power sample", ["node"], registry=r)
        self.pod_energy = Counter("edgetrain_pod_energy_joules",
                                  "Board energy while the pod held a pin or a limit",
                                  list(POD_LABELS), registry=r)
        self.pod_power = Gauge("edgetrain_pod_power_watts",
                               "Board power while the pod holds a pin or a limit",
                               list(POD_LABELS), registry=r)
        self.train_samples = Gauge("edgetrain_training_samples",
                                   "Training samples processed (pod annotation "
                                   "edgetrain.io/training-samples)", list(POD_LABELS),
                                   registry=r)
        self.train_accuracy = Gauge("edgetrain_training_accuracy",
                                    "Latest validation accuracy (pod annotation "
                                    "edgetrain.io/training-accuracy)", list(POD_LABELS),
                                    registry=r)
        self.pods_watched = Gauge("edgetrain_agent_pods_watched",
                                  "Pods on this node seen by the agent", ["node"], registry=r)
        self._pod_series: set[tuple[str, str, str]] = set()
        self._rail_series: set[str] = set()

    def pod_labels(self, namespace: str, pod: str, job: str) -> tuple[str, str, str, str]:
        """Label values of a per-pod series."""
        return (self.node, namespace, pod, job)

    def retire_pods(self, keep: set[tuple[str, str, str]]) -> None:
        """Drop gauges of pods that are gone (counters stay: they are cumulative)."""
        for key in self._pod_series - keep:
            labels = (self.node, *key)
            for g in (self.limit, self.pinned_pod, self.pod_power, self.train_samples,
                      self.train_accuracy):
                with contextlib.suppress(KeyError):
                    g.remove(*labels)
        self._pod_series = set(keep)

    def touch_pod(self, key: tuple[str, str, str]) -> None:
        """Remember a per-pod series (so retire_pods can drop it later)."""
        self._pod_series.add(key)
