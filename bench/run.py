"""virtcap at fleet scale, next to prometheus-libvirt-exporter (`make bench`). Prints Markdown.

    python bench/run.py [--runs 3] [--quick] [--only SECTION]

1. Scrape latency of /metrics for one hypervisor of 50, 500 and 2,000 domains: virtcap next to
   prometheus-libvirt-exporter (which talks to libvirt on every scrape) on the same node file.
2. /metrics latency for 100 hypervisors x 100 domains (the exporter's own target).
3. A full audit cycle of `virtcap serve` and its peak RSS for 10, 100 and 1,000 hypervisors of 50
   domains, next to the same libvirt calls in a bare loop (the floor).
4. Event-to-metric latency: a domain defined on a real libvirtd, until its allocation is in /metrics.
5. /metrics latency while one hypervisor of the fleet hangs, and what the peer does then.
6. The GIL convoy that shapes the audit: libvirt calls in a bare loop, alone and next to a thread
   running Python.
7. NUMA fit at scale (`--only numa`): host_capacity per replayed multi-socket host (virtcap.demo.
   hostgen: two and four cells, SMT, 2 MiB and 1 GiB pages, SR-IOV VFs, pinned guests) for
   flavors that ask for cells, pages and devices, and the full audit cycle of `virtcap serve` on
   100 and 500 such hosts.
8. Failure tolerance (`--only tolerance`): every hypervisor's evacuation through the simulated
   scheduler and how many hypervisors the fleet can lose together, on 1,000 hypervisors x 50
   domains (facts built in process, fleetgen's flavor mix), full and after one hypervisor changed:
   one no evacuation uses (typical), the median of those some use, the one they all use (worst);
   and the same hypervisors made full, where every evacuation fails.
9. Failure tolerance served (`--only serving`): `virtcap serve` on 1,000 test-driver hypervisors x
   50 domains with room to spare, /metrics latency during the first (full) computation and while a
   claim a second has it computed again (incrementally, or whole when claims pile up during a
   computation), next to the same fleet and claims with it
   turned off; the audit cycle and the computations' durations beside them.
10. Over real network latency (`--only latency`, root: bench/latency.py): a real libvirtd reached
   over qemu+tcp through a delay, in a network namespace of the benchmark's own, by many
   connections standing for many hypervisors: audit duration and libvirt round trips per
   hypervisor, full against incremental audits, next to prometheus-libvirt-exporter's scrape.
11. Sharding (`--only sharding`, bench/sharding.py): the same 1,000 x 50 fleet served by one
   exporter and by two shards on this machine: until every hypervisor is audited once, /metrics
   p50/p99 per process, RSS.
12. Sellable headroom (`--only sellable`, bench/sellable.py): per flavor of the demo's five, the
   instances the 1,000 x 50 fleet can still take while it tolerates one hypervisor lost.
13. Stranded capacity (`--only stranded`, bench/stranded.py): every hypervisor's of the 1,000 x 50
   fleet of (8) with the demo's flavors, in process, from a cold cache and again with it kept.
14. Compaction (`--only compaction`, bench/compaction.py): the fewest hypervisors holding every
   domain of the 1,000 x 50 fleet, its lower bound and gap, solver and validation seconds, peak RSS.
15. Consolidation plan (`--only consolidation`, bench/consolidation.py): the hypervisors live
   migrations could empty on the tolerance's 1,000 x 50 fleet, with spreading and stacking
   weighers: hypervisors emptied, moves, time, peak RSS.
16. Packing answers in the worker (`--only packing`, bench/packing.py): FleetPacking on the
   1,000 x 50 fleet in 2 zones and 20 racks, first and after one hypervisor changed; then
   `virtcap serve` on the serving fleet: /metrics latency while the worker computes them, and
   the worker's peak RSS.
17. plan runway (`--only runway`, bench/runway.py): `virtcap plan runway` over 30 days of 1,000
   hypervisors x 5 flavors backfilled into a real Prometheus.
18. What-if scenarios (`--only scenario`, bench/scenario.py): `compute_scenario` on the 1,000 x 50
   fleet adding 100 hypervisors and placing 5,000 instances, end to end and per part, and
   `--solve-for add_hypervisors` on a demand the fleet cannot hold without buying.
19. Placement reconciliation (`--only placement`, bench/reconciliation.py; needs the upstream
   virtualenv, `make upstream-venv`): a real Placement with 1,000 providers x 50 consumers, one
   round read and reconciled in process (time, requests per provider, CPU, peak RSS), the render
   with and without the placement families, and `virtcap serve`'s /metrics with and without them.

Each figure is the median of --runs runs, with half the range as the spread.

Each measurement is a module of its own (bench/scrape.py, scale.py, cycle.py, events.py, hung.py,
convoy.py, numa.py, tolerance.py, serving.py, latency.py, sharding.py, sellable.py, stranded.py,
compaction.py, consolidation.py, packing.py, hostile.py, runway.py, scenario.py, reconciliation.py) on the
machinery they share, bench/harness.py; this one reads the flags and runs them in this order.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import libvirt

from compaction import fleet_compaction
from consolidation import consolidation
from convoy import gil_convoy
from cycle import audit_cycle
from events import event_latency
from harness import PEER, print_table
from hostile import hostile_fleet
from hung import hung_hypervisor
from numa import numa_fit
from packing import packing
from reconciliation import placement_reconciliation
from runway import runway
from scale import scrape_at_scale
from scenario import scenario
from scrape import scrape_comparison
from sellable import sellable
from serving import tolerance_while_scraped
from sharding import sharding
from stranded import stranded_capacity_at_scale
from tolerance import failure_tolerance
from virtcap import __version__
from virtcap.audit.host_readings import version_string


def network_latency(quick: bool) -> None:
    """bench/latency.py, as root: it creates a network namespace."""
    if os.geteuid() != 0:
        print_table("Over real network latency", ("result",), [("not measured: needs root (ip netns, tc)",)])
        return
    import latency  # noqa: PLC0415  (imported here: it brings tests/support/libvirtd.py and pytest, for root only)

    latency.network_latency(quick)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="smaller fleets, one run: a smoke test")
    parser.add_argument(
        "--only",
        choices=(
            "scrape",
            "scale",
            "cycle",
            "events",
            "hung",
            "hostile",
            "convoy",
            "numa",
            "tolerance",
            "compaction",
            "serving",
            "latency",
            "sharding",
            "sellable",
            "stranded",
            "consolidation",
            "packing",
            "runway",
            "scenario",
            "placement",
        ),
        help="run one measurement only",
    )
    args = parser.parse_args()
    if args.only in (None, "scrape", "hung", "latency") and shutil.which(PEER) is None:
        raise SystemExit(f"{PEER} is not installed: `apt-get install {PEER}` (make bench does)")
    runs = 1 if args.quick else args.runs
    peer_version = subprocess.run(
        ["dpkg-query", "-W", "-f=${Version}", PEER], capture_output=True, text=True, check=False
    ).stdout
    versions = (
        f"Python {platform.python_version()}, libvirt {version_string(libvirt.getVersion())}, "
        f"{PEER} {peer_version or '?'}"
    )
    print(f"virtcap {__version__}, {versions}")
    print(f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}")
    print(f"each figure: median of {runs} runs ± half the range")
    with tempfile.TemporaryDirectory(prefix="virtcap-bench-") as directory:
        scratch = Path(directory)
        measurements: dict[str, Callable[[], None]] = {
            "scrape": lambda: scrape_comparison(scratch, runs, [50, 500] if args.quick else [50, 500, 2000]),
            "scale": lambda: scrape_at_scale(scratch, runs, 20 if args.quick else 100, 100),
            "cycle": lambda: audit_cycle(scratch, runs, [10, 100] if args.quick else [10, 100, 1000], 50),
            "events": lambda: event_latency(scratch, runs),
            "hung": lambda: hung_hypervisor(scratch, runs),
            "hostile": lambda: hostile_fleet(scratch, runs, 10.0 if args.quick else 60.0),
            "convoy": lambda: gil_convoy(scratch, runs, 10 if args.quick else 20),
            "numa": lambda: numa_fit(
                scratch, runs, 20 if args.quick else 50, [100, 500], 5 if args.quick else 20
            ),
            "tolerance": lambda: failure_tolerance(runs, 1000, 50),
            "compaction": lambda: fleet_compaction(runs, 200 if args.quick else 1000, 50),
            "serving": lambda: tolerance_while_scraped(
                scratch, runs, 200 if args.quick else 1000, 50, 20.0 if args.quick else 60.0
            ),
            "latency": lambda: network_latency(args.quick),
            "sharding": lambda: sharding(scratch, runs, 200 if args.quick else 1000, 50),
            "sellable": lambda: sellable(runs, 200 if args.quick else 1000, 50),
            "stranded": lambda: stranded_capacity_at_scale(runs, 200 if args.quick else 1000, 50),
            "consolidation": lambda: consolidation(runs, 200 if args.quick else 1000, 50),
            "packing": lambda: packing(scratch, runs, 200 if args.quick else 1000, 50),
            "runway": lambda: runway(scratch, runs, 100 if args.quick else 1000),
            "scenario": lambda: scenario(runs, 200 if args.quick else 1000, 50),
            "placement": lambda: placement_reconciliation(
                scratch, runs, 200 if args.quick else 1000, 50, args.quick
            ),
        }
        for name, measure in measurements.items():
            if args.only in (None, name):
                measure()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
