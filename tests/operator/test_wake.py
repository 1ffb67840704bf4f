"""Wake-ups: which job loops an input wakes, and that waits are released."""

from __future__ import annotations

import asyncio
import threading

from edgetrain.api.job_status import (
    EfficiencyStatus,
    Phase,
    PowerAwareTrainingJobStatus,
    ProfileStatus,
)
from edgetrain.operator import estimate_manifests as em
from edgetrain.operator.decide import awaited_configmaps
from edgetrain.operator.reconcile import owned_by
from edgetrain.operator.wake import Wakeups, job_key, owner_key, sleep_or_wake
from tests.operator.test_decide import SETTINGS, SPEC


def test_a_configmap_wakes_only_the_jobs_waiting_for_it() -> None:
    async def scenario() -> None:
        w = Wakeups()
        a, b, c = w.register(("ns", "a")), w.register(("ns", "b")), w.register(("other", "c"))
        w.await_configmaps(("ns", "a"), ["eff-1"])
        w.await_configmaps(("ns", "b"), ["prof-1", "prof-2"])
        w.await_configmaps(("other", "c"), ["eff-1"])  # same name, another namespace
        assert w.configmap_changed("ns", "eff-1") == 1
        assert a.is_set() and not b.is_set() and not c.is_set()
        assert w.configmap_changed("ns", "prof-2") == 1 and b.is_set()
        assert w.configmap_changed("ns", "unrelated") == 0
        # A new reconcile replaces what the job waits for.
        b.clear()
        w.await_configmaps(("ns", "b"), ["prof-3"])
        assert w.configmap_changed("ns", "prof-1") == 0 and not b.is_set()
        assert w.configmap_changed("ns", "prof-3") == 1

    asyncio.run(scenario())


def test_a_job_wakes_its_owner_and_memory_is_released() -> None:
    async def scenario() -> None:
        w = Wakeups()
        ev = w.register(("ns", "a"))
        w.await_configmaps(("ns", "a"), ["eff-1"])
        assert w.job_changed(("ns", "a")) and ev.is_set()
        assert not w.job_changed(("ns", "nobody"))
        w.unregister(("ns", "a"))
        assert w.size() == 0
        assert w.configmap_changed("ns", "eff-1") == 0

    asyncio.run(scenario())


def test_sleep_or_wake_returns_on_a_wake_and_collapses_repeats() -> None:
    async def scenario() -> tuple[bool, bool, bool]:
        ev = asyncio.Event()
        ev.set()
        ev.set()  # two wake-ups while the job reconciled: one more reconcile, not two
        first = await sleep_or_wake(ev, 5.0)
        second = await sleep_or_wake(ev, 0.01)
        loop = asyncio.get_running_loop()
        loop.call_later(0.01, ev.set)
        third = await sleep_or_wake(ev, 5.0)
        return first, second, third

    assert asyncio.run(scenario()) == (True, False, True)


def test_awaited_configmaps_per_phase() -> None:
    est = PowerAwareTrainingJobStatus(phase=Phase.estimating)
    assert awaited_configmaps(est, "j") == []  # the job has not named its vector yet
    est.efficiency = EfficiencyStatus(config_map="eff-k", key="k", cached=False)
    # The vector, and the parts of the current attempt's Indexed Job (each part wakes it).
    assert awaited_configmaps(est, "j") == ["eff-k", "j-estimate-0-parts"]
    est.attempts.estimate = 2
    assert awaited_configmaps(est, "j") == ["eff-k", "j-estimate-2-parts"]
    prof = PowerAwareTrainingJobStatus(
        phase=Phase.profiling,
        profiles=[
            ProfileStatus(
                device_model="jetson-nano", node="n1", l4t="32", config_map="p-1", key="1"
            ),
            ProfileStatus(
                device_model="jetson-orin-nano", node="n2", l4t="36", config_map="p-2", key="2"
            ),
        ],
    )
    assert awaited_configmaps(prof, "j") == ["p-1", "p-2"]
    assert awaited_configmaps(PowerAwareTrainingJobStatus(phase=Phase.training), "j") == []


def test_two_names_sharing_63_characters_have_distinct_keys() -> None:
    """Label values are cut at 63 characters: two such jobs share `edgetrain.io/job`, but their
    wake-up keys, and the owner their Jobs are matched to, are their own."""
    stem = "x" * 63
    a, b = ({"metadata": {"name": f"{stem}-{tail}", "namespace": "ns", "uid": uid}}
            for tail, uid in (("one", "uid-a"), ("two", "uid-b")))
    job_a, job_b = (em.estimate_job(p, SPEC, SETTINGS, key="k", attempt=0, inject=None,
                                    hold_release=None) for p in (a, b))
    assert (job_a["metadata"]["labels"]["edgetrain.io/job"]
            == job_b["metadata"]["labels"]["edgetrain.io/job"])  # what the old key was
    assert job_key(a["metadata"]) != job_key(b["metadata"])
    assert owner_key(job_a) == job_key(a["metadata"]) and owner_key(job_b) == job_key(
        b["metadata"])
    assert owner_key({"metadata": {"name": "stray"}}) is None
    listed = {"a": job_a, "b": job_b}
    assert list(owned_by(listed, {"uid-a"})) == ["a"]

    async def scenario() -> tuple[bool, bool]:
        w = Wakeups()
        ev_a, ev_b = w.register(job_key(a["metadata"])), w.register(job_key(b["metadata"]))
        owner = owner_key(job_b)
        assert owner is not None and w.job_changed(owner)
        return ev_a.is_set(), ev_b.is_set()

    assert asyncio.run(scenario()) == (False, True)


def test_a_watch_thread_wakes_a_job_on_the_loop() -> None:
    async def scenario() -> None:
        w = Wakeups()
        ev = w.register(("ns", "a"))
        thread = threading.Thread(target=w.job_changed_threadsafe, args=("ns", "a"))
        thread.start()
        thread.join()
        assert await sleep_or_wake(ev, 5.0)  # set through the loop, not from the thread
        w.job_changed_threadsafe("ns", "nobody")  # no loop waits for it: nothing happens

    asyncio.run(scenario())
