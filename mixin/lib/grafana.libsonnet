// A small helper library for virtcap's dashboards: the mixin builds offline with Debian's jsonnet
// and vendors nothing, so no grafonnet. Panels are laid out in rows of 24 columns: `layout` assigns
// ids and gridPos in reading order.
{
  datasource:: { type: 'prometheus', uid: '${datasource}' },

  // `tag` links the dashboards that share it; `datasourceUID` is the data source selected by default.
  dashboard(uid, title, description, panels, variables=[], tag='virtcap', datasourceUID='virtcap-prometheus'):: {
    uid: uid,
    title: title,
    description: description,
    tags: [tag],
    editable: false,
    refresh: '30s',
    schemaVersion: 39,
    graphTooltip: 1,
    time: { from: 'now-6h', to: 'now' },
    timezone: '',
    links: [
      {
        type: 'dashboards',
        tags: [tag],
        title: '%s dashboards' % tag,
        asDropdown: false,
        includeVars: true,
        keepTime: true,
      },
    ],
    templating: { list: [$.datasourceVariable(datasourceUID)] + variables },
    panels: $.layout(panels),
  },

  datasourceVariable(uid):: {
    name: 'datasource',
    label: 'Data source',
    type: 'datasource',
    query: 'prometheus',
    current: { selected: true, text: 'Prometheus', value: uid },
    hide: 0,
    refresh: 1,
  },

  // A variable from a PromQL query; `multi` lets it take several values and "All" (any value).
  queryVariable(name, label, query, multi=true):: {
    name: name,
    label: label,
    type: 'query',
    datasource: $.datasource,
    query: { query: query, refId: 'variable-' + name },
    definition: query,
    refresh: 2,
    sort: 1,
    multi: multi,
    includeAll: multi,
    current: {},
    hide: 0,
  } + (if multi then { allValue: '.*' } else {}),

  target(expr, legend='', instant=false, format='time_series'):: {
    expr: expr,
    legendFormat: legend,
    instant: instant,
    range: !instant,
    format: format,
    datasource: $.datasource,
  },

  // A row: a heading across the dashboard over the panels that follow it, up to the next row. It
  // has no query, unit or data source of its own.
  row(title):: {
    type: 'row',
    title: title,
    collapsed: false,
    panels: [],
    width:: 24,
    height:: 1,
  },

  local base(type, title, description, unit, targets, width, height) = {
    type: type,
    title: title,
    description: description,
    datasource: $.datasource,
    fieldConfig: { defaults: { unit: unit }, overrides: [] },
    targets: [t { refId: std.char(65 + i) } for i in std.range(0, std.length(targets) - 1) for t in [targets[i]]],
    width:: width,
    height:: height,
  },

  timeseries(title, description, unit, targets, width=12, height=8, stack=false):: base('timeseries', title, description, unit, targets, width, height) {
    fieldConfig+: {
      defaults+: {
        custom: {
          drawStyle: 'line',
          lineWidth: 1,
          fillOpacity: if stack then 30 else 10,
          stacking: { mode: if stack then 'normal' else 'none', group: 'A' },
          showPoints: 'never',
        },
      },
    },
    options: { legend: { displayMode: 'table', placement: 'right', calcs: ['lastNotNull'] }, tooltip: { mode: 'multi', sort: 'desc' } },
  },

  stat(title, description, unit, targets, width=6, height=4, thresholds=null, overrides=[]):: base('stat', title, description, unit, targets, width, height) {
    fieldConfig+: {
      defaults+: if thresholds == null then {} else { thresholds: { mode: 'absolute', steps: thresholds }, color: { mode: 'thresholds' } },
      overrides: overrides,
    },
    options: { reduceOptions: { calcs: ['lastNotNull'], fields: '', values: false }, colorMode: 'background', graphMode: 'none', textMode: 'auto' },
  },

  bargauge(title, description, unit, targets, width=12, height=8, thresholds=null, max=null):: base('bargauge', title, description, unit, targets, width, height) {
    fieldConfig+: {
      defaults+: { min: 0 } + (if max == null then {} else { max: max }) + (
        if thresholds == null then {} else { thresholds: { mode: 'absolute', steps: thresholds }, color: { mode: 'thresholds' } }
      ),
    },
    options: { orientation: 'horizontal', displayMode: 'gradient', reduceOptions: { calcs: ['lastNotNull'], fields: '', values: false }, showUnfilled: true },
  },

  // One lane per series, coloured by value over time (thresholds, and value mappings' texts).
  stateTimeline(title, description, unit, targets, width=24, height=8, thresholds=null, mappings=[]):: base('state-timeline', title, description, unit, targets, width, height) {
    fieldConfig+: {
      defaults+: { mappings: mappings } + (
        if thresholds == null then {} else { thresholds: { mode: 'absolute', steps: thresholds }, color: { mode: 'thresholds' } }
      ),
    },
    options: { showValue: 'auto', mergeValues: true, rowHeight: 0.9, legend: { showLegend: false }, tooltip: { mode: 'single' } },
  },

  table(title, description, unit, targets, width=24, height=8, overrides=[], sortBy=null, organize={}):: base('table', title, description, unit, targets, width, height) {
    fieldConfig+: { overrides: overrides },
    options: { showHeader: true, cellHeight: 'sm', footer: { show: false } } + (
      if sortBy == null then {} else { sortBy: [{ displayName: sortBy, desc: false }] }
    ),
    transformations: [
      { id: 'merge', options: {} },
      { id: 'organize', options: organize },
    ],
  },

  // A field override: unit and optional colour thresholds of one column of a table, and optional
  // value mappings (`valueTexts`) shown instead of the numbers.
  column(name, unit, thresholds=null, display=null, mappings=null):: {
    matcher: { id: 'byName', options: name },
    properties: [{ id: 'unit', value: unit }] + (
      if thresholds == null then [] else [
        { id: 'thresholds', value: { mode: 'absolute', steps: thresholds } },
        { id: 'custom.cellOptions', value: { type: 'color-background' } },
      ]
    ) + (if display == null then [] else [{ id: 'displayName', value: display }]) + (
      if mappings == null then [] else [{ id: 'mappings', value: mappings }]
    ),
  },

  // Value mappings: each value (a number, as a string key) shown as its text.
  valueTexts(texts):: [{
    type: 'value',
    options: { [value]: { text: texts[value], index: i } for i in std.range(0, std.length(texts) - 1) for value in [std.objectFields(texts)[i]] },
  }],

  // A value mapping of NaN to a text: the runway panels' "not falling" (a query's fallback, where
  // a series would otherwise be missing from the table).
  nanText(text, color='green'):: [{
    type: 'special',
    options: { match: 'nan', result: { text: text, color: color, index: 0 } },
  }],

  // A stat override: one query's value (by its refId) in a fixed colour, not the thresholds'.
  fixedColor(refId, color):: {
    matcher: { id: 'byFrameRefID', options: refId },
    properties: [{ id: 'color', value: { mode: 'fixed', fixedColor: color } }],
  },

  // Steps from red (below the first bound) to green: for "free" and headroom columns.
  freeSteps(warning, ok):: [
    { color: 'red', value: null },
    { color: 'orange', value: warning },
    { color: 'green', value: ok },
  ],
  // Steps from green to red: for utilization.
  usedSteps(warning, critical):: [
    { color: 'green', value: null },
    { color: 'orange', value: warning },
    { color: 'red', value: critical },
  ],

  // Ids and positions in reading order; a panel wider than what is left of the row starts a new one.
  layout(panels):: std.foldl(
    function(state, panel)
      local fits = state.x + panel.width <= 24;
      local x = if fits then state.x else 0;
      local y = if fits then state.y else state.y + state.rowHeight;
      local rowHeight = if fits then std.max(state.rowHeight, panel.height) else panel.height;
      {
        x: x + panel.width,
        y: y,
        rowHeight: rowHeight,
        panels: state.panels + [panel { id: std.length(state.panels) + 1, gridPos: { x: x, y: y, w: panel.width, h: panel.height } }],
      },
    panels,
    { x: 0, y: 0, rowHeight: 0, panels: [] },
  ).panels,
}
