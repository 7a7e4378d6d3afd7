"""CPU lists and thread pinning for the CPU backend."""

from __future__ import annotations

import argparse
import os
import threading

import pytest

from xinfer_ros.engine.affinity import available_cpus, cpu_list, parse_cpus, pin_thread


def test_parse_cpus_accepts_lists_and_ranges() -> None:
    cpus = sorted(available_cpus())
    first, last = cpus[0], cpus[-1]
    assert parse_cpus(str(first)) == (first,)
    assert parse_cpus(f"{last},{first}") == tuple(sorted({first, last}))
    if len(cpus) > 1 and cpus[1] == first + 1:
        assert parse_cpus(f"{first}-{first + 1}") == (first, first + 1)


@pytest.mark.parametrize("text", ["", "a", "1,,2", "3-1", "-1"])
def test_parse_cpus_rejects_malformed_lists(text: str) -> None:
    with pytest.raises(ValueError, match="CPU list"):
        parse_cpus(text)


def test_parse_cpus_names_an_unavailable_cpu() -> None:
    missing = max(available_cpus()) + 1000
    with pytest.raises(ValueError, match=f"CPU {missing} is not available"):
        parse_cpus(str(missing))
    with pytest.raises(argparse.ArgumentTypeError, match="not available"):
        cpu_list(str(missing))


def test_pin_thread_is_inherited_by_new_threads_and_undone_by_none() -> None:
    cpu = min(available_cpus())
    seen: list[set[int]] = []

    def body() -> None:
        pin_thread((cpu,))
        child = threading.Thread(target=lambda: seen.append(os.sched_getaffinity(0)))
        child.start()
        child.join()
        pin_thread(None)
        seen.append(os.sched_getaffinity(0))

    # In a thread of its own, so the test runner's main thread keeps its CPUs.
    t = threading.Thread(target=body)
    t.start()
    t.join()
    assert seen == [{cpu}, set(available_cpus())]
