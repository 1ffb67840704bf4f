"""raise_inotify_limits over a copy of /proc/sys/fs/inotify: raises what is low, never lowers."""

from __future__ import annotations

from pathlib import Path

from edgetrain.cluster.hostlimits import INOTIFY_MINIMUMS, raise_inotify_limits


def test_low_limits_are_raised_and_high_ones_kept(tmp_path: Path) -> None:
    (tmp_path / "max_user_instances").write_text("128\n")
    (tmp_path / "max_user_watches").write_text("1048576\n")
    said: list[str] = []
    changed = raise_inotify_limits(said.append, tmp_path)
    assert changed == {"max_user_instances": (128, INOTIFY_MINIMUMS["max_user_instances"])}
    assert (tmp_path / "max_user_instances").read_text().strip() == "512"
    assert (tmp_path / "max_user_watches").read_text().strip() == "1048576"
    assert len(said) == 1 and "raised from 128 to 512" in said[0]
    assert raise_inotify_limits(said.append, tmp_path) == {}


def test_a_limit_this_kernel_lacks_is_skipped(tmp_path: Path) -> None:
    (tmp_path / "max_user_instances").mkdir()  # unreadable as a number: not this kernel's
    (tmp_path / "max_user_watches").write_text("8192\n")
    assert raise_inotify_limits(root=tmp_path) == {"max_user_watches": (8192, 524288)}
