package evidence

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"iter"
	"path"
	"slices"
	"strconv"
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
	st     objectSource
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
//
// The base tree is spliced in its encoded form, never decoded into
// entries and encoded again: an append to a shard of a few hundred runs
// costs a scan and a copy of that tree's bytes.
func (b *builder) tree(base plumbing.Hash, dir string, c *changeTree) (plumbing.Hash, error) {
	var raw []byte
	if !base.IsZero() {
		var err error
		if raw, err = b.st.object(plumbing.TreeObject, base, 0); err != nil {
			return plumbing.ZeroHash, fmt.Errorf("evidence: read tree %s: %w", dir, err)
		}
	}
	// Existing entries named by the change: a file there is a lost race,
	// a directory there is rewritten below.
	existing := map[string]rawEntry{}
	for e, err := range rawEntries(raw) {
		if err != nil {
			return plumbing.ZeroHash, fmt.Errorf("evidence: read tree %s (%s): %w", dir, base, err)
		}
		if _, ok := c.files[string(e.name)]; ok {
			existing[string(e.name)] = e
		} else if _, ok := c.dirs[string(e.name)]; ok {
			existing[string(e.name)] = e
		}
	}
	var added []treeEntry
	replaced := map[string]plumbing.Hash{}
	for name, data := range c.files {
		if _, ok := existing[name]; ok {
			return plumbing.ZeroHash, fmt.Errorf("%w: %s", ErrExists, path.Join(dir, name))
		}
		h, err := b.put(plumbing.BlobObject, data)
		if err != nil {
			return plumbing.ZeroHash, err
		}
		added = append(added, treeEntry{name: name, mode: filemode.Regular, hash: h})
	}
	for name, sub := range c.dirs {
		var subBase plumbing.Hash
		e, ok := existing[name]
		if ok {
			if e.mode != filemode.Dir {
				return plumbing.ZeroHash, fmt.Errorf("%w: %s is a file", ErrExists, path.Join(dir, name))
			}
			subBase = e.hash
		}
		h, err := b.tree(subBase, path.Join(dir, name), sub)
		if err != nil {
			return plumbing.ZeroHash, err
		}
		if ok {
			replaced[name] = h
		} else {
			added = append(added, treeEntry{name: name, mode: filemode.Dir, hash: h})
		}
	}
	slices.SortFunc(added, func(x, y treeEntry) int {
		return compareTreeNames([]byte(x.name), x.mode == filemode.Dir, []byte(y.name), y.mode == filemode.Dir)
	})
	out := make([]byte, 0, len(raw)+len(added)*(len("100644 ")+1+hashSize+64))
	for e := range rawEntries(raw) {
		for len(added) > 0 && compareTreeNames([]byte(added[0].name), added[0].mode == filemode.Dir, e.name, e.mode == filemode.Dir) < 0 {
			out = added[0].append(out)
			added = added[1:]
		}
		if h, ok := replaced[string(e.name)]; ok {
			out = append(out, e.raw[:len(e.raw)-hashSize]...)
			out = append(out, h[:]...)
			continue
		}
		out = append(out, e.raw...)
	}
	for _, a := range added {
		out = a.append(out)
	}
	return b.put(plumbing.TreeObject, out)
}

// treeEntry is an entry to write into a tree.
type treeEntry struct {
	name string
	mode filemode.FileMode
	hash plumbing.Hash
}

// append appends e in Git's tree encoding: "<octal mode> <name>\0<hash>".
func (e treeEntry) append(b []byte) []byte {
	b = strconv.AppendUint(b, uint64(e.mode), 8)
	b = append(b, ' ')
	b = append(b, e.name...)
	b = append(b, 0)
	return append(b, e.hash[:]...)
}

// rawEntry is one entry of an encoded tree; name and raw alias the tree.
type rawEntry struct {
	name []byte
	mode filemode.FileMode
	hash plumbing.Hash
	raw  []byte // the whole encoded entry
}

var errBadTree = errors.New("malformed tree object")

// rawEntries iterates the entries of an encoded tree without copying
// them; it yields an error, once, for a malformed tree.
func rawEntries(t []byte) iter.Seq2[rawEntry, error] {
	return func(yield func(rawEntry, error) bool) {
		for len(t) > 0 {
			sp := bytes.IndexByte(t, ' ')
			if sp <= 0 {
				yield(rawEntry{}, errBadTree)
				return
			}
			mode, err := strconv.ParseUint(string(t[:sp]), 8, 32)
			if err != nil {
				yield(rawEntry{}, errBadTree)
				return
			}
			nul := bytes.IndexByte(t[sp+1:], 0)
			if nul <= 0 || len(t) < sp+1+nul+1+hashSize {
				yield(rawEntry{}, errBadTree)
				return
			}
			end := sp + 1 + nul + 1 + hashSize
			e := rawEntry{name: t[sp+1 : sp+1+nul], mode: filemode.FileMode(mode), raw: t[:end]}
			copy(e.hash[:], t[end-hashSize:end])
			if !yield(e, nil) {
				return
			}
			t = t[end:]
		}
	}
}

// compareTreeNames orders tree entries as Git does: by name bytes, a
// directory's name compared as if it ended with "/".
func compareTreeNames(a []byte, aDir bool, b []byte, bDir bool) int {
	n := min(len(a), len(b))
	if c := bytes.Compare(a[:n], b[:n]); c != 0 {
		return c
	}
	var ca, cb byte
	if len(a) > n {
		ca = a[n]
	} else if aDir {
		ca = '/'
	}
	if len(b) > n {
		cb = b[n]
	} else if bDir {
		cb = '/'
	}
	return int(ca) - int(cb)
}

// commit builds the tree of parent plus c and a commit over it, signed by
// signer with an SSH signature (sshsig namespace "git", SHA-512) in the
// gpgsig header, as `git verify-commit` with gpg.format=ssh expects.
func (b *builder) commit(parent plumbing.Hash, c *changeTree, msg string, who object.Signature, signer ssh.Signer) (plumbing.Hash, error) {
	var baseTree plumbing.Hash
	var parents []plumbing.Hash
	if !parent.IsZero() {
		raw, err := b.st.object(plumbing.CommitObject, parent, 0)
		if err != nil {
			return plumbing.ZeroHash, fmt.Errorf("evidence: read tip %s: %w", parent, err)
		}
		pc, err := parseCommitHeader(raw)
		if err != nil {
			return plumbing.ZeroHash, fmt.Errorf("evidence: read tip %s: %w", parent, err)
		}
		baseTree, parents = pc.tree, []plumbing.Hash{parent}
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

// hashSize is the size of a SHA-1 object name in a tree entry.
const hashSize = len(plumbing.ZeroHash)
