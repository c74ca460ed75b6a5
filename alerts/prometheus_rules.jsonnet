// jsonnet -S alerts/prometheus_rules.jsonnet > alerts/prometheus_rules.yaml
// --tla-code config='{...}' overrides _config, nested objects key by key (as prometheus_alerts.jsonnet).
local mixin = import '../mixin/mixin.libsonnet';
// --tla-code manifest=false gives the document as JSON, in a tenth of the time: std.manifestYamlDoc
// is slow, and the tests render the mixin often (tests/support/yaml_doc.py writes the same YAML).
function(config={}, manifest=true)
  local document = (mixin { _config:: std.mergePatch(mixin._config, config) }).prometheusRules;
  if manifest then std.manifestYamlDoc(document, indent_array_in_object=true, quote_keys=false) else document
