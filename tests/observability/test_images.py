"""Dockerfiles cannot be built here (no Docker); check they agree with the package and chart."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "images"


def entrypoint(dockerfile: Path) -> list[str]:
    m = re.search(r"^ENTRYPOINT\s+(\[.*\])\s*$", dockerfile.read_text(), re.M)
    assert m, f"{dockerfile.name}: no exec-form ENTRYPOINT"
    return list(json.loads(m.group(1)))


@pytest.mark.parametrize(("name", "argv"), [
    ("operator.Dockerfile", ["edgetrain", "operator"]),
    ("node-agent.Dockerfile", ["edgetrain", "node-agent"]),
    ("trainer-jetson.Dockerfile", ["edgetrain"]),
    ("estimator-cuda.Dockerfile", ["edgetrain"]),
])
def test_entrypoints_are_cli_commands(name: str, argv: list[str]) -> None:
    assert entrypoint(IMAGES / name) == argv
    out = subprocess.run([sys.executable, "-m", "edgetrain", *argv[1:], "--help"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


def test_bases() -> None:
    text = {p.name: p.read_text() for p in IMAGES.glob("*.Dockerfile")}
    assert "python:3.11-slim" in text["operator.Dockerfile"]
    assert "python:3.11-slim" in text["node-agent.Dockerfile"]
    assert "nvcr.io/nvidia/l4t-pytorch" in text["trainer-jetson.Dockerfile"]
    assert "cuda" in text["estimator-cuda.Dockerfile"]


def test_slim_agent_image_needs_no_torch_kopf_or_matplotlib() -> None:
    """The node-agent image installs the package without torch, kopf and matplotlib."""
    code = ("import sys\n"
            "for m in ('torch', 'kopf', 'matplotlib'): sys.modules[m] = None\n"
            "import edgetrain.node_agent.agent\n"
            "from edgetrain.cli import app\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    docker = (IMAGES / "node-agent.Dockerfile").read_text()
    assert "prometheus-client" in docker and "torch" not in docker.split("RUN", 1)[1]


def test_chart_commands_match_images() -> None:
    values = yaml.safe_load((ROOT / "charts/edgetrain/values.yaml").read_text())
    assert values["operator"]["image"]["repository"] == "operator"
    assert values["agent"]["image"]["repository"] == "node-agent"
    for tpl, argv in (("operator.yaml", '["edgetrain", "operator"]'),
                      ("agent.yaml", '["edgetrain", "node-agent"]')):
        assert f"command: {argv}" in (ROOT / "charts/edgetrain/templates" / tpl).read_text()
