"""kube-scheduler's counters (``bench.schedevents``): kept families, differences, per event."""

from __future__ import annotations

from compute_domains.bench import schedevents as sm

SCRAPE_1 = """# HELP scheduler_queue_incoming_pods_total Number of pods added to scheduling queues
# TYPE scheduler_queue_incoming_pods_total counter
scheduler_queue_incoming_pods_total{event="NodeUpdateNodeLabel",queue="active"} 10
scheduler_queue_incoming_pods_total{event="resource.k8s.io/ResourceSliceUpdate",queue="active"} 4
scheduler_event_handling_duration_seconds_sum{event="NodeUpdateNodeLabel"} 0.5
scheduler_event_handling_duration_seconds_count{event="NodeUpdateNodeLabel"} 2
scheduler_event_handling_duration_seconds_bucket{event="NodeUpdateNodeLabel",le="0.1"} 2
scheduler_schedule_attempts_total{profile="default-scheduler",result="scheduled"} 3
process_cpu_seconds_total 1.5
apiserver_request_total{code="200"} 99
"""
SCRAPE_2 = """scheduler_queue_incoming_pods_total{event="NodeUpdateNodeLabel",queue="active"} 110
scheduler_queue_incoming_pods_total{event="NodeUpdateNodeLabel",queue="backoff"} 5
scheduler_queue_incoming_pods_total{event="resource.k8s.io/ResourceSliceUpdate",queue="active"} 54
scheduler_event_handling_duration_seconds_sum{event="NodeUpdateNodeLabel"} 2.5
scheduler_event_handling_duration_seconds_count{event="NodeUpdateNodeLabel"} 12
scheduler_schedule_attempts_total{profile="default-scheduler",result="scheduled"} 13
process_cpu_seconds_total 4.0
"""


def test_only_the_scheduler_families_and_no_buckets_or_comments_are_kept() -> None:
    kept = sm.keep(SCRAPE_1).splitlines()
    assert len(kept) == 6
    assert not any(line.startswith("#") or "_bucket" in line for line in kept)
    assert not any(line.startswith("apiserver_") for line in kept)


def test_the_difference_of_two_scrapes_counts_what_happened_in_between() -> None:
    between = {
        (name, labels.get("event", ""), labels.get("queue", "")): value
        for name, labels, value in sm.parse(sm.less(SCRAPE_2, sm.keep(SCRAPE_1)))
    }
    incoming = "scheduler_queue_incoming_pods_total"
    assert between[(incoming, "NodeUpdateNodeLabel", "active")] == 100
    assert between[(incoming, "NodeUpdateNodeLabel", "backoff")] == 5  # new since: all of it
    assert between[(incoming, "resource.k8s.io/ResourceSliceUpdate", "active")] == 50
    assert between[("process_cpu_seconds_total", "", "")] == 2.5


def test_the_summary_orders_events_by_pods_moved_with_their_handling() -> None:
    lines = sm.summary(sm.less(SCRAPE_2, sm.keep(SCRAPE_1))).splitlines()
    label, slice_update = lines[1].split(), lines[2].split()
    assert label == ["NodeUpdateNodeLabel", "105", "10", "2.000"]
    assert slice_update == ["resource.k8s.io/ResourceSliceUpdate", "50", "0", "0.000"]
    assert "scheduler_schedule_attempts_total{scheduled} = 10" in lines


def test_moves_and_handling_per_event_most_first() -> None:
    between = sm.less(SCRAPE_2, sm.keep(SCRAPE_1))
    assert sm.moved(between) == {
        "NodeUpdateNodeLabel": 105,
        "resource.k8s.io/ResourceSliceUpdate": 50,
    }
    assert sm.handling(between) == {"NodeUpdateNodeLabel": (10, 2.0)}
    assert sm.moved(sm.keep(SCRAPE_1))["NodeUpdateNodeLabel"] == 10


def test_a_raw_page_s_histogram_buckets_are_not_handling_time() -> None:
    assert sm.handling(SCRAPE_1) == {"NodeUpdateNodeLabel": (2, 0.5)}
