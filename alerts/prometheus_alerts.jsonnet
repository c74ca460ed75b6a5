// jsonnet -S alerts/prometheus_alerts.jsonnet > alerts/prometheus_alerts.yaml
// --tla-code config='{...}' overrides _config, nested objects key by key: `{"for": {"forecast": "0s"}}`
// shortens one `for` and keeps the others (the end-to-end tests shorten the `for` durations).
local mixin = import '../mixin/mixin.libsonnet';
function(config={})
  std.manifestYamlDoc((mixin { _config:: std.mergePatch(mixin._config, config) }).prometheusAlerts, indent_array_in_object=true, quote_keys=false)
