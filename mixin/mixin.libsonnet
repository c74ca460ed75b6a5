// The virtcap monitoring mixin: recording rules, alerts and dashboards for the capacity of libvirt
// hypervisors as Nova and Placement count it. Import it and override _config (config.libsonnet):
//   (import 'mixin.libsonnet') + { _config+:: { selector: 'job="libvirt-capacity"', fleetLabel: 'cluster' } }
// and render prometheusAlerts, prometheusRules and grafanaDashboards. Their sources live at the
// repository's top level beside the files generated from them (alerts/prometheus_alerts.jsonnet,
// alerts/prometheus_rules.jsonnet and dashboards/dashboards.jsonnet render those); this folder
// holds only what they share: the settings and the helper library.
(import 'config.libsonnet')
+ (import '../alerts/alerting/alerts.libsonnet')
+ (import '../alerts/recording/rules.libsonnet')
+ (import '../dashboards/dashboards.libsonnet')
