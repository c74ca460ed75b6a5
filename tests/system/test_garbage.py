"""The cycle collector's policy in the exporter and its workers (service/garbage.py), in a process
of its own each: it changes the interpreter's collector for the whole process, which a test's
own process must not see."""

from __future__ import annotations

import json
import subprocess
import sys

FROZEN_AND_FREED = """
import gc, json, weakref
from virtcap.service.garbage import SurvivorFreezing

class Node:
    other = None

def held(obj):
    return any(found is obj for found in gc.get_objects())

now = [0.0]
freezing = SurvivorFreezing(every=600.0, clock=lambda: now[0])
found = {}
kept = Node()
gc.collect()
found["walked without the policy"] = held(kept)
freezing.install()
gc.collect()
found["walked once frozen"] = held(kept)
young = Node()
gc.collect(0)
found["walked after the youngest generation's collection"] = held(young)
gc.collect(1)
found["walked once it survived the middle generation's collection"] = held(young)
first, second = Node(), Node()
first.other, second.other = second, first
cycle = weakref.ref(first)
gc.collect()  # the cycle survives it, frozen
del first, second
now[0] = 599.0
gc.collect()
found["dead cycle kept before the whole collection"] = cycle() is not None
now[0] = 600.0
gc.collect()
found["dead cycle freed by the whole collection"] = cycle() is None
found["whole collections"] = freezing.whole_collections
found["walked after the whole collection"] = held(kept)
freezing.uninstall()
found["walked once uninstalled"] = held(kept)
print(json.dumps(found))
"""

WORKER_START = """
import gc, json
from virtcap.service.worker_process import start_worker
start_worker()
kept = [object()]
gc.collect()
print(json.dumps({"walked": any(found is kept for found in gc.get_objects())}))
"""


def run(code: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    found: dict[str, object] = json.loads(done.stdout)
    return found


def test_survivors_of_older_collections_are_frozen_and_dead_cycles_among_them_freed_periodically() -> None:
    found = run(FROZEN_AND_FREED)
    assert found == {
        "walked without the policy": True,
        "walked once frozen": False,
        "walked after the youngest generation's collection": True,
        "walked once it survived the middle generation's collection": False,
        "dead cycle kept before the whole collection": True,
        "dead cycle freed by the whole collection": True,
        "whole collections": 1,
        "walked after the whole collection": False,
        "walked once uninstalled": True,
    }


def test_every_worker_freezes_the_survivors_of_its_full_collections() -> None:
    """What the failure tolerance's, the planner's, the Placement reader's and a scenario's worker
    run first (`start_worker`)."""
    assert run(WORKER_START) == {"walked": False}
