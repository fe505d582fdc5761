package evidence

import (
	"fmt"
	"io"
	"path"
	"sort"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/storage/memory"
	"github.com/hiddeco/sshsig"
	"golang.org/x/crypto/ssh"
)

// maxPathLen bounds a path given to the store.
const maxPathLen = 1024

// splitPath checks that p is a clean relative slash-separated path whose
// elements Git and every checkout can hold, and splits it.
func splitPath(p string) ([]string, error) {
	if p == "" || len(p) > maxPathLen {
		return nil, fmt.Errorf("%w: %q: empty or longer than %d bytes", ErrInvalidPath, p, maxPathLen)
	}
	if path.Clean(p) != p || strings.HasPrefix(p, "/") {
		return nil, fmt.Errorf("%w: %q: not a clean relative path", ErrInvalidPath, p)
	}
	parts := strings.Split(p, "/")
	for _, e := range parts {
		if e == "." || e == ".." || strings.EqualFold(e, ".git") {
			return nil, fmt.Errorf("%w: %q: element %q is not allowed", ErrInvalidPath, p, e)
		}
		for _, c := range []byte(e) {
			if c < 0x20 || c == 0x7f || c == '\\' {
				return nil, fmt.Errorf("%w: %q: control character or backslash in %q", ErrInvalidPath, p, e)
			}
		}
	}
	return parts, nil
}

// changeTree is the set of files one Append adds, as a tree of
// directories: only these directories' trees are rewritten.
type changeTree struct {
	dirs  map[string]*changeTree
	files map[string][]byte
}

func newChangeTree(files []File) (*changeTree, error) {
	root := &changeTree{}
	for _, f := range files {
		parts, err := splitPath(f.Path)
		if err != nil {
			return nil, err
		}
		n := root
		for i, name := range parts[:len(parts)-1] {
			if _, ok := n.files[name]; ok {
				return nil, fmt.Errorf("%w: %q: %s is also a file in this append", ErrInvalidPath, f.Path, path.Join(parts[:i+1]...))
			}
			if n.dirs == nil {
				n.dirs = map[string]*changeTree{}
			}
			c := n.dirs[name]
			if c == nil {
				c = &changeTree{}
				n.dirs[name] = c
			}
			n = c
		}
		leaf := parts[len(parts)-1]
		if _, ok := n.files[leaf]; ok {
			return nil, fmt.Errorf("%w: %q appears twice in this append", ErrInvalidPath, f.Path)
		}
		if _, ok := n.dirs[leaf]; ok {
			return nil, fmt.Errorf("%w: %q is also a directory in this append", ErrInvalidPath, f.Path)
		}
		if n.files == nil {
			n.files = map[string][]byte{}
		}
		n.files[leaf] = f.Data
	}
	return root, nil
}

// builder makes one commit: it reads the base trees from st and keeps
// every object it creates in objs, in memory, so that exactly these are
// pushed and nothing is written locally before the remote accepts them.
type builder struct {
	st     storer.EncodedObjectStorer
	objs   *memory.Storage
	hashes []plumbing.Hash
}

func (b *builder) put(t plumbing.ObjectType, data []byte) (plumbing.Hash, error) {
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
	b.hashes = append(b.hashes, h)
	return h, nil
}

func (b *builder) putObject(o interface {
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
func (b *builder) tree(base plumbing.Hash, dir string, c *changeTree) (plumbing.Hash, error) {
	var entries []object.TreeEntry
	if !base.IsZero() {
		t, err := object.GetTree(b.st, base)
		if err != nil {
			return plumbing.ZeroHash, fmt.Errorf("evidence: read tree %s: %w", dir, err)
		}
		entries = make([]object.TreeEntry, len(t.Entries), len(t.Entries)+len(c.files)+len(c.dirs))
		copy(entries, t.Entries)
	}
	index := make(map[string]int, len(c.dirs)+len(c.files))
	for name := range c.dirs {
		index[name] = -1
	}
	for name := range c.files {
		index[name] = -1
	}
	for i, e := range entries {
		if _, ok := index[e.Name]; ok {
			index[e.Name] = i
		}
	}
	for name, data := range c.files {
		if index[name] >= 0 {
			return plumbing.ZeroHash, fmt.Errorf("%w: %s", ErrExists, path.Join(dir, name))
		}
		h, err := b.put(plumbing.BlobObject, data)
		if err != nil {
			return plumbing.ZeroHash, err
		}
		entries = append(entries, object.TreeEntry{Name: name, Mode: filemode.Regular, Hash: h})
	}
	for name, sub := range c.dirs {
		i := index[name]
		var subBase plumbing.Hash
		if i >= 0 {
			if entries[i].Mode != filemode.Dir {
				return plumbing.ZeroHash, fmt.Errorf("%w: %s is a file", ErrExists, path.Join(dir, name))
			}
			subBase = entries[i].Hash
		}
		h, err := b.tree(subBase, path.Join(dir, name), sub)
		if err != nil {
			return plumbing.ZeroHash, err
		}
		if i >= 0 {
			entries[i].Hash = h
		} else {
			entries = append(entries, object.TreeEntry{Name: name, Mode: filemode.Dir, Hash: h})
		}
	}
	sort.Sort(object.TreeEntrySorter(entries))
	return b.putObject(&object.Tree{Entries: entries})
}

// commit builds the tree of parent plus c and a commit over it, signed by
// signer with an SSH signature (sshsig namespace "git", SHA-512) in the
// gpgsig header, as `git verify-commit` with gpg.format=ssh expects.
func (b *builder) commit(parent plumbing.Hash, c *changeTree, msg string, who object.Signature, signer ssh.Signer) (plumbing.Hash, error) {
	var baseTree plumbing.Hash
	var parents []plumbing.Hash
	if !parent.IsZero() {
		pc, err := object.GetCommit(b.st, parent)
		if err != nil {
			return plumbing.ZeroHash, fmt.Errorf("evidence: read tip %s: %w", parent, err)
		}
		baseTree, parents = pc.TreeHash, []plumbing.Hash{parent}
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
	sig, err := sshsig.Sign(r, signer, sshsig.HashSHA512, "git")
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("evidence: sign commit: %w", err)
	}
	commit.PGPSignature = string(sshsig.Armor(sig))
	return b.putObject(commit)
}

func persistTo(dst storer.EncodedObjectStorer, src *memory.Storage, hashes []plumbing.Hash) error {
	for _, h := range hashes {
		o, err := src.EncodedObject(plumbing.AnyObject, h)
		if err != nil {
			return err
		}
		if _, err := dst.SetEncodedObject(o); err != nil {
			return fmt.Errorf("evidence: write object %s to the mirror: %w", h, err)
		}
	}
	return nil
}
