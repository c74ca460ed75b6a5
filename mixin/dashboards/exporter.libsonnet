// virtcap itself: scrapes, audits, claims and versions.
local g = import '../lib/grafana.libsonnet';
local common = import 'common.libsonnet';

local exporterDashboard(config) =
  local c = common(config);
  local t = g.target;
  local s = c.s;

  c.dashboard(
    'virtcap-exporter',
    'virtcap / Exporter health',
    'Is virtcap itself healthy: scrapes, audits, failures, claims and versions.',
    [
      g.stat('Exporters up', 'virtcap processes Prometheus scrapes successfully.', 'short', [t('sum by (%(fleetLabel)s) (up{%(s)s})' % c)], thresholds=[{ color: 'green', value: null }]),
      g.stat('Scrape duration', 'How long Prometheus takes to scrape virtcap (the slowest exporter).', 's', [t('max by (%(fleetLabel)s) (scrape_duration_seconds{%(s)s})' % c)]),
      g.stat('Samples per scrape', 'Series virtcap exposes (the largest exporter).', 'short', [t('max by (%(fleetLabel)s) (scrape_samples_scraped{%(s)s})' % c)]),
      g.stat('Pending claims', 'Claims held and not yet reconciled, fleet-wide.', 'short', [t('sum by (%(fleetLabel)s) (virtcap_claims_pending{%(s)s})' % c)]),
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
      g.table(
        'Versions',
        'virtcap versions running (virtcap_build_info).',
        'short',
        [t('virtcap_build_info{%s}' % s, instant=true, format='table')],
        organize={ excludeByName: { Time: true, Value: true, __name__: true, job: true, [c.fleetLabel]: true } },
        width=12,
      ),
    ],
  );

{
  grafanaDashboards+:: {
    'virtcap-exporter.json': exporterDashboard($._config),
  },
}
