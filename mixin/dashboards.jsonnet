// jsonnet -m mixin/generated/dashboards mixin/dashboards.jsonnet
// One file per dashboard, named by its key in grafanaDashboards. --tla-code config='{...}'
// overrides _config (as alerts.jsonnet).
local mixin = import 'mixin.libsonnet';
function(config={})
  (mixin { _config:: std.mergePatch(mixin._config, config) }).grafanaDashboards
