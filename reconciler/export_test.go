package reconciler

// ReportFiles is the daemon's /report/ handler, for tests that serve a
// report directory without a daemon.
var ReportFiles = reportFiles

// Vouched is the evidence branch's word on a certification label, as the
// Fleets' certification sweep asks it.
func (r *Reconciler) Vouched(run, node, profile string) bool { return r.vouched(run, node, profile) }

// InFull reports whether run is held in full (r.runs) and whether it is
// kept as a compact finished run.
func (r *Reconciler) InFull(run string) (full, compact bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, full = r.runs[run]
	_, compact = r.finished[run]
	return full, compact
}
