"""Marks the tests that need the control plane (its fixtures: tests/cluster/fixtures.py)."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that needs the control plane, so `-m "not cluster"` skips them."""
    for item in items:
        if "cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.cluster)
