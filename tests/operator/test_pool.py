"""The reconcile pool runs tasks earliest due first: a poll yields to starts and wake-ups."""

from __future__ import annotations

import threading
import time

import pytest

from edgetrain.operator.handlers import _due
from edgetrain.operator.pool import DuePool


def _blocked(pool: DuePool) -> threading.Event:
    """Occupy the pool's only thread until the returned event is set."""
    release = threading.Event()
    started = threading.Event()

    def hold() -> None:
        started.set()
        release.wait(10)

    pool.submit(hold)
    assert started.wait(10)
    return release


def test_earliest_due_runs_first_ties_in_submission_order() -> None:
    pool = DuePool(1, "test")
    release = _blocked(pool)
    order: list[str] = []
    now = time.monotonic()
    futures = [pool.submit(lambda tag=tag: order.append(tag), due=now + due)
               for tag, due in [("poll", 10.0), ("start", 0.0), ("wake-a", 0.5), ("wake-b", 0.5)]]
    assert pool.queued() == 4
    release.set()
    for f in futures:
        f.result(10)
    assert order == ["start", "wake-a", "wake-b", "poll"]
    pool.shutdown()


def test_a_poll_goes_after_a_start_that_came_later_within_an_interval() -> None:
    now = time.monotonic()
    assert _due((now, "poll")) > _due((now + 1.0, "start"))
    assert _due((now, "configmap")) < _due((now + 1.0, "job"))


def test_cancelled_task_is_skipped_and_errors_reach_the_caller() -> None:
    pool = DuePool(1, "test")
    release = _blocked(pool)
    ran: list[str] = []
    cancelled = pool.submit(lambda: ran.append("cancelled"))
    failing = pool.submit(lambda: 1 / 0)
    fine = pool.submit(lambda: ran.append("fine") or 7)
    assert cancelled.cancel()
    release.set()
    assert fine.result(10) == 7
    with pytest.raises(ZeroDivisionError):
        failing.result(10)
    assert ran == ["fine"]
    pool.shutdown()


def test_threads_grow_with_the_queue_up_to_the_limit() -> None:
    pool = DuePool(3, "test")
    gate = threading.Event()
    inside = threading.Semaphore(0)

    def wait() -> None:
        inside.release()
        gate.wait(10)

    futures = [pool.submit(wait) for _ in range(5)]
    for _ in range(3):  # three run at once: the limit
        assert inside.acquire(timeout=10)
    assert not inside.acquire(timeout=0.2)
    assert pool.queued() == 2
    gate.set()
    for f in futures:
        f.result(10)
    pool.shutdown()
