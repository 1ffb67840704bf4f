"""Print the package's requirements from pyproject.toml, one a line, for an image build.

    python3 images/requirements.py pyproject.toml [EXTRA ...]

The images install the dependencies in a layer of their own before the source is copied in, so
a source change rebuilds only the last layer; build-images.sh downloads the same list as wheels.
Standard library only: it runs in the base image's Python (3.11+) before anything is installed.
"""

from __future__ import annotations

import sys
import tomllib


def requirements(pyproject: str, extras: list[str]) -> list[str]:
    with open(pyproject, "rb") as f:
        project = tomllib.load(f)["project"]
    reqs = list(project["dependencies"])
    for extra in extras:
        reqs += project["optional-dependencies"][extra]
    return reqs


if __name__ == "__main__":
    print("\n".join(requirements(sys.argv[1], sys.argv[2:])))
