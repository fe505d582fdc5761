package gitobj

import (
	"bytes"
	"io"
	"os"
	"strconv"
	"sync"
	"syscall"
)

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

// residentFileBytes is how much of the process's resident set is pages of
// files (mapped packs and indexes, the program's text): the third field
// of /proc/self/statm (RssFile + RssShmem), a counter the kernel keeps.
// The file stays open: a measure is one pread.
func residentFileBytes() (int64, bool) {
	f := statm()
	if f == nil {
		return 0, false
	}
	var buf [128]byte
	n, err := f.ReadAt(buf[:], 0)
	if n == 0 || (err != nil && err != io.EOF) {
		return 0, false
	}
	fields := bytes.Fields(buf[:n])
	if len(fields) < 3 {
		return 0, false
	}
	pages, err := strconv.ParseInt(string(fields[2]), 10, 64)
	if err != nil {
		return 0, false
	}
	return pages * int64(os.Getpagesize()), true
}

// statm is /proc/self/statm, opened once; nil where it cannot be.
var statm = sync.OnceValue(func() *os.File {
	f, err := os.Open("/proc/self/statm")
	if err != nil {
		return nil
	}
	return f
})
