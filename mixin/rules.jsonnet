// jsonnet -S mixin/rules.jsonnet > mixin/generated/prometheus_rules.yaml
// --tla-code config='{...}' overrides _config, nested objects key by key (as alerts.jsonnet).
local mixin = import 'mixin.libsonnet';
function(config={})
  std.manifestYamlDoc((mixin { _config:: std.mergePatch(mixin._config, config) }).prometheusRules, indent_array_in_object=true, quote_keys=false)
