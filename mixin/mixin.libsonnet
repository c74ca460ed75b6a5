// The virtcap monitoring mixin: recording rules, alerts and dashboards for the capacity of libvirt
// hypervisors as Nova and Placement count it. Import it and override _config (config.libsonnet):
//   (import 'mixin.libsonnet') + { _config+:: { selector: 'job="libvirt-capacity"', fleetLabel: 'cluster' } }
// and render prometheusAlerts, prometheusRules and grafanaDashboards (alerts.jsonnet, rules.jsonnet
// and dashboards.jsonnet do, for the files committed under generated/).
(import 'config.libsonnet')
+ (import 'alerts/alerts.libsonnet')
+ (import 'rules/rules.libsonnet')
+ (import 'dashboards/dashboards.libsonnet')
