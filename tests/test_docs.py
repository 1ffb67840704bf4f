"""The docs stay true to the tree: every relative link and every repository path they name
resolves inside the repository, and every command of the CLI is in the README's tables."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer.main

from edgetrain.cli import build_app

ROOT = Path(__file__).resolve().parents[1]
SKIP_DIRS = {".git", ".venv", "node_modules", ".mypy_cache", ".pytest_cache", ".ruff_cache"}
LINK = re.compile(r"!?\[[^\]\n]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
# A repository path in backticks: `docs/x.md`, `examples/y.yaml`, `../shared/…`.
TOP = ("docs", "examples", "charts", "images", "scripts", "tests", "edgetrain", "tools",
       "hack", "crds")
CODE_PATH = re.compile(r"`((?:\.\./)+[^`\s]+|(?:" + "|".join(TOP) + r")/[\w./@-]+)`")


def markdown_files() -> list[Path]:
    return sorted(p for p in ROOT.rglob("*.md")
                  if not SKIP_DIRS & set(p.relative_to(ROOT).parts))


def _prose(text: str) -> str:
    """The text outside fenced code blocks (commands and their output are not links)."""
    return re.sub(r"^[ ]*```.*?^[ ]*```", "", text, flags=re.M | re.S)


@pytest.mark.parametrize("doc", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve_inside_the_repository(doc: Path) -> None:
    text = _prose(doc.read_text())
    bad = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a public URL (https:, mailto:) or an anchor in the page
        path = (doc.parent / target.split("#", 1)[0]).resolve()
        if not path.is_relative_to(ROOT):
            bad.append(f"{target}: outside the repository")
        elif not path.exists():
            bad.append(f"{target}: no such file")
    # jetson-facts.md cites other repositories' files by their own paths.
    for named in [] if doc.name == "jetson-facts.md" else CODE_PATH.findall(text):
        if named.startswith("../"):
            bad.append(f"`{named}`: outside the repository")
            continue
        clean = named.rstrip(".,:;")
        if any(c in clean for c in "*<>{}") or clean.endswith("/..."):
            continue  # a pattern, not a path
        if not (ROOT / clean).exists():
            bad.append(f"`{clean}`: no such file")
    assert not bad, f"{doc.relative_to(ROOT)}: " + "; ".join(bad)


def _verbs() -> list[str]:
    """Every command of `edgetrain`: top-level ones, and `group sub` for each group."""
    cli = typer.main.get_command(build_app())
    out = []
    for name, command in cli.commands.items():  # type: ignore[attr-defined]
        subs = getattr(command, "commands", None)
        out += [f"{name} {sub}" for sub in subs] if subs else [name]
    return out


def test_every_cli_verb_is_in_the_readmes_tables() -> None:
    rows = [line for line in (ROOT / "README.md").read_text().splitlines()
            if line.startswith("|")]
    missing = []
    for verb in _verbs():
        group, _, sub = verb.partition(" ")
        found = any(f"`edgetrain {verb}" in row for row in rows) or (bool(sub) and any(
            f"`edgetrain {group} " in row and re.search(rf"[ /`]{re.escape(sub)}\b", row)
            for row in rows))
        if not found:
            missing.append(verb)
    assert not missing, f"README.md's tables lack: {', '.join(missing)}"
