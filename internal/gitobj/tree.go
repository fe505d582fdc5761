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
	// The changes in tree order, merged with the base tree's entries in
	// one pass.
	changes := make([]change, 0, len(c.files)+len(c.dirs))
	for name, data := range c.files {
		changes = append(changes, change{name: name, data: data})
	}
	for name, sub := range c.dirs {
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
			return plumbing.ZeroHash, fmt.Errorf("evidence: read tree %s (%s): %w", dir, base, rerr)
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
		if _, ok := c.files[string(e.name)]; ok {
			return plumbing.ZeroHash, fmt.Errorf("%w: %s", ErrExists, path.Join(dir, string(e.name)))
		}
		if _, ok := c.dirs[string(e.name)]; ok {
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
	sub  *changeTree
}

// add writes a new entry for ch, not in the base tree, to out.
func (b *builder) add(out []byte, dir string, ch change) ([]byte, error) {
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
			mode, ok := parseMode(t[:sp])
			if !ok {
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

// parseMode parses a tree entry's octal mode (at most 32 bits).
func parseMode(b []byte) (uint32, bool) {
	if len(b) == 0 || len(b) > 11 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '7' {
			return 0, false
		}
		v = v<<3 | uint64(c-'0')
	}
	return uint32(v), v <= 1<<32-1
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
