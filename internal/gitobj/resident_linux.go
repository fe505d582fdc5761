package gitobj

import "syscall"

// dropResident tells the kernel the process no longer needs the pages of
// the mapped file b: they leave the resident set (the page cache keeps
// them), and a later read faults them in again from the file.
func dropResident(b []byte) {
	if len(b) > 0 {
		_ = syscall.Madvise(b, syscall.MADV_DONTNEED)
	}
}
