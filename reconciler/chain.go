package reconciler

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"sync"

	"signet.dev/signet/evidence"
	"signet.dev/signet/signing"
)

// chainCache remembers the head of this cluster's receipt chain.
type chainCache struct {
	mu    sync.Mutex
	known bool
	seq   int64
	ref   *evidence.FileRef
}

type chainHeadInfo struct {
	seq int64
	ref *evidence.FileRef
}

func (c *chainCache) invalidate() {
	c.mu.Lock()
	c.known = false
	c.mu.Unlock()
}

func (c *chainCache) set(seq int64, ref *evidence.FileRef) {
	c.mu.Lock()
	c.known, c.seq, c.ref = true, seq, ref
	c.mu.Unlock()
}

// chainHead returns the last receipt of this cluster's chain (seq 0 and a
// nil ref when there is none), reading the branch when not cached.
func (r *Reconciler) chainHead(ctx context.Context) (chainHeadInfo, error) {
	r.chain.mu.Lock()
	if r.chain.known {
		h := chainHeadInfo{r.chain.seq, r.chain.ref}
		r.chain.mu.Unlock()
		return h, nil
	}
	r.chain.mu.Unlock()
	if err := r.store.Refresh(ctx); err != nil {
		return chainHeadInfo{}, err
	}
	base := evidence.ChainDir(r.cfg.Cluster)
	buckets, err := r.store.ReadDir(ctx, base)
	if errors.Is(err, evidence.ErrNotFound) || (err == nil && len(buckets) == 0) {
		r.chain.set(0, nil)
		return chainHeadInfo{}, nil
	}
	if err != nil {
		return chainHeadInfo{}, err
	}
	slices.Sort(buckets)
	last := buckets[len(buckets)-1]
	links, err := r.store.ReadDir(ctx, path.Join(base, last))
	if err != nil {
		return chainHeadInfo{}, err
	}
	slices.Sort(links)
	if len(links) == 0 {
		return chainHeadInfo{}, fmt.Errorf("%s/%s: empty receipt chain bucket", base, last)
	}
	p := path.Join(base, last, links[len(links)-1])
	at, ok := evidence.ParsePath(p)
	if !ok || at.Kind != evidence.KindChainLink || at.Cluster != r.cfg.Cluster {
		return chainHeadInfo{}, fmt.Errorf("%s: not a link of the receipt chain", p)
	}
	seq := at.Seq
	b, err := r.store.Read(ctx, p)
	if err != nil {
		return chainHeadInfo{}, err
	}
	var link evidence.ChainLink
	if err := signing.StrictUnmarshal(b, &link); err != nil {
		return chainHeadInfo{}, fmt.Errorf("%s: %w", p, err)
	}
	ref := link.Receipt
	r.chain.set(seq, &ref)
	return chainHeadInfo{seq, &ref}, nil
}
