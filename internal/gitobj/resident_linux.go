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

// adviseRandom tells the kernel the mapped file b is read at random: a
// page fault reads that page, not the read-around window around it (up to
// megabytes with large folios), which under a memory limit smaller than
// the file turned every lookup into megabytes of disk reads.
func adviseRandom(b []byte) {
	if len(b) > 0 {
		_ = syscall.Madvise(b, syscall.MADV_RANDOM)
	}
}
