package evidence

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"

	"signet.dev/signet/internal/gitobj"
)

// Reads of the tip the store last fetched or pushed: files, directories,
// and the commit that added a file. They read raw objects through s.objs
// (gitobj.Source: the overlay, then the mirror's mapped packs), never
// through go-git's object API, whose pack reader keeps every pack index
// in memory with an offset map over all its objects, and caches decoded
// objects: about 19 KiB a run held after a reconciler's start-up (issue
// 19, docs/decisions.md "Start-up memory").

// Read returns the content of the file at p on the tip, ErrNotFound when
// there is none.
func (s *Store) Read(ctx context.Context, p string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, err := s.lookup(p)
	if err != nil {
		return nil, err
	}
	if e.Mode == filemode.Dir {
		return nil, fmt.Errorf("%w: %s is a directory", ErrNotFound, p)
	}
	b, err := s.objs.Object(plumbing.BlobObject, e.Hash, 0)
	if err != nil {
		return nil, fmt.Errorf("evidence: read %s: %w", p, err)
	}
	return b, nil
}

// ReadDir returns the sorted entry names of the directory dir on the tip
// ("" or "." is the root), ErrNotFound when there is no such directory.
func (s *Store) ReadDir(ctx context.Context, dir string) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var h plumbing.Hash
	if dir == "" || dir == "." || dir == "/" {
		if s.tip.IsZero() {
			return nil, fmt.Errorf("%w: branch %s does not exist yet", ErrNotFound, s.opts.Branch)
		}
		c, err := s.commitHeader(s.tip)
		if err != nil {
			return nil, fmt.Errorf("evidence: read tip: %w", err)
		}
		h = c.Tree
	} else {
		e, err := s.lookup(dir)
		if err != nil {
			return nil, err
		}
		if e.Mode != filemode.Dir {
			return nil, fmt.Errorf("%w: %s is a file, not a directory", ErrNotFound, dir)
		}
		h = e.Hash
	}
	entries, err := s.tree(h)
	if err != nil {
		return nil, fmt.Errorf("evidence: read %s: %w", dir, err)
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name
	}
	slices.Sort(names)
	return names, nil
}

// Exists reports whether a file or directory p is on the tip.
func (s *Store) Exists(ctx context.Context, p string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, err := s.lookup(p)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// lookup walks from the tip's root tree to p, reading one tree per path
// element.
func (s *Store) lookup(p string) (object.TreeEntry, error) {
	if s.tip.IsZero() {
		return object.TreeEntry{}, fmt.Errorf("%w: %s (branch %s does not exist yet)", ErrNotFound, p, s.opts.Branch)
	}
	c, err := s.commitHeader(s.tip)
	if err != nil {
		return object.TreeEntry{}, fmt.Errorf("evidence: read tip: %w", err)
	}
	return s.lookupIn(c.Tree, p)
}

// AddedIn returns the commit that added the file at p: the oldest commit
// on the tip's first-parent line that has it. Since the branch only adds
// files, p exists in every commit from that one to the tip. It costs one
// lookup per commit since then; ErrNotFound when the tip lacks p.
func (s *Store) AddedIn(ctx context.Context, p string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.lookup(p); err != nil {
		return "", err
	}
	h := s.tip
	c, err := s.commitHeader(h)
	if err != nil {
		return "", fmt.Errorf("evidence: read tip: %w", err)
	}
	for {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		if len(c.Parents) == 0 {
			return h.String(), nil
		}
		parent, err := s.commitHeader(c.Parents[0])
		if err != nil {
			return "", fmt.Errorf("evidence: read commit %s: %w", c.Parents[0], err)
		}
		if _, err := s.lookupIn(parent.Tree, p); errors.Is(err, ErrNotFound) {
			return h.String(), nil
		} else if err != nil {
			return "", err
		}
		h, c = c.Parents[0], parent
	}
}

// commitHeader reads commit h's tree and parents.
func (s *Store) commitHeader(h plumbing.Hash) (gitobj.CommitHeader, error) {
	raw, err := s.objs.Object(plumbing.CommitObject, h, 0)
	if err != nil {
		return gitobj.CommitHeader{}, err
	}
	return gitobj.ParseCommitHeader(raw)
}

// tree reads the entries of tree h.
func (s *Store) tree(h plumbing.Hash) ([]object.TreeEntry, error) {
	raw, err := s.objs.Object(plumbing.TreeObject, h, 0)
	if err != nil {
		return nil, err
	}
	return gitobj.ParseTree(raw)
}

// lookupIn resolves p in the tree root.
func (s *Store) lookupIn(root plumbing.Hash, p string) (object.TreeEntry, error) {
	parts, err := splitPath(p)
	if err != nil {
		return object.TreeEntry{}, err
	}
	cur := object.TreeEntry{Mode: filemode.Dir, Hash: root}
	for i, name := range parts {
		if cur.Mode != filemode.Dir {
			return object.TreeEntry{}, fmt.Errorf("%w: %s (%s is a file)", ErrNotFound, p, path.Join(parts[:i]...))
		}
		entries, err := s.tree(cur.Hash)
		if err != nil {
			return object.TreeEntry{}, fmt.Errorf("evidence: read tree %s: %w", path.Join(parts[:i]...), err)
		}
		e, ok := findEntry(entries, name)
		if !ok {
			return object.TreeEntry{}, fmt.Errorf("%w: %s", ErrNotFound, p)
		}
		cur = e
	}
	return cur, nil
}

// findEntry finds name in entries sorted in Git order.
func findEntry(entries []object.TreeEntry, name string) (object.TreeEntry, bool) {
	for _, e := range entries {
		if e.Name == name {
			return e, true
		}
	}
	return object.TreeEntry{}, false
}

// DropResident drops the pages of the mirror's mapped packs read so far
// from the process's resident set (gitobj.Dir.DropResident), as the
// mirror's reads do themselves past their bound: a reader of every run (a
// reconciler's recovery) calls it when done. It holds s.mu, under which
// alone a consolidation unmaps packs.
func (s *Store) DropResident() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fast != nil && !s.closed {
		s.fast.DropResident()
	}
}
