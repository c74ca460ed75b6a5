"""The global view over shards: two Prometheus servers, each scraping one shard of the demo split
in two, federated into a third that runs the mixin's rules, which then record what one Prometheus
scraping one unsharded exporter records, and answers every dashboard panel's query."""

from __future__ import annotations

import json
import math
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from tests.support.dashboards import panel_targets, substitute
from tests.support.mixin import ALERTS_FILE, RULES_FILE
from tests.support.prometheus import Prometheus, running_prometheus, scrape_config
from tests.support.serving import running_server, wait_for

SHARDS = 2

FLEET_RULES = (
    "resource:hypervisor_resource_size:sum",
    "resource:hypervisor_resource_reserved:sum",
    "resource:hypervisor_resource_limit:sum",
    "resource:hypervisor_resource_used:sum",
    "resource:hypervisor_resource_free:sum",
    "resource:hypervisor_resource_limit:max",
    "resource:hypervisor_resource_offered:count",
    "resource:hypervisor_failover_shortfall:sum",
    "resource:hypervisor_resource_utilization:ratio",
    "resource:hypervisor_resource_effective_overcommit:ratio",
    "state:hypervisor_domains:sum",
    ":hypervisor_up:sum",
    ":hypervisor_up:count",
    ":hypervisor_maintenance:sum",
    "group_resource:hypervisor_resource_limit:sum",
    "group_resource:hypervisor_resource_used:sum",
    "group_resource:hypervisor_failover_shortfall:sum",
    "group:hypervisor_up:count",
    "group:hypervisor_in_service:count",
    "page_size_bytes:hypervisor_numa_cell_hugepages_free:sum",
    "alias:hypervisor_pci_alias_devices_free:sum",
    "mdev_type:hypervisor_gpu_vgpus_free:sum",
    "pool:hypervisor_storage_pool_capacity_bytes:max",
    "pool:hypervisor_storage_pool_hypervisors:count",
    ":hypervisor_storage_pool_provisioned_bytes:sum",
    # the configured flavors' headroom: each shard discovers the flavors of its own domains only
    "flavor:hypervisor_schedulable_instances:sum"
    ' and on (fleet, flavor) virtcap_flavor_info{source="configured"}',
)
"""Fleet-level recording rules, each a sum (or count, max) over hypervisors: exact however the
hypervisors are split. Not among them: the projects' (each shard ranks its own largest projects,
the rest is its `other`), the evacuations' (each shard re-homes within itself), and the flavors
discovered (each shard's own); see the README's "Scaling out"."""


def federation_config(shard_prometheus: list[str], rule_files: list[Path]) -> str:
    """The global Prometheus: every series of job virtcap from each shard's Prometheus, with the
    labels they have there (honor_labels: their job, instance and fleet)."""
    return json.dumps(
        {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(path) for path in rule_files],
            "scrape_configs": [
                {
                    "job_name": "federate",
                    "honor_labels": True,
                    "metrics_path": "/federate",
                    "params": {"match[]": ['{job="virtcap"}']},
                    "static_configs": [{"targets": shard_prometheus}],
                }
            ],
        }
    )


def recorded(prometheus: Prometheus, expression: str) -> dict[tuple[tuple[str, str], ...], float]:
    result: list[dict[str, Any]] = prometheus.query(expression)
    return {tuple(sorted(r["metric"].items())): float(r["value"][1]) for r in result}


def same(left: dict[Any, float], right: dict[Any, float]) -> bool:
    return left.keys() == right.keys() and all(
        math.isclose(left[key], right[key], rel_tol=1e-9, abs_tol=1e-9) for key in left
    )


def test_global_rules_over_federated_shards_equal_one_unsharded_exporters(tmp_path: Path) -> None:
    rule_files = [RULES_FILE, ALERTS_FILE]
    with ExitStack() as stack:
        shards = [
            stack.enter_context(
                running_server(["--demo", "--shard", str(ordinal), "--total-shards", str(SHARDS)], tmp_path)
            )
            for ordinal in range(SHARDS)
        ]
        whole = stack.enter_context(running_server(["--demo"], tmp_path))
        sites = []
        for ordinal, shard in enumerate(shards):
            directory = tmp_path / f"prometheus-shard-{ordinal}"
            directory.mkdir()
            config = scrape_config(shard.base_url.removeprefix("http://"))
            sites.append(stack.enter_context(running_prometheus(config, directory)))
        directory = tmp_path / "prometheus-global"
        directory.mkdir()
        targets = [site.url.removeprefix("http://") for site in sites]
        federated = stack.enter_context(running_prometheus(federation_config(targets, rule_files), directory))
        directory = tmp_path / "prometheus-unsharded"
        directory.mkdir()
        config = scrape_config(whole.base_url.removeprefix("http://"), rule_files=rule_files)
        single = stack.enter_context(running_prometheus(config, directory))

        def agree() -> bool:
            return all(
                (left := recorded(federated, rule)) and same(left, recorded(single, rule))
                for rule in FLEET_RULES
            )

        wait_for(agree, 40, interval=0.5, what="the federated rules equal to the unsharded ones")
        for rule in FLEET_RULES:
            assert same(recorded(federated, rule), recorded(single, rule)), rule
        # each hypervisor once in the global view, from the shard that audits it
        instances = recorded(federated, "count by (hypervisor) (hypervisor_up)")
        assert len(instances) == 11 and set(instances.values()) == {1.0}
        assert recorded(federated, "count(virtcap_shard_ordinal)") == {(): 2.0}
        assert recorded(federated, "max(virtcap_total_shards)") == {(): 2.0}
        # az-2's NFS export is seen by compute-03 (shard 0) and by compute-02 and compute-11
        # (shard 1): each shard counts its own, the memberships count all three
        shards_counts = recorded(federated, "hypervisor_storage_pool_hypervisors")
        assert sorted(shards_counts.values()) == [1.0, 2.0]
        assert set(recorded(federated, "pool:hypervisor_storage_pool_hypervisors:count").values()) == {3.0}

        # the dashboards work on the global view: every panel query that has data on the
        # unsharded Prometheus has data on the federated one (its rates a few scrapes later)
        def panels_without_data() -> list[str]:
            return [
                f"{dashboard} / {panel}: {expression}"
                for dashboard, panel, expression in panel_targets()
                if single.query(substitute(expression)) and not federated.query(substitute(expression))
            ]

        wait_for(lambda: not panels_without_data(), 30, interval=1, what="every panel with data")
        assert panels_without_data() == []
