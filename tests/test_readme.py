"""The README's command blocks, run as written: a user's first steps are the tested path."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def block(section: str) -> str:
    """The first ```bash block under the heading `section`."""
    text = README.read_text()
    start = text.index(f"\n## {section}\n")
    m = re.compile(r"```bash\n(.*?)```", re.S).search(text, start)
    assert m is not None, f"no bash block under {section!r}"
    return m.group(1)


def run_block(script: str, tmp_path: Path, timeout_s: float,
              ) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, EDGETRAIN_CLUSTER_DIR=str(tmp_path / "cluster"))
    return subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout_s)


@pytest.mark.slow
def test_on_a_cluster_block_runs_as_written(tmp_path: Path) -> None:
    """cluster up, helm install --wait, a job to Succeeded, kubectl logs, cluster down: the
    operator and node agents run in-cluster from the chart; nothing of edgetrain runs outside
    the cluster but the control plane and the virtual nodes."""
    script = block("On a cluster")
    assert "helm install" in script and "kubectl logs" in script
    try:
        out = run_block(script, tmp_path, timeout_s=900)
    finally:
        subprocess.run(["bash", "-c", "source .venv/bin/activate && edgetrain cluster down"],
                       cwd=ROOT, env=dict(os.environ,
                                          EDGETRAIN_CLUSTER_DIR=str(tmp_path / "cluster")),
                       capture_output=True, timeout=120)
    assert out.returncode == 0, f"stdout:\n{out.stdout}\nstderr:\n{out.stderr}"
    assert "condition met" in out.stdout
    assert re.search(r"digits-5w\s+Succeeded\s+\d+\s+\d+", out.stdout), out.stdout
    # kubectl logs reached the operator's pod on its virtual node through the API server.
    assert re.search(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ (INFO|WARNING) ", out.stdout,
                     re.M), out.stdout


def test_plan_block_runs_on_files_that_exist(tmp_path: Path) -> None:
    script = block("`edgetrain plan`")
    for name in re.findall(r"examples/[\w.-]+", script):
        assert (ROOT / name).is_file(), f"README names {name}, which does not exist"
    out = run_block(script, tmp_path, timeout_s=120)
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    assert plan["within_limit"] and plan["power_w"] <= plan["power_limit_w"]
    assert {"B1", "B2"} <= set(plan["baselines"])
