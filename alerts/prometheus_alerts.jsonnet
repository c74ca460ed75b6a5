// jsonnet -S alerts/prometheus_alerts.jsonnet > alerts/prometheus_alerts.yaml
// --tla-code config='{...}' overrides _config, nested objects key by key: `{"for": {"forecast": "0s"}}`
// shortens one `for` and keeps the others (the end-to-end tests shorten the `for` durations).
local mixin = import '../mixin/mixin.libsonnet';
// --tla-code manifest=false gives the document as JSON, in a tenth of the time: std.manifestYamlDoc
// is slow, and the tests render the mixin often (tests/support/yaml_doc.py writes the same YAML).
function(config={}, manifest=true)
  local document = (mixin { _config:: std.mergePatch(mixin._config, config) }).prometheusAlerts;
  if manifest then std.manifestYamlDoc(document, indent_array_in_object=true, quote_keys=false) else document
