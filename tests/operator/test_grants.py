"""The grant handshake (operator/grants.py) as tables: what a job may still act on, and when a
raise may be issued."""

from __future__ import annotations

from edgetrain.operator.grants import (
    GrantRecord,
    PodLimit,
    Rules,
    acknowledge,
    authorised_w,
    issue,
    may_issue,
    node_draw_w,
    pod_limits,
)

IDLE = {"n1": 1.0, "n2": 1.0}


def test_a_lowered_grant_holds_the_older_one_until_its_echo() -> None:
    rec = issue(GrantRecord("ns/a", "n1"), 4.0, 1, "n1", "train")
    rec = acknowledge(rec, 1)
    assert (rec.watts, rec.held_w) == (4.0, 4.0)
    lowered = issue(rec, 2.0, 2, "n1", "train")
    assert (lowered.watts, lowered.held_w, lowered.acknowledged) == (2.0, 4.0, 1)
    assert acknowledge(lowered, 1).held_w == 4.0  # an echo of the old grant releases nothing
    assert acknowledge(lowered, 2).held_w == 2.0
    # Without the rule (the old "not Training counts as acknowledged"): released at once.
    assert issue(rec, 2.0, 2, "n1", "train", Rules(acknowledge_by_sequence=False)).held_w == 2.0


def test_an_echo_is_monotone_and_never_ahead_of_the_record() -> None:
    rec = issue(GrantRecord("ns/a", "n1"), 3.0, 5, "n1", "train")
    assert acknowledge(rec, 9).acknowledged == 5
    assert acknowledge(acknowledge(rec, 5), 2).acknowledged == 5


def test_a_node_counts_its_highest_limit_or_idle() -> None:
    records = [GrantRecord("ns/a", "n1", 2.0, 2, 1, held_w=4.0)]
    pods = [PodLimit("n1", 4.5, "old"), PodLimit("n2", None, "other"), PodLimit("x", 9.0)]
    assert node_draw_w(records, pods, IDLE) == {"n1": 4.5, "n2": 1.0}
    assert node_draw_w(records, pods, IDLE, Rules(count_pods=False)) == {"n1": 4.0, "n2": 1.0}
    assert authorised_w(records, pods, IDLE) == 5.5


def test_a_raise_is_issued_only_if_the_sum_fits() -> None:
    records = {"ns/a": GrantRecord("ns/a", "n1", 2.0, 2, 1, held_w=4.0)}
    assert not may_issue(records, "ns/b", 3.5, "n2", [], IDLE, 7.0)  # 4 + 3.5 > 7
    assert may_issue(records, "ns/b", 3.0, "n2", [], IDLE, 7.0)
    # Lowering and withdrawing never wait.
    assert may_issue(records, "ns/a", 1.5, "n1", [], IDLE, 1.0)
    assert may_issue(records, "ns/a", None, "n1", [], IDLE, 1.0)
    # A pod that has not ended counts: the raise waits for it.
    acked = {"ns/a": GrantRecord("ns/a", "n1", 2.0, 2, 2, held_w=2.0)}
    assert may_issue(acked, "ns/b", 4.0, "n2", [], IDLE, 6.0)
    assert not may_issue(acked, "ns/b", 4.0, "n2", [PodLimit("n1", 4.0)], IDLE, 6.0)


def test_pods_that_have_not_ended_at_their_limit() -> None:
    def pod(name: str, node: str, limit: str | None, phase: str) -> dict[str, object]:
        notes = {} if limit is None else {"edgetrain.io/power-limit-watts": limit}
        return {"metadata": {"name": name, "annotations": notes}, "spec": {"nodeName": node},
                "status": {"phase": phase}}

    pods = [pod("a", "n1", "4.5", "Running"), pod("b", "n1", "9", "Succeeded"),
            pod("c", "n2", "x", "Pending"), pod("d", "n3", "3", "Running"),
            pod("e", "n2", "inf", "Running")]
    assert pod_limits(pods, ["n1", "n2"]) == [PodLimit("n1", 4.5, "a"), PodLimit("n2", None, "c"),
                                              PodLimit("n2", None, "e")]
