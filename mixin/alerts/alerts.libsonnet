// Every alert of the mixin, one rule group per file.
(import 'capacity.libsonnet')
+ (import 'headroom.libsonnet')
+ (import 'failure_tolerance.libsonnet')
+ (import 'exporter.libsonnet')
