"""The threads that run the jobs' reconciles, earliest due first.

A FIFO pool served everything in arrival order: at 1,000 jobs every running job's fallback
poll (one per job per poll interval, almost always deciding nothing) sat in the same queue as
the new jobs' first reconciles and the wake-ups of inputs that landed, so a burst of creations
waited behind tens of seconds of polls (`docs/benchmarks/operator.md`, issue 42). Here each
task is due at the moment its cause arrived plus a slack: none for a start or a wake-up, the
poll interval for a poll (a poll is late only once it is a whole interval late). A poll thus
yields to every start and wake-up that arrived up to an interval after it, and is never
starved longer than that.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")


class DuePool:
    """A thread pool whose queue is ordered by each task's due time (monotonic seconds), ties in
    submission order; threads are started on demand, up to `workers`."""

    def __init__(self, workers: int, name: str) -> None:
        self._workers = workers
        self._name = name
        self._cond = threading.Condition()
        self._queue: list[tuple[float, int, Callable[[], Any], Future[Any]]] = []
        self._seq = itertools.count()
        self._threads: list[threading.Thread] = []
        self._idle = 0
        self._closed = False

    def submit(self, fn: Callable[[], T], due: float | None = None) -> Future[T]:
        """Run `fn` in a worker once no task due earlier waits (`due`: time.monotonic(); None:
        now)."""
        future: Future[T] = Future()
        with self._cond:
            if self._closed:
                raise RuntimeError("the pool is shut down")
            heapq.heappush(self._queue, (time.monotonic() if due is None else due,
                                         next(self._seq), fn, future))
            # Each waiting thread takes one task; a task beyond them needs a new thread.
            if len(self._queue) > self._idle and len(self._threads) < self._workers:
                thread = threading.Thread(target=self._work, daemon=True,
                                          name=f"{self._name}_{len(self._threads)}")
                self._threads.append(thread)
                thread.start()
            else:
                self._cond.notify()
        return future

    def queued(self) -> int:
        """Tasks waiting for a thread (tests, logs)."""
        with self._cond:
            return len(self._queue)

    def shutdown(self) -> None:
        """Run what is queued, then let the threads end."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._idle += 1
                    self._cond.wait()
                    self._idle -= 1
                if not self._queue:
                    return
                _due, _seq, fn, future = heapq.heappop(self._queue)
            if not future.set_running_or_notify_cancel():
                continue  # its awaiting task was cancelled (the operator stops)
            try:
                result = fn()
            except BaseException as exc:  # handed to whoever awaits the future
                future.set_exception(exc)
            else:
                future.set_result(result)
