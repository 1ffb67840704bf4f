"""Helpers shared by tests that run the `edgetrain` command or profile a fast twin."""

from __future__ import annotations

import subprocess
import sys

# Profiling options that keep a twin measurement to a fraction of a second per point.
FAST_PROFILE_ARGS = [
    "--minibatches",
    "2",
    "--min-window",
    "0.3",
    "--stabilize-timeout",
    "2",
    "--sample-interval",
    "0.02",
]


def run_edgetrain(
    *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `python -m edgetrain ARGS` as a user would; never raises on a non-zero exit."""
    return subprocess.run(
        [sys.executable, "-m", "edgetrain", *args],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
