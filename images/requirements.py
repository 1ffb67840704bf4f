"""Print the package's requirements from pyproject.toml, one a line, for an image build.

    python3 images/requirements.py pyproject.toml [EXTRA ...]
    python3 images/requirements.py --wheel-deps WHEEL MACHINE [--without-triton]  (packaging)
    /opt/venv/bin/python images/requirements.py --installed-deps DIST --without-triton

The images install the dependencies in a layer of their own before the source is copied in, so
a source change rebuilds only the last layer; build-images.sh downloads the same list as wheels.
Standard library only: it runs in the base image's Python before anything is installed, which is
3.10 on JetPack 6 (no tomllib there: the two arrays it needs are read by a small parser).
"""

from __future__ import annotations

import ast
import sys
from typing import Any


def _arrays_of_strings(text: str) -> dict[str, Any]:
    """`[project]`'s dependencies and optional-dependencies, for Pythons without tomllib."""
    project: dict[str, Any] = {"dependencies": [], "optional-dependencies": {}}
    table = ""
    lines = iter(text.splitlines())
    for line in lines:
        stripped = line.split("#", 1)[0].strip()
        if stripped.startswith("["):
            table = stripped.strip("[]").strip()
            continue
        key, eq, value = stripped.partition("=")
        if not eq or table not in ("project", "project.optional-dependencies"):
            continue
        value = value.strip()
        if not value.startswith("["):
            continue
        while not value.rstrip().endswith("]"):
            value += " " + next(lines).split("#", 1)[0].strip()
        items = list(ast.literal_eval(value))
        name = key.strip().strip('"')
        if table == "project" and name == "dependencies":
            project["dependencies"] = items
        elif table == "project.optional-dependencies":
            project["optional-dependencies"][name] = items
    return project


def load_project(pyproject: str) -> dict[str, Any]:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        with open(pyproject, encoding="utf-8") as f:
            return _arrays_of_strings(f.read())
    with open(pyproject, "rb") as fb:
        project: dict[str, Any] = tomllib.load(fb)["project"]
    return project


def is_gpu_compiler(requirement_name: str) -> bool:
    """triton: torch's GPU kernel compiler (0.6-1 GB), imported only to compile for a GPU.

    A CPU image leaves it out. The CUDA libraries stay: libtorch_cpu links them, so torch
    does not import without them even where no GPU is used."""
    return requirement_name.lower() == "triton"


def _kept(requirements: list[str], env: dict[str, str] | None,
          without_triton: bool) -> list[str]:
    try:
        from packaging.requirements import Requirement
    except ModuleNotFoundError:  # an image's venv before anything is installed: pip's copy
        from pip._vendor.packaging.requirements import Requirement  # type: ignore[no-redef]
    deps = []
    for text in requirements:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate({"extra": "", **(env or {})}):
            continue
        if without_triton and is_gpu_compiler(req.name):
            continue
        req.marker = None
        deps.append(str(req))
    return deps


def wheel_dependencies(wheel: str, machine: str, python: str = "3.11",
                       without_triton: bool = False) -> list[str]:
    """A wheel's dependencies on a Linux `machine` (x86_64, aarch64), markers evaluated there.

    `pip download --platform` evaluates markers on the host, so an aarch64 torch whose CUDA
    libraries are marked `platform_machine == "x86_64"` would bring them anyway (3 GB)."""
    import zipfile

    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = z.read(name).decode()
    env = {"platform_machine": machine, "platform_system": "Linux", "sys_platform": "linux",
           "os_name": "posix", "python_version": python, "python_full_version": f"{python}.0",
           "implementation_name": "cpython", "platform_python_implementation": "CPython"}
    listed = [line.split(":", 1)[1].strip() for line in metadata.splitlines()
              if line.startswith("Requires-Dist:")]
    return _kept(listed, env, without_triton)


def installed_dependencies(dist: str, without_triton: bool = False) -> list[str]:
    """An installed distribution's dependencies, markers evaluated by the running Python."""
    from importlib.metadata import requires

    return _kept(requires(dist) or [], None, without_triton)


def requirements(pyproject: str, extras: list[str]) -> list[str]:
    project = load_project(pyproject)
    reqs = list(project["dependencies"])
    for extra in extras:
        reqs += project["optional-dependencies"][extra]
    return reqs


if __name__ == "__main__":
    cpu = "--without-triton" in sys.argv
    if sys.argv[1] == "--wheel-deps":
        print("\n".join(wheel_dependencies(sys.argv[2], sys.argv[3], without_triton=cpu)))
    elif sys.argv[1] == "--installed-deps":
        print("\n".join(installed_dependencies(sys.argv[2], without_triton=cpu)))
    else:
        print("\n".join(requirements(sys.argv[1], sys.argv[2:])))
