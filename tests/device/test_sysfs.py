"""The one write path: a store is never cut in half, by a stop signal or by a reader looking in
while its writer is descheduled."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest

from edgetrain.device.sysfs import read_int, write_value


class Stopped(Exception):
    """What the handler raises, as the CLIs raise KeyboardInterrupt on SIGTERM."""


@pytest.fixture
def sigterm_raises() -> Iterator[None]:
    def _raise(signum: int, _frame: FrameType | None) -> None:
        raise Stopped(signum)

    previous = signal.signal(signal.SIGTERM, _raise)
    yield
    signal.signal(signal.SIGTERM, previous)


def _read_fifo(path: Path, got: list[bytes], after_s: float) -> None:
    time.sleep(after_s)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # lets a blocked writer's open return
    deadline = time.monotonic() + 5
    try:
        while not b"".join(got).endswith(b"\n") and time.monotonic() < deadline:
            with contextlib.suppress(BlockingIOError):  # a writer connected, nothing yet
                got.append(os.read(fd, 64))
            time.sleep(0.01)
    finally:
        os.close(fd)


def test_sigterm_during_a_store_is_raised_after_the_value_is_written(
    tmp_path: Path, sigterm_raises: None
) -> None:
    # A FIFO holds the writer inside open() until a reader comes: the signal lands mid-store.
    fifo = tmp_path / "min_freq"
    os.mkfifo(fifo)
    got: list[bytes] = []
    main = threading.main_thread().ident
    assert main is not None
    signaller = threading.Timer(0.2, signal.pthread_kill, (main, signal.SIGTERM))
    reader = threading.Thread(target=_read_fifo, args=(fifo, got, 0.5))
    signaller.start()
    reader.start()
    with pytest.raises(Stopped):
        write_value(fifo, "76800000\n")
    reader.join()
    assert b"".join(got) == b"76800000\n"
    assert signal.getsignal(signal.SIGTERM) is not None  # the handler is put back
    with pytest.raises(Stopped):
        signal.raise_signal(signal.SIGTERM)


def test_a_store_from_another_thread_is_plain(tmp_path: Path) -> None:
    path = tmp_path / "max_freq"
    worker = threading.Thread(target=write_value, args=(path, "921600000\n"))
    worker.start()
    worker.join()
    assert path.read_text() == "921600000\n"


def test_a_reader_never_finds_a_store_empty(monkeypatch: pytest.MonkeyPatch,
                                            tmp_path: Path) -> None:
    """No truncate before the write: what another process reads mid-store (here, just before
    the bytes go in) is the old value, and after it the new one, whatever their lengths."""
    path = tmp_path / "max_freq"
    path.write_text("1267200000\n")
    seen: list[int] = []
    real_write = os.write

    def looking_in(fd: int, data: bytes) -> int:
        # Only this test's file: twins of the session's virtual nodes write from their own
        # threads in this process meanwhile.
        if os.readlink(f"/proc/self/fd/{fd}") == str(path):
            seen.append(read_int(path))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", looking_in)
    write_value(path, "76800000")
    write_value(path, "1267200000")
    assert seen == [1_267_200_000, 76_800_000]
    assert path.read_text() == "1267200000\n"
    write_value(path, "76800000")
    assert path.read_text() == "76800000\n"  # the longer value's tail is cut after the store
