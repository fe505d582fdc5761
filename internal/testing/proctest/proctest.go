// Package proctest reads what the kernel says about the test process.
package proctest

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// PeakRSS is this process's peak resident set size in bytes (VmHWM of
// /proc/self/status).
func PeakRSS() (uint64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("/proc/self/status: no VmHWM")
}
