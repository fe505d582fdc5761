package gitobj

import (
	"errors"
	"fmt"
	"io"
	"path"
	"slices"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/storage/memory"
)

// ErrExists means a change adds a path its base tree already holds (a
// file there, or a file where a directory is added): nothing is replaced.
var ErrExists = errors.New("path already exists in the base tree")

// Changes is a set of new files as a tree of directories: only these
// directories' trees are rewritten. Names are single path elements that
// the caller has checked; a name is a file or a directory, never both.
type Changes struct {
	Dirs  map[string]*Changes
	Files map[string][]byte
}

// SignFunc returns the armored signature of a commit's payload, written
// into its gpgsig header (an SSH signature for `git verify-commit` with
// gpg.format=ssh).
type SignFunc func(payload io.Reader) ([]byte, error)

// Builder makes one commit: it reads the base trees from a Source and
// keeps every object it creates in memory (Objects, Hashes), so that
// exactly these are pushed and nothing is written locally before the
// remote accepts them.
type Builder struct {
	src    Source
	objs   *memory.Storage
	hashes []plumbing.Hash
	made   map[plumbing.Hash]bool // the set of hashes
}

// NewBuilder returns a Builder reading base trees and commits from src.
func NewBuilder(src Source) *Builder {
	return &Builder{src: src, objs: memory.NewStorage()}
}

// Objects holds the objects the builder created.
func (b *Builder) Objects() storer.EncodedObjectStorer { return b.objs }

// Hashes lists the objects the builder created, in creation order.
func (b *Builder) Hashes() []plumbing.Hash { return b.hashes }

// Persist writes the objects the builder created to dst.
func (b *Builder) Persist(dst storer.EncodedObjectStorer) error {
	for _, h := range b.hashes {
		o, err := b.objs.EncodedObject(plumbing.AnyObject, h)
		if err != nil {
			return err
		}
		if _, err := dst.SetEncodedObject(o); err != nil {
			return fmt.Errorf("gitobj: write object %s: %w", h, err)
		}
	}
	return nil
}

func (b *Builder) put(t plumbing.ObjectType, data []byte) (plumbing.Hash, error) {
	o := b.objs.NewEncodedObject()
	o.SetType(t)
	o.SetSize(int64(len(data)))
	w, err := o.Writer()
	if err != nil {
		return plumbing.ZeroHash, err
	}
	if _, err := w.Write(data); err != nil {
		return plumbing.ZeroHash, err
	}
	if err := w.Close(); err != nil {
		return plumbing.ZeroHash, err
	}
	h, err := b.objs.SetEncodedObject(o)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	// Identical contents (two runs' copies of one approval, two equal
	// logs) are one object: listed once, or the pack pushed would count
	// it twice and stock git would refuse the pack.
	if !b.made[h] {
		if b.made == nil {
			b.made = map[plumbing.Hash]bool{}
		}
		b.made[h] = true
		b.hashes = append(b.hashes, h)
	}
	return h, nil
}

func (b *Builder) putObject(o interface {
	Encode(plumbing.EncodedObject) error
}) (plumbing.Hash, error) {
	mo := &plumbing.MemoryObject{}
	if err := o.Encode(mo); err != nil {
		return plumbing.ZeroHash, err
	}
	r, err := mo.Reader()
	if err != nil {
		return plumbing.ZeroHash, err
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	return b.put(mo.Type(), data)
}

// tree writes the tree at dir: the base tree (zero for a new directory)
// plus the changes in c. It reads and rewrites only the trees on the
// paths to the changed leaves; every other entry keeps its hash. A path
// that already exists fails with ErrExists.
//
// The base tree is spliced in its encoded form, never decoded into
// entries and encoded again: an append to a shard of a few hundred runs
// costs a scan and a copy of that tree's bytes.
func (b *Builder) tree(base plumbing.Hash, dir string, c *Changes) (plumbing.Hash, error) {
	var raw []byte
	if !base.IsZero() {
		var err error
		if raw, err = b.src.Object(plumbing.TreeObject, base, 0); err != nil {
			return plumbing.ZeroHash, fmt.Errorf("gitobj: read tree %s: %w", dir, err)
		}
	}
	// The changes in tree order, merged with the base tree's entries in
	// one pass.
	changes := make([]change, 0, len(c.Files)+len(c.Dirs))
	for name, data := range c.Files {
		changes = append(changes, change{name: name, data: data})
	}
	for name, sub := range c.Dirs {
		changes = append(changes, change{name: name, sub: sub})
	}
	slices.SortFunc(changes, func(x, y change) int {
		return compareTreeNames([]byte(x.name), x.sub != nil, []byte(y.name), y.sub != nil)
	})
	out := make([]byte, 0, len(raw)+len(changes)*(len("100644 ")+1+hashSize+64))
	var err error
entries:
	for e, rerr := range rawEntries(raw) {
		if rerr != nil {
			return plumbing.ZeroHash, fmt.Errorf("gitobj: read tree %s (%s): %w", dir, base, rerr)
		}
		isDir := e.mode == filemode.Dir
		for len(changes) > 0 {
			ch := changes[0]
			cmp := compareTreeNames([]byte(ch.name), ch.sub != nil, e.name, isDir)
			if cmp > 0 {
				break
			}
			changes = changes[1:]
			if cmp < 0 {
				if out, err = b.add(out, dir, ch); err != nil {
					return plumbing.ZeroHash, err
				}
				continue
			}
			// The same name and kind: a file there is a lost race, a
			// directory there is rewritten.
			if ch.sub == nil {
				return plumbing.ZeroHash, fmt.Errorf("%w: %s", ErrExists, path.Join(dir, ch.name))
			}
			h, err := b.tree(e.hash, path.Join(dir, ch.name), ch.sub)
			if err != nil {
				return plumbing.ZeroHash, err
			}
			out = append(out, e.raw[:len(e.raw)-hashSize]...)
			out = append(out, h[:]...)
			continue entries
		}
		// The same name as a change of the other kind (they sort apart).
		if _, ok := c.Files[string(e.name)]; ok {
			return plumbing.ZeroHash, fmt.Errorf("%w: %s", ErrExists, path.Join(dir, string(e.name)))
		}
		if _, ok := c.Dirs[string(e.name)]; ok {
			return plumbing.ZeroHash, fmt.Errorf("%w: %s is a file", ErrExists, path.Join(dir, string(e.name)))
		}
		out = append(out, e.raw...)
	}
	for _, ch := range changes {
		if out, err = b.add(out, dir, ch); err != nil {
			return plumbing.ZeroHash, err
		}
	}
	return b.put(plumbing.TreeObject, out)
}

// change is a file (data) or directory (sub) an append adds to a tree.
type change struct {
	name string
	data []byte
	sub  *Changes
}

// add writes a new entry for ch, not in the base tree, to out.
func (b *Builder) add(out []byte, dir string, ch change) ([]byte, error) {
	e := treeEntry{name: ch.name, mode: filemode.Regular}
	var err error
	if ch.sub != nil {
		e.mode = filemode.Dir
		e.hash, err = b.tree(plumbing.ZeroHash, path.Join(dir, ch.name), ch.sub)
	} else {
		e.hash, err = b.put(plumbing.BlobObject, ch.data)
	}
	if err != nil {
		return nil, err
	}
	return e.append(out), nil
}

// Commit builds the tree of parent (none when zero) plus c and a commit
// over it by who, signed by sign in the gpgsig header, and returns the
// commit's hash. A path of c that parent's tree holds fails with
// ErrExists; nothing the builder made is then to be used. The commit is
// never stamped before its parent: who.When is raised to the parent's
// committer time when it is earlier (another writer's clock ahead of
// ours, or ours stepped back), so that committer times never decrease
// along the first-parent history (the audit's commit-time-order).
func (b *Builder) Commit(parent plumbing.Hash, c *Changes, msg string, who object.Signature, sign SignFunc) (plumbing.Hash, error) {
	var baseTree plumbing.Hash
	var parents []plumbing.Hash
	if !parent.IsZero() {
		raw, err := b.src.Object(plumbing.CommitObject, parent, 0)
		if err != nil {
			return plumbing.ZeroHash, fmt.Errorf("gitobj: read parent %s: %w", parent, err)
		}
		pc, err := ParseCommitHeader(raw)
		if err != nil {
			return plumbing.ZeroHash, fmt.Errorf("gitobj: read parent %s: %w", parent, err)
		}
		baseTree, parents = pc.Tree, []plumbing.Hash{parent}
		if who.When.Before(pc.When) {
			who.When = pc.When.In(who.When.Location())
		}
	}
	root, err := b.tree(baseTree, "", c)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	commit := &object.Commit{Author: who, Committer: who, Message: msg, TreeHash: root, ParentHashes: parents}
	unsigned := &plumbing.MemoryObject{}
	if err := commit.EncodeWithoutSignature(unsigned); err != nil {
		return plumbing.ZeroHash, err
	}
	r, err := unsigned.Reader()
	if err != nil {
		return plumbing.ZeroHash, err
	}
	sig, err := sign(r)
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("gitobj: sign commit: %w", err)
	}
	commit.PGPSignature = string(sig)
	return b.putObject(commit)
}
