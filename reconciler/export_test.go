package reconciler

// ReportFiles is the daemon's /report/ handler, for tests that serve a
// report directory without a daemon.
var ReportFiles = reportFiles
