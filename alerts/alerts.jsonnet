// jsonnet -S -J alerts alerts/alerts.jsonnet > alerts/virtcap-alerts.yaml
// --tla-code config='{...}' overrides _config (the end-to-end test shortens the `for` durations).
function(config={})
  std.manifestYamlDoc(((import 'mixin.libsonnet') + { _config+:: config }).prometheusAlerts, indent_array_in_object=true, quote_keys=false)
