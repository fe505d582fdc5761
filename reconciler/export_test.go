package reconciler

import "time"

// FinishedRecordFile is the record of finished runs' file name in the
// state directory.
const FinishedRecordFile = finishedRecordFile

// SetRecoverProgressEvery sets how often recovery logs its progress and
// returns a function restoring it.
func SetRecoverProgressEvery(d time.Duration) (restore func()) {
	was := recoverProgressEvery.Swap(int64(d))
	return func() { recoverProgressEvery.Store(was) }
}

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

// CheckDocsHeld is how many check documents run holds in memory (log
// tails and all), -1 when the run is not held in full.
func (r *Reconciler) CheckDocsHeld(run string) int {
	r.mu.Lock()
	rs, ok := r.runs[run]
	r.mu.Unlock()
	if !ok {
		return -1
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return len(rs.checkDocs)
}

// FoldReads is how many finished runs the standing pool's history read
// from the evidence branch (foldFinished).
func (r *Reconciler) FoldReads() int64 { return r.foldReads.Load() }

// RunReads is how many runs were read from the evidence branch (readRun:
// recovery, a request's or a firing's run, Wait on a compact run).
func (r *Reconciler) RunReads() int64 { return r.runReads.Load() }
