package evidence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
)

// The tip and its rollback protection: the store acts only on a remote tip
// that descends from the last one it fetched or pushed, remembered in
// StateDir across restarts.

// Tip is the commit the store last fetched or pushed, "" when the branch
// does not exist yet.
func (s *Store) Tip() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tip.IsZero() {
		return ""
	}
	return s.tip.String()
}

// Refresh fetches the branch. It fails with ErrRolledBack, and keeps the
// old tip, when the remote tip does not descend from the last known one.
func (s *Store) Refresh(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("evidence: store is closed")
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	return s.refresh(ctx)
}

// refresh fetches the branch and verifies its tip. The caller holds s.mu.
func (s *Store) refresh(ctx context.Context) error {
	haves := []plumbing.Hash{s.tip, s.pushed}
	if ref, err := s.st.Reference(s.ref); err == nil {
		haves = append(haves, ref.Hash())
	}
	tip, err := s.remote.Fetch(ctx, s.objs, s.st, s.ref, haves)
	if err != nil {
		return err
	}
	s.consolidate()
	if tip == s.tip {
		return nil
	}
	if !s.tip.IsZero() {
		if tip.IsZero() {
			return fmt.Errorf("%w: %s branch %s is gone, last known tip %s", ErrRolledBack, s.remote.URL(), s.opts.Branch, s.tip)
		}
		ok, err := descends(s.objs, tip, s.tip, plumbing.ZeroHash)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%w: %s branch %s is at %s, last known tip %s", ErrRolledBack, s.remote.URL(), s.opts.Branch, tip, s.tip)
		}
	}
	return s.setTip(tip, false)
}

// setTip records tip as the verified remote tip, in the mirror's ref and
// atomically in the state file.
func (s *Store) setTip(tip plumbing.Hash, pushed bool) error {
	st := state{URL: s.remote.URL(), Branch: s.opts.Branch, Tip: tip.String()}
	if pushed {
		st.Pushed = tip.String()
	} else if !s.pushed.IsZero() {
		st.Pushed = s.pushed.String()
	}
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	if err := writeFileAtomic(filepath.Join(s.opts.StateDir, stateFile), append(b, '\n')); err != nil {
		return fmt.Errorf("evidence: remember tip %s: %w", tip, err)
	}
	s.tip = tip
	if pushed {
		s.pushed = tip
	}
	return s.syncMirrorRef()
}

// writeFileAtomic replaces name with data: temp file, fsync, rename,
// fsync of the directory.
func writeFileAtomic(name string, data []byte) error {
	dir := filepath.Dir(name)
	f, err := os.CreateTemp(dir, "."+filepath.Base(name)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, name); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// descends reports whether anc is desc or one of its ancestors. The walk
// does not go below stop (when non-zero). It reads only commits, never
// trees; without stop it may walk the whole history to prove a "no".
func descends(st storer.EncodedObjectStorer, desc, anc, stop plumbing.Hash) (bool, error) {
	queue := []plumbing.Hash{desc}
	seen := map[plumbing.Hash]bool{desc: true}
	for len(queue) > 0 {
		h := queue[0]
		queue = queue[1:]
		if h == anc {
			return true, nil
		}
		if h == stop {
			continue
		}
		c, err := object.GetCommit(st, h)
		if err != nil {
			return false, fmt.Errorf("evidence: read commit %s: %w", h, err)
		}
		for _, p := range c.ParentHashes {
			if !seen[p] {
				seen[p] = true
				queue = append(queue, p)
			}
		}
	}
	return false, nil
}
