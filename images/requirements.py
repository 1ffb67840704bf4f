"""Print the package's requirements from pyproject.toml, one a line, for an image build.

    python3 images/requirements.py pyproject.toml [EXTRA ...]

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


def requirements(pyproject: str, extras: list[str]) -> list[str]:
    project = load_project(pyproject)
    reqs = list(project["dependencies"])
    for extra in extras:
        reqs += project["optional-dependencies"][extra]
    return reqs


if __name__ == "__main__":
    print("\n".join(requirements(sys.argv[1], sys.argv[2:])))
