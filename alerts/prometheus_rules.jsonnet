// jsonnet -S alerts/prometheus_rules.jsonnet > alerts/prometheus_rules.yaml
// --tla-code config='{...}' overrides _config, nested objects key by key (as prometheus_alerts.jsonnet).
local mixin = import '../mixin/mixin.libsonnet';
function(config={})
  std.manifestYamlDoc((mixin { _config:: std.mergePatch(mixin._config, config) }).prometheusRules, indent_array_in_object=true, quote_keys=false)
