"""The shell side of the build: no pipe into `grep -q` under pipefail, and the image build's
requirement reader agrees with tomllib where JetPack 6's Python 3.10 has none."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]
SHELL_DIRS = ("scripts", "tools", ".ci")
# `cmd | grep -q …` (also -qs, -qx, -Eq): grep exits at its first match, cmd may then die of
# SIGPIPE, and pipefail turns that into a failure (11 of 200 cold setups on a busy machine).
PIPE_INTO_QUIET_GREP = re.compile(r"\|\s*grep\s+(-[a-zA-Z]*q[a-zA-Z]*|--quiet|--silent)\b")


def quiet_grep_pipes(text: str) -> list[str]:
    lines = [line.split("#", 1)[0] for line in text.splitlines()]
    return [line.strip() for line in lines if PIPE_INTO_QUIET_GREP.search(line)]


def shell_files() -> list[Path]:
    files = [ROOT / "Makefile"]
    for folder in SHELL_DIRS:
        for path in sorted((ROOT / folder).rglob("*")):
            if path.is_file() and (path.suffix == ".sh" or path.read_bytes()[:2] == b"#!"):
                files.append(path)
    return files


@pytest.mark.parametrize("path", shell_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_pipe_into_quiet_grep(path: Path) -> None:
    assert quiet_grep_pipes(path.read_text()) == [], (
        f"{path.relative_to(ROOT)}: capture the command's output, then match it")


@pytest.mark.parametrize("line, caught", [
    ('"$B" --version | grep -qx "v1"', True),
    ("etcd --version | grep -q 'etcd Version'", True),
    ("x | grep --quiet y", True),
    ("x | grep -Eqs y", True),
    ("grep -qs '^enabled' /proc/sys/fs/binfmt_misc/qemu-aarch64", False),
    ('[[ "$(etcd --version)" == *"3.7.0"* ]]', False),
    ("x | grep -v y  # not quiet: reads to the end", False),
])
def test_the_checker_catches_pipes_into_quiet_grep(line: str, caught: bool) -> None:
    assert bool(quiet_grep_pipes(line)) is caught


def _requirements_module() -> ModuleType:
    path = ROOT / "images" / "requirements.py"
    spec = importlib.util.spec_from_file_location("requirements", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_requirements_reader_without_tomllib_matches_tomllib() -> None:
    reader = _requirements_module()
    text = (ROOT / "pyproject.toml").read_text()
    project = tomllib.loads(text)["project"]
    parsed = reader._arrays_of_strings(text)
    assert parsed["dependencies"] == project["dependencies"]
    assert parsed["optional-dependencies"] == project["optional-dependencies"]
    assert "torch>=2.2" in reader.requirements(str(ROOT / "pyproject.toml"), ["train"])


def test_requirements_reader_handles_comments_and_one_line_arrays() -> None:
    reader = _requirements_module()
    parsed = reader._arrays_of_strings(
        '[project]\nname = "x"\ndependencies = ["a>=1", "b"]  # two\n'
        '[project.optional-dependencies]\ntrain = [\n  "torch>=2.2",  # big\n  "m",\n]\n'
        '[tool.x]\ndependencies = ["not-this"]\n')
    assert parsed == {"dependencies": ["a>=1", "b"],
                      "optional-dependencies": {"train": ["torch>=2.2", "m"]}}


def test_wheel_dependencies_are_those_of_the_target_machine(tmp_path: Path) -> None:
    """An aarch64 torch lists x86-64-only CUDA wheels; downloading for aarch64 must skip them."""
    import zipfile

    wheel = tmp_path / "torch-2.9.1-cp311-cp311-manylinux_2_28_aarch64.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("torch-2.9.1.dist-info/METADATA", "\n".join([
            "Metadata-Version: 2.1", "Name: torch", "Version: 2.9.1",
            "Requires-Dist: filelock",
            "Requires-Dist: setuptools; python_version >= \"3.12\"",
            "Requires-Dist: nvidia-cublas-cu12==12.8.4.1; platform_system == \"Linux\" and "
            "platform_machine == \"x86_64\"",
            "Requires-Dist: triton==3.5.1; platform_system == \"Linux\"",
            "Requires-Dist: opt-einsum>=3.3; extra == \"opt-einsum\""]))
    reader = _requirements_module()
    assert reader.wheel_dependencies(str(wheel), "aarch64") == ["filelock", "triton==3.5.1"]
    assert reader.wheel_dependencies(str(wheel), "x86_64") == [
        "filelock", "nvidia-cublas-cu12==12.8.4.1", "triton==3.5.1"]
    # A CPU image's torch: without the GPU compiler; the CUDA libraries libtorch links stay.
    assert reader.wheel_dependencies(str(wheel), "x86_64", without_triton=True) == [
        "filelock", "nvidia-cublas-cu12==12.8.4.1"]


def test_installed_dependencies_are_read_in_the_running_python() -> None:
    """What the CPU estimator's build appends after `pip install --no-deps torch`: the installed
    torch's requirements for this interpreter, triton left out on request."""
    from importlib.metadata import requires

    from packaging.requirements import Requirement

    reader = _requirements_module()
    listed = {Requirement(r).name for r in requires("torch") or []}
    names = {Requirement(d).name for d in reader.installed_dependencies("torch")}
    cpu = {Requirement(d).name
           for d in reader.installed_dependencies("torch", without_triton=True)}
    assert "filelock" in names and names <= listed
    assert "optree" not in names  # an extra's, not installed
    assert cpu == names - {"triton"}
    assert ";" not in " ".join(reader.installed_dependencies("torch"))
