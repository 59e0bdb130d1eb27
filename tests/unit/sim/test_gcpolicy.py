"""sim.gcpolicy: each collection timed per generation, one line for what ran between two looks."""

from __future__ import annotations

import gc

from compute_domains.sim import gcpolicy


def test_every_collection_is_counted_and_timed_in_its_generation() -> None:
    timings = gcpolicy.Timings()
    enabled = gc.isenabled()
    gc.disable()  # only the collections asked for here
    gc.callbacks.append(timings.callback)
    try:
        gc.collect(0)
        gc.collect(2)
        gc.collect(2)
    finally:
        gc.callbacks.remove(timings.callback)
        if enabled:
            gc.enable()
    counts, seconds = timings.snapshot()
    assert counts == (1, 0, 2)
    assert seconds[0] > 0 and seconds[2] > 0 and seconds[1] == 0


def test_the_line_names_only_what_ran_between_the_two_looks() -> None:
    before = ((3, 1, 0), (0.5, 0.25, 0.0))
    assert gcpolicy.describe(before, before) is None
    after = ((10, 1, 2), (0.75, 0.25, 1.5))
    assert gcpolicy.describe(before, after) == (
        "garbage collections generation 0: 7 in 0.25s, generation 2: 2 in 1.50s"
    )
