// Every alert of the mixin, one rule group per file.
(import 'capacity.libsonnet')
+ (import 'headroom.libsonnet')
+ (import 'failure_tolerance.libsonnet')
+ (import 'maintenance.libsonnet')
+ (import 'contention.libsonnet')
+ (import 'storage.libsonnet')
+ (import 'packing.libsonnet')
+ (import 'exporter.libsonnet')
