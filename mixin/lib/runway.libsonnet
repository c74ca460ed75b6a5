// The runway of a recorded sum of schedulable instances: how long until no more instance of its
// flavor fits, at the trend of the last _config.runwayWindow. The trend is deriv's least-squares
// slope, so a noisy series still has one; the runway is what is left divided by how fast it goes,
// and only where it goes: a flat or rising trend has no series (no exhaustion in sight) rather
// than an infinite or a negative one. Recorded in the rule group of the sum, after it: a group's
// rules run in order at one timestamp, while another group's may run before the sum's and, at a
// long evaluation interval, find nothing within the lookback. `virtcap plan runway` answers the
// same question once, with a band around it.
{
  seconds(config, sum):: '%(sum)s\n  / (-deriv(%(sum)s[%(window)s]) > 0)\n' % { sum: sum, window: config.runwayWindow },
}
