"""The package's layout as built: imports between subpackages only point down, never in a circle.

Levels (docs/architecture.md): api; device, planner, kube; workloads, predictor; pipeline,
operator, node_agent, cluster; bench; cli. Imports inside functions and under TYPE_CHECKING
count too: a lazy import is still a dependency.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "edgetrain"

LEVELS: dict[str, int] = {
    "api": 0,
    "device": 1,
    "planner": 1,
    "kube": 1,
    "workloads": 2,
    "predictor": 2,
    "pipeline": 3,
    "operator": 3,
    "node_agent": 3,
    "cluster": 3,
    "bench": 4,
    "cli": 5,
    "__main__": 6,
}
# Third-party packages a subpackage must never import, even lazily: selection is numpy only,
# and the contracts and the device layer load in torch-free images (operator, node agent).
FORBIDDEN_THIRD_PARTY: dict[str, set[str]] = {
    "api": {"torch", "kopf", "kubernetes"},
    "planner": {"torch", "kubernetes", "kopf", "matplotlib"},
    "device": {"torch", "kubernetes", "kopf"},
    "node_agent": {"torch"},
}
# The operator image has no torch: its modules may load it only inside a function (the worker
# wrapper does, in the workload's image).
NO_TOP_LEVEL_TORCH = {"operator", "node_agent", "kube", "cluster"}

Edge = tuple[str, str, str]  # (from subpackage, to subpackage or third-party, file)


def subpackage_of(path: Path) -> str:
    parts = path.relative_to(PACKAGE).parts
    return parts[0] if len(parts) > 1 else parts[0].removesuffix(".py")


def _imported(node: ast.AST, path: Path) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom):
        if node.level:  # relative: resolve against the module's package
            base = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)[: -node.level]
            return [".".join([*base, node.module] if node.module else base)]
        return [node.module or ""]
    return []


def import_edges() -> tuple[list[Edge], list[Edge]]:
    """(every import, top-level imports only) as edges between subpackages and third parties."""
    every: list[Edge] = []
    top: list[Edge] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        sub = subpackage_of(path)
        tree = ast.parse(path.read_text(), filename=str(path))
        top_nodes = {id(n) for n in tree.body}
        for node in ast.walk(tree):
            for name in _imported(node, path):
                head, _, rest = name.partition(".")
                target = rest.split(".")[0] if head == "edgetrain" else head
                if head == "edgetrain" and (not target or target == sub):
                    continue
                edge = (sub, target, str(path.relative_to(PACKAGE.parent)))
                every.append(edge)
                if id(node) in top_nodes:
                    top.append(edge)
    return every, top


def layer_violations(edges: Iterable[Edge], levels: Mapping[str, int]) -> list[str]:
    """Upward imports, imports of an unknown subpackage, and circles between subpackages."""
    problems: list[str] = []
    graph: dict[str, set[str]] = defaultdict(set)
    for src, dst, where in edges:
        if dst not in levels:
            continue  # third party or standard library
        if src not in levels:
            problems.append(f"{where}: subpackage {src!r} has no level; add it to LEVELS")
            continue
        if levels[dst] > levels[src]:
            problems.append(f"{where}: {src} (level {levels[src]}) imports {dst} (level"
                            f" {levels[dst]}), an upward import")
        graph[src].add(dst)
    # A circle is a strongly connected pair or more: look for a path back from each edge.
    for src, dsts in sorted(graph.items()):
        for dst in sorted(dsts):
            seen, stack = set(), [dst]
            while stack:
                here = stack.pop()
                if here == src:
                    problems.append(f"import circle: {src} -> {dst} -> ... -> {src}")
                    break
                if here not in seen:
                    seen.add(here)
                    stack.extend(graph.get(here, ()))
    return problems


def test_imports_point_down_and_never_circle() -> None:
    every, _ = import_edges()
    assert layer_violations(every, LEVELS) == []


def test_every_subpackage_has_a_level() -> None:
    found = {subpackage_of(p) for p in PACKAGE.rglob("*.py")} - {"__init__"}
    assert found <= set(LEVELS), f"give these a level: {sorted(found - set(LEVELS))}"


@pytest.mark.parametrize("sub", sorted(FORBIDDEN_THIRD_PARTY))
def test_forbidden_third_party_imports(sub: str) -> None:
    every, _ = import_edges()
    bad = [(dst, w) for s, dst, w in every if s == sub and dst in FORBIDDEN_THIRD_PARTY[sub]]
    assert bad == []


def test_torch_free_images_load_no_torch_at_import() -> None:
    _, top = import_edges()
    bad = [(s, w) for s, dst, w in top if s in NO_TOP_LEVEL_TORCH and dst == "torch"]
    assert bad == []


def module_graph() -> dict[str, set[str]]:
    """Imports between modules of one subpackage (`from pkg import submodule` names the
    submodule, not the package's __init__)."""
    mods = {".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts)
            .removesuffix(".__init__"): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = defaultdict(set)
    for mod, path in mods.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            names = _imported(node, path)
            if isinstance(node, ast.ImportFrom):
                names = [f"{names[0]}.{a.name}" if f"{names[0]}.{a.name}" in mods else names[0]
                         for a in node.names]
            for name in names:
                if name in mods and name != mod and name.rsplit(".", 1)[0] == mod.rsplit(".", 1)[0]:
                    graph[mod].add(name)
    return graph


def circles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """Every strongly connected set of two or more modules (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp: list[str] = []
            while not comp or comp[-1] != v:
                comp.append(stack.pop())
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_circle_between_modules_of_a_subpackage() -> None:
    assert circles(module_graph()) == []


def test_the_module_circle_finder_finds_one() -> None:
    graph = {"a.node": {"a.runtime"}, "a.runtime": {"a.pod_env"}, "a.pod_env": {"a.node"},
             "a.nodes": set(), "a.vnode": {"a.node", "a.nodes"}}
    assert circles(graph) == [["a.node", "a.pod_env", "a.runtime"]]


# The checker itself must catch what it is for.
@pytest.mark.parametrize(
    ("edges", "expected"),
    [
        ([("device", "workloads", "edgetrain/device/x.py")], "upward import"),
        ([("planner", "predictor", "edgetrain/planner/x.py")], "upward import"),
        ([("api", "kube", "edgetrain/api/x.py")], "upward import"),
        (
            [("pipeline", "operator", "a.py"), ("operator", "pipeline", "b.py")],
            "import circle",
        ),
        ([("newpkg", "api", "edgetrain/newpkg/x.py")], "has no level"),
    ],
)
def test_the_checker_catches_violations(edges: list[Edge], expected: str) -> None:
    problems = layer_violations(edges, LEVELS)
    assert any(expected in p for p in problems), problems


def test_the_checker_accepts_downward_and_sideways_imports() -> None:
    edges = [
        ("cli", "operator", "a.py"),
        ("operator", "pipeline", "b.py"),  # sideways, no circle
        ("workloads", "predictor", "c.py"),
        ("predictor", "numpy", "d.py"),
    ]
    assert layer_violations(edges, LEVELS) == []


if __name__ == "__main__":  # python -m tests.test_layout: the subpackage graph, for the docs
    every, _ = import_edges()
    graph: dict[str, set[str]] = defaultdict(set)
    for src, dst, _where in every:
        if dst in LEVELS or dst == "torch":
            graph[src].add(dst)
    for src in sorted(graph, key=lambda s: (LEVELS.get(s, 9), s)):
        print(f"{src:>10} -> {', '.join(sorted(graph[src], key=lambda d: (LEVELS.get(d, 9), d)))}")
