// Whether virtcap can see the hypervisors, Prometheus virtcap and every shard of a fleet, and virtcap
// its claims database. A hypervisor in maintenance may well be down (rebooted, reinstalled): its
// audit failing or going stale is expected. The hypervisors' alerts are one per hypervisor, whatever
// the number of exporters reporting it (the replicas of an HA pair), firing if any of them fails to
// audit it (joins.once); the exporters' own (down, claims database) are one per exporter.
local alert = (import '../../mixin/lib/alerts.libsonnet').alert;
local joins = import '../../mixin/lib/joins.libsonnet';

{
  prometheusAlerts+:: {
    groups+: [
      {
        name: 'virtcap-exporter',
        rules: [
          alert(
            $._config,
            'HypervisorAuditFailing',
            'auditFailing',
            joins.inService($._config, joins.once($._config, 'hypervisor_up{%(selector)s} == 0' % $._config)),
            'virtcap cannot audit a hypervisor.',
            'virtcap has not been able to audit {{ $labels.hypervisor }} (fleet {{ $labels.%(fleetLabel)s }}; of an HA pair, at least one replica): its capacity is unknown.' % $._config,
          ),
          alert(
            $._config,
            'HypervisorAuditStale',
            'auditStale',
            joins.inService($._config, joins.once($._config, 'time() - hypervisor_audit_timestamp_seconds{%(selector)s} > %(auditStaleSeconds)s' % $._config)),
            'The capacity data of a hypervisor is old.',
            'The last successful audit of {{ $labels.hypervisor }} was {{ $value | humanizeDuration }} ago.',
          ),
          alert(
            $._config,
            'VirtcapExporterDown',
            'exporterDown',
            |||
              up{%(selector)s} == 0
            ||| % $._config,
            'Prometheus cannot scrape virtcap.',
            'Prometheus has failed to scrape virtcap at {{ $labels.instance }}: the capacity of its hypervisors is not monitored.',
          ),
          // Distinct ordinals, so that the two replicas of an HA pair serving one shard count once;
          // no job in the grouping, so that shards scraped as one job each still add up. Evaluate it
          // where every shard of a fleet is seen (one Prometheus scraping them all, or the global
          // view): a Prometheus scraping some shards of a fleet sees the others as missing.
          alert(
            $._config,
            'VirtcapShardMissing',
            'shardMissing',
            |||
              count by (%(fleetLabel)s) (count_values by (%(fleetLabel)s) ("shard", virtcap_shard_ordinal{%(selector)s}))
                < max by (%(fleetLabel)s) (virtcap_total_shards{%(selector)s})
            ||| % $._config,
            'Fewer shards of a fleet report than it is split into.',
            'Shards of fleet {{ $labels.%(fleetLabel)s }} reporting: {{ $value }}, fewer than the total shards their exporters were started with (virtcap_total_shards): the hypervisors of the missing shards are neither audited nor counted.' % $._config,
          ),
          alert(
            $._config,
            'VirtcapShardsDisagree',
            'shardsDisagree',
            |||
              max by (%(fleetLabel)s) (virtcap_total_shards{%(selector)s})
                != min by (%(fleetLabel)s) (virtcap_total_shards{%(selector)s})
            ||| % $._config,
            'Exporters of one fleet were started with different total shards.',
            'Exporters of fleet {{ $labels.%(fleetLabel)s }} disagree on the total shards (the largest says {{ $value }}): each assigns hypervisors to shards by its own total, so some hypervisors are audited twice and others by none.' % $._config,
          ),
          alert(
            $._config,
            'VirtcapClaimsDatabaseDown',
            'claimsDatabaseDown',
            |||
              virtcap_claims_database_up{%(selector)s} == 0
            ||| % $._config,
            'virtcap cannot use its claims database: claims and maintenance changes answer 503, while /metrics stays correct.',
            'The claims database of {{ $labels.instance }} is unreachable or refuses writes: creating or deleting claims and setting or ending maintenance answer 503 until it is back; /metrics goes on serving, with the claims last read.',
          ),
        ],
      },
    ],
  },
}
