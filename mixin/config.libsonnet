// The mixin's settings. Override any of them where you import the mixin:
//   (import 'mixin.libsonnet') + { _config+:: { selector: 'job="libvirt-capacity"', fleetLabel: 'cluster' } }
{
  _config+:: {
    // Which series are virtcap's.
    selector: 'job="virtcap"',

    // The label that tells fleets apart where several are federated into one Prometheus (as
    // kubernetes-mixin's clusterLabel tells clusters apart). virtcap does not export it: it is a
    // target label of the scrape configuration, or an external label of the Prometheus that
    // scrapes one fleet. Every aggregation of the rules, alerts and dashboards keeps it, so two
    // fleets whose hypervisors have the same names never merge; without the label they are one.
    fleetLabel: 'fleet',

    // A hypervisor is nearly exhausted above this share of its limit (used / limit).
    nearlyExhaustedRatio: 0.90,
    // The host really uses this share of its memory: the danger of memory overcommit.
    memoryPressureRatio: 0.95,
    // Fewer schedulable instances of a flavor in the whole fleet than this is low headroom.
    flavorHeadroomMinimum: 5,
    // Fewer free passthrough devices of a PCI alias than this, in the whole fleet, is low headroom.
    pciDeviceHeadroomMinimum: 2,
    // Fewer free VGPUs of a mediated device type than this, in the whole fleet, is low headroom.
    vgpuHeadroomMinimum: 4,
    // Forecast: free capacity below this share of the limit and trending to 0 within the horizon.
    forecastFreeRatio: 0.20,
    forecastWindow: '6h',
    forecastHorizonSeconds: 7 * 24 * 3600,
    // An audit older than this is stale (keep it above a few audit intervals).
    auditStaleSeconds: 600,

    // Host groups (hypervisor_group_info{kind, group}). PromQL cannot join two series that both
    // have several per hypervisor (a host in two aggregates has two memberships, and several
    // resources or flavors): the per-group resource rules join one resource at a time, these
    // resources (add any custom resource class you want per-group totals of)...
    groupResources: ['vcpu', 'pcpu', 'memory', 'disk'],
    // ... and the per-group rules of flavors and projects are computed for these kinds only, whose
    // groups never overlap (a hypervisor is in at most one group of each).
    exclusiveGroupKinds: ['availability_zone', 'rack'],

    // HypervisorFlavorHeadroomLow for the flavors of the configuration only (false), or also for
    // those virtcap discovered in the Nova metadata of existing domains (true).
    flavorHeadroomDiscovered: false,
    // A maintenance without an end is overdue once it has lasted this long, counted from its start
    // (hypervisor_maintenance_start_timestamp_seconds), whatever gaps the series has.
    maintenanceOverdueSeconds: 7 * 24 * 3600,

    // CPU contention: the share of time the average running vCPU waited for a physical CPU (its
    // steal time) above which a hypervisor is contended, measured over this window.
    cpuContentionRatio: 0.10,
    cpuContentionWindow: '5m',
    // A shared storage pool whose volumes add up to more than this share of its capacity is
    // over-provisioned (thin provisioning: it can fill before its volumes do). Cinder's
    // max_over_subscription_ratio defaults to 20: raise this where overcommit is deliberate.
    storagePoolProvisionedRatio: 1.0,
    // HypervisorStrandedCapacityHigh: more than this share of the fleet's free memory or vCPUs
    // stranded (free, but no packing of the fleet's flavors can use it).
    strandedShareWarning: 0.5,
    // Runway: the seconds until no more instance of a flavor fits (fleet-wide and per group of the
    // exclusive kinds), at the least-squares trend of the recorded sums over this window; and
    // HypervisorFlavorRunwayShort below this runway. Prometheus durations both.
    runwayWindow: '7d',
    runwayWarning: '14d',
    // Placement reconciliation (`placement:` in virtcap's configuration). The per-hypervisor
    // Placement families exist only while Placement is read successfully: they vanish, never stale,
    // while it is unreadable (and before the first reading after a restart). The drift alerts take
    // the last value read within this window, so that an outage shorter than it neither resolves
    // nor restarts them (VirtcapPlacementDown says so after its own `for`: keep the window longer),
    // while a value read as 0 resolves them at once. An exporter without `placement:` has none of
    // these series: nothing fires.
    placementGapWindow: '30m',

    // How long each condition must hold before the alert fires.
    'for': {
      overcommitted: '15m',
      nearlyExhausted: '30m',
      memoryPressure: '10m',
      fleetHostFailure: '30m',
      flavorHeadroom: '30m',
      hugepagesExhausted: '30m',
      pciDeviceHeadroom: '30m',
      vgpuHeadroom: '30m',
      forecast: '1h',
      auditFailing: '10m',
      auditStale: '10m',
      inventoryRefused: '10m',
      exporterDown: '5m',
      groupHostFailure: '30m',
      maintenanceOverdue: '10m',
      cpuContention: '15m',
      storagePoolOverProvisioned: '30m',
      shardMissing: '10m',
      shardsDisagree: '10m',
      claimsDatabaseDown: '5m',
      strandedCapacity: '1h',
      flavorSellable: '30m',
      runway: '1h',
      // a consumer is briefly orphaned while an instance is built (allocated before its domain
      // exists) or deleted (its domain gone before its allocation)
      placementOrphaned: '1h',
      placementUnallocated: '30m',
      placementInventoryDrift: '30m',
      placementDown: '15m',
    },
    severity: {
      overcommitted: 'warning',
      nearlyExhausted: 'warning',
      memoryPressure: 'critical',
      fleetHostFailure: 'warning',
      flavorHeadroom: 'warning',
      hugepagesExhausted: 'warning',
      pciDeviceHeadroom: 'warning',
      vgpuHeadroom: 'warning',
      forecast: 'warning',
      auditFailing: 'warning',
      auditStale: 'warning',
      inventoryRefused: 'warning',
      exporterDown: 'critical',
      groupHostFailure: 'warning',
      maintenanceOverdue: 'info',
      cpuContention: 'warning',
      storagePoolOverProvisioned: 'warning',
      shardMissing: 'warning',
      shardsDisagree: 'warning',
      claimsDatabaseDown: 'warning',
      strandedCapacity: 'warning',
      flavorSellable: 'warning',
      runway: 'warning',
      placementOrphaned: 'warning',
      placementUnallocated: 'warning',
      placementInventoryDrift: 'warning',
      placementDown: 'warning',
    },
    // Each alert's runbook_url is this, '#', and the alert's name in lower case (its section).
    runbookURL: 'https://github.com/virtcap/virtcap/blob/main/docs/runbook.md',

    // Dashboards: the tag that links them to each other, and the uid of the data source their
    // `datasource` variable selects by default (the compose stack's provisioned Prometheus).
    dashboardTag: 'virtcap',
    datasourceUID: 'virtcap-prometheus',
  },
}
