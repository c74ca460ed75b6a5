// jsonnet -m dashboards dashboards/dashboards.jsonnet
// One file per dashboard, named by its key in grafanaDashboards. --tla-code config='{...}'
// overrides _config (as alerts/prometheus_alerts.jsonnet).
local mixin = import '../mixin/mixin.libsonnet';
function(config={})
  (mixin { _config:: std.mergePatch(mixin._config, config) }).grafanaDashboards
