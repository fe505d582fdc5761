package audit

// SetClosedRunBatch sets how many closed runs the audit checks at a time
// and returns a function restoring the previous value.
func SetClosedRunBatch(n int) (restore func()) {
	old := closedRunBatch
	closedRunBatch = n
	return func() { closedRunBatch = old }
}

// SetAfterWalk sets a function the audit calls once the history is read
// and every run with a receipt is checked and compacted, before the
// whole-branch checks; it returns a function restoring the previous one.
func SetAfterWalk(f func()) (restore func()) {
	old := afterWalk
	afterWalk = f
	return func() { afterWalk = old }
}

// SetProgressEvery sets how many commits the audit reads between two
// progress calls and returns a function restoring the previous value.
func SetProgressEvery(n int) (restore func()) {
	old := progressEvery
	progressEvery = n
	return func() { progressEvery = old }
}
