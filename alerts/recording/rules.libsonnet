// Every recording rule of the mixin, one rule group per file.
(import 'resources.libsonnet')
+ (import 'headroom.libsonnet')
+ (import 'fleet.libsonnet')
+ (import 'groups.libsonnet')
+ (import 'projects.libsonnet')
+ (import 'contention.libsonnet')
+ (import 'storage.libsonnet')
+ (import 'packing.libsonnet')
