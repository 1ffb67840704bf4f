"""Annotation keys shared by the operator, the trainer's pods and the node agent."""

from __future__ import annotations

# On a training pod: the frequency the node agent pins, and the limit its guard holds.
ANNOTATION_GPU_FREQUENCY_HZ = "edgetrain.io/gpu-frequency-hz"
ANNOTATION_POWER_LIMIT_WATTS = "edgetrain.io/power-limit-watts"
# On a training pod while it trains (set by the operator from the job's progress); the node
# agent exports them as gauges, so the dashboards show progress without reading ConfigMaps.
ANNOTATION_TRAINING_SAMPLES = "edgetrain.io/training-samples"
ANNOTATION_TRAINING_ACCURACY = "edgetrain.io/training-accuracy"
