package evidence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/storer"

	"signet.dev/signet/internal/gitobj"
)

// The tip and its rollback protection: the store acts only on a remote tip
// that descends from the last one it fetched or pushed, remembered in
// StateDir and, with a TipKeeper, where a lost StateDir cannot take it
// along; and from a pinned tip. Nothing held, an existing branch is
// refused (ErrUnanchored) unless the caller accepts its current tip.

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

// Descends reports whether the store's tip is anc or descends from it.
// It reads commits only, walking back from the tip: a "yes" reads the
// commits appended since anc, a "no" the whole history.
func (s *Store) Descends(anc string) (bool, error) {
	if !IsCommitHash(anc) {
		return false, fmt.Errorf("evidence: %q is not a commit hash (40 lowercase hex)", anc)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false, errors.New("evidence: store is closed")
	}
	if s.tip.IsZero() {
		return false, nil
	}
	return descends(s.objs, s.tip, plumbing.NewHash(anc), plumbing.ZeroHash)
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
	tip, err := s.remote.Fetch(ctx, s.objs, fetchTarget{Storer: s.st, packDir: s.packDir}, s.ref, haves, s.opts.Timeout)
	if err != nil {
		return err
	}
	// go-git finds a fetched pack when it next needs its indexes.
	s.st.Reindex()
	s.consolidate()
	// Another writer (a stale or a new leader) may have kept a newer tip:
	// the remote must descend from it too.
	if err := s.loadKept(ctx); err != nil {
		return err
	}
	if err := s.verifyTip(tip); err != nil {
		return err
	}
	s.pinned = plumbing.ZeroHash // verified once: every later tip descends from this one
	if s.unanchored {
		switch {
		case !tip.IsZero() && s.firstUse:
			// Created by this store's own first push, whose tip a crash
			// kept from StateDir: trusted as first use was.
			s.opts.Logger.Warn("evidence: the branch this store found missing exists now: taking its tip as the first known tip",
				"url", s.remote.URL(), "branch", s.opts.Branch, "tip", tip.String())
		case !tip.IsZero():
			if !s.opts.AcceptCurrentTip {
				return fmt.Errorf("%w: %s branch %s is at %s, and %s: pin a tip you audited, or accept this one once",
					ErrUnanchored, s.remote.URL(), s.opts.Branch, tip, s.memoryText())
			}
			s.opts.Logger.Warn("evidence: accepting the branch's current tip as the first known tip: no tip was remembered or pinned",
				"url", s.remote.URL(), "branch", s.opts.Branch, "tip", tip.String())
		default:
			s.opts.Logger.Info("evidence: the branch does not exist yet: first use, the first append creates it",
				"url", s.remote.URL(), "branch", s.opts.Branch)
			if err := s.writeState(state{URL: s.remote.URL(), Branch: s.opts.Branch, FirstUse: true}); err != nil {
				return fmt.Errorf("evidence: remember first use: %w", err)
			}
		}
		s.unanchored = false
	}
	if tip == s.tip && s.keptIs(tip) {
		return nil
	}
	return s.setTip(ctx, tip, false)
}

// verifyTip fails with ErrRolledBack when tip does not descend from every
// tip the store is held to: the one it last verified (StateDir), the one
// its Keeper keeps, and the pinned one until first verified.
func (s *Store) verifyTip(tip plumbing.Hash) error {
	known := []struct {
		hash plumbing.Hash
		from string
	}{
		{s.tip, "last known tip"},
		{hashOf(s.kept.Tip), "tip kept in " + s.keeperName()},
		{s.pinned, "pinned tip"},
	}
	for i, k := range known {
		if k.hash.IsZero() || k.hash == tip || (i > 0 && k.hash == s.tip) {
			continue
		}
		if tip.IsZero() {
			return fmt.Errorf("%w: %s branch %s is gone, %s %s", ErrRolledBack, s.remote.URL(), s.opts.Branch, k.from, k.hash)
		}
		ok, err := descends(s.objs, tip, k.hash, plumbing.ZeroHash)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%w: %s branch %s is at %s, %s %s", ErrRolledBack, s.remote.URL(), s.opts.Branch, tip, k.from, k.hash)
		}
	}
	return nil
}

// memoryText says where the store looked for a tip, for ErrUnanchored.
func (s *Store) memoryText() string {
	if s.opts.Keeper == nil {
		return fmt.Sprintf("StateDir %s remembers no tip and none is pinned", s.opts.StateDir)
	}
	return fmt.Sprintf("neither StateDir %s nor %s holds a tip and none is pinned", s.opts.StateDir, s.opts.Keeper)
}

func (s *Store) keeperName() string {
	if s.opts.Keeper == nil {
		return ""
	}
	return s.opts.Keeper.String()
}

// keptIs reports whether the Keeper (if any) already keeps tip.
func (s *Store) keptIs(tip plumbing.Hash) bool {
	return s.opts.Keeper == nil || s.kept.Tip == hashText(tip)
}

// setTip records tip as the verified remote tip, in the mirror's ref,
// atomically in the state file, then in the Keeper (compare-and-swap).
func (s *Store) setTip(ctx context.Context, tip plumbing.Hash, pushed bool) error {
	return s.putTip(ctx, tip, pushed, s.stageState(tip, pushed))
}

// stageState writes and syncs, in the background, the state file that
// records tip; putTip puts it in place. The caller holds s.mu, and calls
// putTip or discards it.
func (s *Store) stageState(tip plumbing.Hash, pushed bool) *stagedFile {
	st := state{URL: s.remote.URL(), Branch: s.opts.Branch, Tip: tip.String()}
	if pushed {
		st.Pushed = tip.String()
	} else if !s.pushed.IsZero() {
		st.Pushed = s.pushed.String()
	}
	return stageFile(filepath.Join(s.opts.StateDir, stateFile), st)
}

// putTip is setTip with its state file staged by stageState(tip, pushed)
// (an append stages it while its push runs: the two syncs overlap, and
// the file replaces the old one only once the push has landed).
func (s *Store) putTip(ctx context.Context, tip plumbing.Hash, pushed bool, staged *stagedFile) error {
	if err := staged.commit(); err != nil {
		return fmt.Errorf("evidence: remember tip %s: %w", tip, err)
	}
	s.firstUse = false
	s.tip = tip
	if pushed {
		s.pushed = tip
	}
	if err := s.syncMirrorRef(); err != nil {
		return err
	}
	return s.keepTip(ctx, tip)
}

// writeState replaces the state file atomically.
func (s *Store) writeState(st state) error {
	return stageFile(filepath.Join(s.opts.StateDir, stateFile), st).commit()
}

// keepTipAttempts bounds the compare-and-swap retries of keepTip while
// other writers keep ancestors of the store's tip.
const keepTipAttempts = 5

// loadKept reads the Keeper's record into s.kept. A record for another
// remote or branch, or a tip that is not a commit hash, is refused.
func (s *Store) loadKept(ctx context.Context) error {
	k := s.opts.Keeper
	if k == nil {
		return nil
	}
	// Each call on the Keeper is bounded by Timeout, opening's too.
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	kt, err := k.LoadTip(ctx)
	if err != nil {
		return fmt.Errorf("evidence: read the tip kept in %s: %w", k, err)
	}
	if kt.Tip != "" {
		if !IsCommitHash(kt.Tip) {
			return fmt.Errorf("evidence: %s keeps tip %q, not a commit hash (40 lowercase hex)", k, kt.Tip)
		}
		if kt.URL != s.remote.URL() || kt.Branch != s.opts.Branch {
			return fmt.Errorf("evidence: %s keeps the tip of %s branch %s, not of %s branch %s: keep each branch's tip in its own object",
				k, kt.URL, kt.Branch, s.remote.URL(), s.opts.Branch)
		}
	}
	s.kept = kt
	return nil
}

// keepTip swaps tip into the Keeper. On a conflict it reads the kept tip
// again and retries only when that tip is an ancestor of tip (another
// writer kept an older one); otherwise it fails with ErrTipConflict and
// overwrites nothing, and the next refresh holds the remote to the newly
// kept tip. The caller holds s.mu.
func (s *Store) keepTip(ctx context.Context, tip plumbing.Hash) error {
	k := s.opts.Keeper
	if k == nil || s.kept.Tip == hashText(tip) {
		return nil
	}
	next := KeptTip{URL: s.remote.URL(), Branch: s.opts.Branch, Tip: hashText(tip)}
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	for range keepTipAttempts {
		kt, err := k.SwapTip(ctx, s.kept, next)
		if err == nil {
			s.kept = kt
			return nil
		}
		if !errors.Is(err, ErrTipConflict) {
			return fmt.Errorf("evidence: keep tip %s in %s: %w", tip, k, err)
		}
		if err := s.loadKept(ctx); err != nil {
			return err
		}
		if s.kept.Tip == next.Tip {
			return nil
		}
		if s.kept.Tip != "" {
			ok, err := descends(s.objs, tip, plumbing.NewHash(s.kept.Tip), plumbing.ZeroHash)
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("%w: %s now keeps %s, which %s branch %s at %s does not descend from; left as it is",
					ErrTipConflict, k, s.kept.Tip, s.remote.URL(), s.opts.Branch, tip)
			}
		}
	}
	return fmt.Errorf("%w: %s changed %d times while keeping %s", ErrTipConflict, k, keepTipAttempts, tip)
}

// IsCommitHash reports whether s is a commit hash as signet writes and
// pins them: 40 lowercase hex digits.
func IsCommitHash(s string) bool {
	if len(s) != 40 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// hashOf is the hash of a kept or pinned tip, zero for "".
func hashOf(s string) plumbing.Hash {
	if s == "" {
		return plumbing.ZeroHash
	}
	return plumbing.NewHash(s)
}

// hashText is h as a kept tip, "" for the zero hash.
func hashText(h plumbing.Hash) string {
	if h.IsZero() {
		return ""
	}
	return h.String()
}

// stagedFile is a replacement for a file, written to a temporary file
// next to it and synced in the background: commit renames it over the
// file and syncs the directory; discard removes it.
type stagedFile struct {
	name, tmp string
	done      chan struct{}
	err       error // set before done is closed
}

// stageFile starts writing v, as indented JSON and a newline, to a
// temporary file next to name.
func stageFile(name string, v any) *stagedFile {
	f := &stagedFile{name: name, done: make(chan struct{})}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		f.err = err
		close(f.done)
		return f
	}
	go func() {
		defer close(f.done)
		f.tmp, f.err = writeSynced(filepath.Dir(name), "."+filepath.Base(name)+".tmp-*", append(b, '\n'))
	}()
	return f
}

// writeSynced writes data to a new temporary file in dir, named by
// pattern, synced and closed, and returns its name.
func writeSynced(dir, pattern string, data []byte) (string, error) {
	f, err := os.CreateTemp(dir, pattern)
	if err != nil {
		return "", err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

// commit waits for the staged file, renames it over the file and syncs
// the directory.
func (f *stagedFile) commit() error {
	<-f.done
	if f.err != nil {
		return f.err
	}
	if err := os.Rename(f.tmp, f.name); err != nil {
		os.Remove(f.tmp)
		return err
	}
	d, err := os.Open(filepath.Dir(f.name))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// discard waits for the staged file and removes it.
func (f *stagedFile) discard() {
	<-f.done
	if f.tmp != "" {
		os.Remove(f.tmp)
	}
}

// descends reports whether anc is desc or one of its ancestors. The walk
// does not go below stop (when non-zero). It reads only commits, never
// trees; without stop it may walk the whole history to prove a "no".
func descends(src gitobj.Source, desc, anc, stop plumbing.Hash) (bool, error) {
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
		raw, err := src.Object(plumbing.CommitObject, h, 0)
		if err != nil {
			return false, fmt.Errorf("evidence: read commit %s: %w", h, err)
		}
		c, err := gitobj.ParseCommitHeader(raw)
		if err != nil {
			return false, fmt.Errorf("evidence: read commit %s: %w", h, err)
		}
		for _, p := range c.Parents {
			if !seen[p] {
				seen[p] = true
				queue = append(queue, p)
			}
		}
	}
	return false, nil
}

// fetchTarget is where a fetch writes its pack: gitobj's PackIndexer,
// which installs it in the mirror's pack directory with its index in
// memory bounded independent of the branch, rather than the mirror's
// filesystem.Storage, whose PackfileWriter first loads every existing
// pack index into memory and whose pack parser keeps a record of every
// object it indexes (about 1 GiB for the first fetch of 10^4 runs,
// issue 19).
type fetchTarget struct {
	storer.Storer
	packDir string
}

// PackfileWriter implements storer.PackfileWriter.
func (f fetchTarget) PackfileWriter() (io.WriteCloser, error) {
	if err := os.MkdirAll(f.packDir, 0o755); err != nil {
		return nil, err
	}
	return gitobj.NewPackIndexer(f.packDir)
}
