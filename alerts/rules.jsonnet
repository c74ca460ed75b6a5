// jsonnet -S -J alerts alerts/rules.jsonnet > alerts/virtcap-rules.yaml
function(config={})
  std.manifestYamlDoc(((import 'mixin.libsonnet') + { _config+:: config }).prometheusRules, indent_array_in_object=true, quote_keys=false)
