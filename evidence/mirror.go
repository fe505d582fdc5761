package evidence

import (
	"bytes"
	"errors"
	"fmt"
	"sync"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/storage/memory"

	"signet.dev/signet/internal/gitobj"
)

// The store's local bare mirror: the objects of recent appends kept in
// memory over the mirror's packs (layered), the trees the appends wrote
// (treeCache), and the upkeep of the packs (repack).

// newOverlay returns an empty in-memory object store for the objects of
// appends not yet flushed to the mirror.
func newOverlay() *memory.ObjectStorage {
	return &memory.ObjectStorage{
		Objects: map[plumbing.Hash]plumbing.EncodedObject{},
		Commits: map[plumbing.Hash]plumbing.EncodedObject{},
		Trees:   map[plumbing.Hash]plumbing.EncodedObject{},
		Blobs:   map[plumbing.Hash]plumbing.EncodedObject{},
		Tags:    map[plumbing.Hash]plumbing.EncodedObject{},
	}
}

// layered reads objects from the in-memory overlay first, then the mirror.
type layered struct {
	storer.EncodedObjectStorer
	top   *memory.ObjectStorage
	fast  *gitobj.Dir // the mirror's objects read directly; nil reads through go-git
	trees *treeCache  // trees of recent appends flushed from the overlay
}

// Object implements gitobj.Source: the overlay, the trees of recent
// appends, then the mirror's packs and loose objects, then go-git
// (whatever gitobj.Dir cannot read).
func (l layered) Object(t plumbing.ObjectType, h plumbing.Hash, limit int64) ([]byte, error) {
	if o, err := l.top.EncodedObject(t, h); err == nil {
		return gitobj.ReadEncoded(o, limit)
	}
	if t == plumbing.TreeObject && l.trees != nil {
		if b, ok := l.trees.get(h, limit); ok {
			return b, nil
		}
	}
	if l.fast != nil {
		b, err := l.fast.Object(t, h, limit)
		if !errors.Is(err, plumbing.ErrObjectNotFound) {
			return b, err
		}
	}
	return gitobj.StorerSource{Storer: l.EncodedObjectStorer}.Object(t, h, limit)
}

// Concurrent implements gitobj.Source: the overlay and go-git's storer
// are not safe for concurrent use.
func (l layered) Concurrent() bool { return false }

// maxTreeCacheBytes bounds the trees the store keeps after a flush: at
// 10^5 runs a day the day's 256 shard trees and the index's 256 shard
// trees are about 16 KB each, and each append rewrites two of them.
const maxTreeCacheBytes = 32 << 20

// treeCache keeps the trees the store's appends wrote, by hash, once
// they are flushed from the overlay to a mirror pack: the next append to
// a shard starts from the shard's latest tree, which it then needs
// neither to find, inflate nor hash again. Objects are immutable, so an
// entry is never stale; when full the cache starts over.
type treeCache struct {
	mu    sync.Mutex
	m     map[plumbing.Hash][]byte
	bytes int
	hits  int
}

func (c *treeCache) put(h plumbing.Hash, b []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || c.bytes+len(b) > maxTreeCacheBytes {
		c.m, c.bytes = map[plumbing.Hash][]byte{}, 0
	}
	if _, ok := c.m[h]; !ok {
		c.m[h] = b
		c.bytes += len(b)
	}
}

// get returns a copy of tree h, when cached and within limit (none when
// limit <= 0).
func (c *treeCache) get(h plumbing.Hash, limit int64) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, ok := c.m[h]
	if !ok || limit > 0 && int64(len(b)) > limit {
		return nil, false
	}
	c.hits++
	return bytes.Clone(b), true
}

func (l layered) EncodedObject(t plumbing.ObjectType, h plumbing.Hash) (plumbing.EncodedObject, error) {
	if o, err := l.top.EncodedObject(t, h); err == nil {
		return o, nil
	}
	return l.EncodedObjectStorer.EncodedObject(t, h)
}

func (l layered) HasEncodedObject(h plumbing.Hash) error {
	if l.top.HasEncodedObject(h) == nil {
		return nil
	}
	return l.onDisk(h)
}

// onDisk reports whether the mirror's files (not the overlay) hold h.
// gitobj.Dir answers for packs and loose files alike; go-git only when
// there is none, since a miss there loads every pack index into memory
// after a consolidation.
func (l layered) onDisk(h plumbing.Hash) error {
	if l.fast != nil {
		if l.fast.Has(h) {
			return nil
		}
		return plumbing.ErrObjectNotFound
	}
	return l.EncodedObjectStorer.HasEncodedObject(h)
}

func (l layered) EncodedObjectSize(h plumbing.Hash) (int64, error) {
	if n, err := l.top.EncodedObjectSize(h); err == nil {
		return n, nil
	}
	return l.EncodedObjectStorer.EncodedObjectSize(h)
}

// maxRepackObjects bounds one consolidation of the mirror's packs (see
// gitobj.Dir.Consolidate): packs over it are never rewritten, so one
// consolidation costs about a second at most.
var maxRepackObjects = 1 << 18

// repack consolidates the mirror's small packs. The removal of the packs
// it replaces runs holding s.mu, so that no reader of the store is using
// them; the merge runs without it: only a consolidation (one at a time)
// unmaps packs, and Close waits for it.
func (s *Store) repack() error {
	err := s.fast.Consolidate(maxRepackObjects, func(remove func() error) error {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.closed {
			return nil // the next consolidation removes the duplicates
		}
		// go-git reopens the packs it needs.
		if err := s.st.Close(); err != nil {
			return err
		}
		s.st.Reindex()
		return remove()
	})
	if err != nil {
		return fmt.Errorf("evidence: mirror packs: %w", err)
	}
	return nil
}
