package evidencetest

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	"signet.dev/signet/evidence"
)

// MemoryKeeper is an evidence.TipKeeper in memory with the compare-and-swap
// of a Kubernetes object (a version bumped by every write), for scenarios
// that play another writer of the kept tip. The real one is
// reconciler/kube's TipKeeper.
type MemoryKeeper struct {
	mu      sync.Mutex
	kept    evidence.KeptTip
	version int
}

var _ evidence.TipKeeper = (*MemoryKeeper)(nil)

// LoadTip returns the kept record.
func (k *MemoryKeeper) LoadTip(context.Context) (evidence.KeptTip, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	kt := k.kept
	kt.Version = strconv.Itoa(k.version)
	return kt, nil
}

// SwapTip replaces old with next when old's version is the kept one.
func (k *MemoryKeeper) SwapTip(_ context.Context, old, next evidence.KeptTip) (evidence.KeptTip, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if old.Version != strconv.Itoa(k.version) {
		return evidence.KeptTip{}, fmt.Errorf("%w: version %s, kept %d", evidence.ErrTipConflict, old.Version, k.version)
	}
	k.version++
	k.kept = next
	k.kept.Version = strconv.Itoa(k.version)
	return k.kept, nil
}

// Set keeps tip behind the store's back, as another writer of the same
// branch would (the remote and branch of the kept record stay).
func (k *MemoryKeeper) Set(tip string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.version++
	k.kept.Tip = tip
}

func (k *MemoryKeeper) String() string { return "memory keeper" }
