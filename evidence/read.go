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
)

// Reads of the tip the store last fetched or pushed: files, directories,
// and the commit that added a file.

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
	blob, err := object.GetBlob(s.objs, e.Hash)
	if err != nil {
		return nil, fmt.Errorf("evidence: read %s: %w", p, err)
	}
	r, err := blob.Reader()
	if err != nil {
		return nil, fmt.Errorf("evidence: read %s: %w", p, err)
	}
	defer r.Close()
	b := make([]byte, 0, blob.Size)
	for {
		if len(b) == cap(b) {
			b = slices.Grow(b, 512)
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err != nil {
			break
		}
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
		c, err := object.GetCommit(s.objs, s.tip)
		if err != nil {
			return nil, fmt.Errorf("evidence: read tip: %w", err)
		}
		h = c.TreeHash
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
	t, err := object.GetTree(s.objs, h)
	if err != nil {
		return nil, fmt.Errorf("evidence: read %s: %w", dir, err)
	}
	names := make([]string, len(t.Entries))
	for i, e := range t.Entries {
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
	c, err := object.GetCommit(s.objs, s.tip)
	if err != nil {
		return object.TreeEntry{}, fmt.Errorf("evidence: read tip: %w", err)
	}
	return s.lookupIn(c, p)
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
	c, err := object.GetCommit(s.objs, s.tip)
	if err != nil {
		return "", fmt.Errorf("evidence: read tip: %w", err)
	}
	for {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		if c.NumParents() == 0 {
			return c.Hash.String(), nil
		}
		parent, err := object.GetCommit(s.objs, c.ParentHashes[0])
		if err != nil {
			return "", fmt.Errorf("evidence: read commit %s: %w", c.ParentHashes[0], err)
		}
		if _, err := s.lookupIn(parent, p); errors.Is(err, ErrNotFound) {
			return c.Hash.String(), nil
		} else if err != nil {
			return "", err
		}
		c = parent
	}
}

// lookupIn resolves p in commit c's tree.
func (s *Store) lookupIn(c *object.Commit, p string) (object.TreeEntry, error) {
	parts, err := splitPath(p)
	if err != nil {
		return object.TreeEntry{}, err
	}
	cur := object.TreeEntry{Mode: filemode.Dir, Hash: c.TreeHash}
	for i, name := range parts {
		if cur.Mode != filemode.Dir {
			return object.TreeEntry{}, fmt.Errorf("%w: %s (%s is a file)", ErrNotFound, p, path.Join(parts[:i]...))
		}
		t, err := object.GetTree(s.objs, cur.Hash)
		if err != nil {
			return object.TreeEntry{}, fmt.Errorf("evidence: read tree %s: %w", path.Join(parts[:i]...), err)
		}
		e, ok := findEntry(t.Entries, name)
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
