// The four virtcap dashboards, linked to each other by their tag (_config.dashboardTag).
(import 'fleet.libsonnet')
+ (import 'hypervisor.libsonnet')
+ (import 'flavors.libsonnet')
+ (import 'exporter.libsonnet')
