// Every recording rule of the mixin, one rule group per file.
(import 'resources.libsonnet')
+ (import 'headroom.libsonnet')
+ (import 'fleet.libsonnet')
