package audit

// SetClosedRunBatch sets how many closed runs the audit checks at a time
// and returns a function restoring the previous value.
func SetClosedRunBatch(n int) (restore func()) {
	old := closedRunBatch
	closedRunBatch = n
	return func() { closedRunBatch = old }
}
