//go:build !linux

package gitobj

// dropResident does nothing where packs are not mapped with madvise.
func dropResident([]byte) {}

// adviseRandom does nothing where packs are not mapped with madvise.
func adviseRandom([]byte) {}

// residentFileBytes is not measured here: nothing is dropped.
func residentFileBytes() (int64, bool) { return 0, false }
