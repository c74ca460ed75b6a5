"""How many series /metrics holds with and without the opt-in per-domain series, and how many
the per-project series add: for the demo fleet, and for a synthetic fleet (bench/harness.py's
`make_hosts`, half its domains Nova instances) whose Nova instances belong to one of `--projects`
projects at random. One audit, rendered offline as `virtcap serve` renders /metrics (no server).

    PYTHONPATH=exporter python bench/series_count.py --hypervisors 1000 --domains 50
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from harness import make_hosts, write_config
from virtcap.audit.domain_xml import NOVA_NAMESPACE
from virtcap.config import Config, load_config
from virtcap.demo import demo_config
from virtcap.exposition.families import views
from virtcap.exposition.fragments import FragmentCache
from virtcap.fleet.store import SnapshotStore
from virtcap.fleet.tolerance import one_shot_tolerance
from virtcap.service.oneshot import audit_fleet_once

FAMILIES = ("hypervisor_project_", "hypervisor_domain_")


def give_owners(paths: dict[str, Path], projects: int, seed: int = 11) -> None:
    """Each Nova instance of the node files gets Nova's owner metadata: one of `projects` projects."""
    rng = random.Random(seed)
    for path in paths.values():
        parts = path.read_text(encoding="utf-8").split("</nova:flavor></nova:instance>")
        owned = [parts[0]]
        for part in parts[1:]:
            project = rng.randrange(projects)
            owner = (
                f"<nova:owner xmlns:nova='{NOVA_NAMESPACE}'><nova:project uuid='{project:032x}'>"
                f"project-{project}</nova:project></nova:owner>"
            )
            owned.append(f"</nova:flavor>{owner}</nova:instance>{part}")
        path.write_text("".join(owned), encoding="utf-8")


def count(config: Config) -> dict[str, int]:
    snapshots = asyncio.run(audit_fleet_once(config, cpu_window=0.0))
    store = SnapshotStore()
    store.track([h.name for h in config.hypervisors])
    for snapshot in snapshots:
        store.record(snapshot, "success" if snapshot.up else "failure")
    tolerance = one_shot_tolerance(snapshots, config.multipliers, 1)
    fleet = views(store, time.time(), 3600)
    result = {}
    for label, exposition in (
        ("default", config.exposition),
        ("domains", config.exposition.model_copy(update={"domains": True})),
    ):
        body = FragmentCache().render(fleet, {}, None, tolerance, exposition=exposition).decode()
        samples = [line for line in body.splitlines() if line and not line.startswith("#")]
        result[label] = len(samples)
        for family in FAMILIES:
            result[f"{label} {family}*"] = sum(line.startswith(family) for line in samples)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hypervisors", type=int, default=1000)
    parser.add_argument("--domains", type=int, default=50)
    parser.add_argument("--projects", type=int, default=200)
    args = parser.parse_args()
    print("demo:", count(demo_config()))
    with tempfile.TemporaryDirectory() as directory:
        paths = make_hosts(Path(directory), args.hypervisors, args.domains)
        give_owners(paths, args.projects)
        config = load_config(
            write_config(Path(directory), {name: f"test://{path}" for name, path in paths.items()})
        )
        print(f"{args.hypervisors} x {args.domains}, {args.projects} projects:", count(config))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
