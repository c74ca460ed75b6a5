// An alert as the mixin writes them all: its `for` and severity from _config by key, a summary, a
// templated description and a runbook_url to its section of the runbook (the alert's name in lower
// case, as GitHub makes anchors of headings).
{
  alert(config, name, key, expr, summary, description):: {
    alert: name,
    expr: expr,
    'for': config['for'][key],
    labels: { severity: config.severity[key] },
    annotations: {
      summary: summary,
      description: description,
      runbook_url: '%s#%s' % [config.runbookURL, std.asciiLower(name)],
    },
  },
}
