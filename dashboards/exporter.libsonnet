// virtcap itself: scrapes, audits, claims, shards, the claims database and versions.
local g = import '../mixin/lib/grafana.libsonnet';
local common = import 'common.libsonnet';

local exporterDashboard(config) =
  local c = common(config);
  local t = g.target;
  local s = c.s;

  c.dashboard(
    'virtcap-exporter',
    'virtcap / Exporter health',
    'Is virtcap itself healthy: scrapes, audits, failures, claims, shards, its claims database and versions.',
    [
      g.stat('Exporters up', 'virtcap processes Prometheus scrapes successfully.', 'short', [t('sum by (%(fleetLabel)s) (up{%(s)s})' % c)], thresholds=[{ color: 'green', value: null }]),
      g.stat('Scrape duration', 'How long Prometheus takes to scrape virtcap (the slowest exporter).', 's', [t('max by (%(fleetLabel)s) (scrape_duration_seconds{%(s)s})' % c)]),
      g.stat('Samples per scrape', 'Series virtcap exposes (the largest exporter).', 'short', [t('max by (%(fleetLabel)s) (scrape_samples_scraped{%(s)s})' % c)]),
      g.stat('Pending claims', 'Claims held and not yet reconciled, fleet-wide (each hypervisor once: the replicas of an HA pair share their claims).', 'short', [t('sum by (%s) (%s)' % [c.fleetLabel, c.once('virtcap_claims_pending{%(s)s}' % c)])]),
      g.timeseries(
        'Audits by outcome',
        'Finished audits per second by outcome: failures and timeouts name hypervisors virtcap cannot read.',
        'ops',
        [t('sum by (%(fleetLabel)s, outcome) (rate(virtcap_audits_total{%(s)s}[$__rate_interval]))' % c, '{{outcome}}')],
      ),
      g.timeseries(
        'Audit failures by hypervisor',
        'Failed or timed-out audits per second, per hypervisor.',
        'ops',
        [t('sum by (%(fleetLabel)s, hypervisor) (rate(virtcap_audits_total{%(s)s, outcome!="success"}[$__rate_interval]))' % c, '{{hypervisor}}')],
      ),
      g.timeseries(
        'Audit durations',
        'Duration of the last successful audit of each hypervisor: close to audit.timeout means trouble ahead.',
        's',
        [t('hypervisor_audit_duration_seconds{%s}' % s, '{{hypervisor}}')],
      ),
      g.timeseries(
        'Claims by outcome',
        'Claims per second: created, rejected (did not fit), reconciled (their domain appeared), expired, deleted.',
        'ops',
        [t('sum by (%(fleetLabel)s, outcome) (rate(virtcap_claims_total{%(s)s}[$__rate_interval]))' % c, '{{outcome}}')],
      ),
      g.timeseries(
        'Scrape duration',
        'How long each Prometheus scrape of virtcap takes.',
        's',
        [t('scrape_duration_seconds{%s}' % s, '{{instance}}')],
      ),
      g.timeseries(
        'Domain definitions read per audit',
        'Domain definitions (XML) read per successful audit, per hypervisor: its number of domains for full audits, only those that changed for incremental ones (audit.incremental; a full resynchronization every audit.resync_every audits and after a reconnect). High and steady: full audits (a driver without lifecycle events, or incremental audits off); with two replicas of an HA pair, their average. No value while no audit finished in the window.',
        'short',
        [t('sum by (%(fleetLabel)s, hypervisor) (rate(virtcap_audit_domain_reads_total{%(s)s}[$__rate_interval])) / sum by (%(fleetLabel)s, hypervisor) (rate(virtcap_audits_total{%(s)s, outcome="success"}[$__rate_interval]))' % c, '{{hypervisor}}')],
        width=12,
      ),
      g.table(
        'Shards',
        'Which shard each exporter serves (ordinal from 0) of how many it was started with, and how many hypervisors it audits. Not sharded: shard 0 of 1. Every ordinal from 0 to the total less one should be listed, once, or twice for an HA pair; two totals mean exporters started with different --total-shards.',
        'short',
        [
          t('max by (%(fleetLabel)s, instance) (virtcap_shard_ordinal{%(s)s})' % c, instant=true, format='table'),
          t('max by (%(fleetLabel)s, instance) (virtcap_total_shards{%(s)s})' % c, instant=true, format='table'),
          t('count by (%(fleetLabel)s, instance) (hypervisor_up{%(s)s})' % c, instant=true, format='table'),
        ],
        organize={
          excludeByName: { Time: true, [c.fleetLabel]: true },
          renameByName: { instance: 'Exporter', 'Value #A': 'Shard', 'Value #B': 'Total shards', 'Value #C': 'Hypervisors' },
        },
        sortBy='Shard',
        width=12,
      ),
      g.table(
        'Versions',
        'virtcap versions running (virtcap_build_info).',
        'short',
        [t('virtcap_build_info{%s}' % s, instant=true, format='table')],
        organize={ excludeByName: { Time: true, Value: true, __name__: true, job: true, [c.fleetLabel]: true } },
        width=12,
      ),
      g.stat(
        'Claims database up',
        'Per exporter: 1 (up) while its claims database (the SQLite file, or the PostgreSQL ledger replicas share) answers and accepts writes; 0 (down) while claim and maintenance changes answer 503. /metrics stays correct either way, with the claims last read.',
        'short',
        [t('min by (%(fleetLabel)s, instance) (virtcap_claims_database_up{%(s)s})' % c, '{{instance}}')],
        width=24,
        thresholds=[{ color: 'red', value: null }, { color: 'green', value: 1 }],
      ) + { fieldConfig+: { defaults+: { mappings: g.valueTexts({ '0': 'down', '1': 'up' }) } } },
    ],
  );

{
  grafanaDashboards+:: {
    'virtcap-exporter.json': exporterDashboard($._config),
  },
}
