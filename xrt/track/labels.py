"""The words the tracker stores and takes on the command line: the kinds of a step and the statuses
of a stored regression. Stdlib only, so the CLI's registration and the dashboard read them cheaply."""

# what a step of a series is (xrt.track.detect): slower, faster, or the time moved and the cycles did not
REGRESSION, IMPROVEMENT, CLOCK = "regression", "improvement", "clock"
KINDS = (REGRESSION, IMPROVEMENT, CLOCK)

# a stored regression's status (xrt.track.regressions); "fixed" is set by the detector, never by a user
STATUSES = ("new", "acknowledged", "ignored", "fixed")
OPEN = ("new", "acknowledged")  # still somebody's to look at: the front page, the gate's summary
SETTABLE = ("acknowledged", "ignored", "new")  # what `xrt regressions ack --status` and the detail page set
