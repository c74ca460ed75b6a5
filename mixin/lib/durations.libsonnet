// Prometheus durations ('14d', '1h30m') in seconds: a `for` or a range takes the duration, but a
// comparison in PromQL takes a number, and _config keeps one spelling for both.
local units = { y: 365 * 86400, w: 7 * 86400, d: 86400, h: 3600, m: 60, s: 1 };

{
  seconds(duration)::
    local step(state, char) =
      if std.member('0123456789', char) then state { digits: state.digits + char }
      else if std.objectHas(units, char) && state.digits != ''
      then { total: state.total + std.parseInt(state.digits) * units[char], digits: '' }
      else error 'not a Prometheus duration such as 14d or 1h30m: %s' % duration;
    local parsed = std.foldl(step, std.stringChars(duration), { total: 0, digits: '' });
    if duration == '' || parsed.digits != ''
    then error 'not a Prometheus duration such as 14d or 1h30m: %s' % duration
    else parsed.total,
}
