//go:build !linux

package gitobj

// dropResident does nothing where packs are not mapped with madvise.
func dropResident([]byte) {}

// adviseRandom does nothing where packs are not mapped with madvise.
func adviseRandom([]byte) {}
