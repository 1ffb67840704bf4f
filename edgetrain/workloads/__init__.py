"""Real PyTorch workloads: models (and, later, datasets, profiler and trainer)."""
