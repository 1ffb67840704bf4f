"""edgetrain: power-aware fine-tuning on NVIDIA Jetson fleets."""

__version__ = "0.1.0"
