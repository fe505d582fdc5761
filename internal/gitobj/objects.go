package gitobj

import (
	"bytes"
	"compress/zlib"
	"crypto"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	gitHash "github.com/go-git/go-git/v5/plumbing/hash"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
)

// hashSize is the size of a SHA-1 object name in a tree entry.
const hashSize = len(plumbing.ZeroHash)

// Source reads whole objects. Implementations return an error wrapping
// plumbing.ErrObjectNotFound for a missing object or one of another type.
type Source interface {
	// Object returns the content of object h of type t (any type for
	// plumbing.AnyObject), refusing one larger than limit bytes (no limit
	// when limit <= 0).
	Object(t plumbing.ObjectType, h plumbing.Hash, limit int64) ([]byte, error)
	// Concurrent reports whether Object may be called from several
	// goroutines at once.
	Concurrent() bool
}

var (
	_ Source = StorerSource{}
	_ Source = (*Dir)(nil)
)

// StorerSource reads through a go-git object storer (not safe for
// concurrent use): the fallback for repositories Dir cannot read
// (alternates, a linked worktree) and for objects kept in memory.
type StorerSource struct{ Storer storer.EncodedObjectStorer }

// Concurrent implements Source: a go-git storer is not safe for
// concurrent use.
func (s StorerSource) Concurrent() bool { return false }

// Object implements Source.
func (s StorerSource) Object(t plumbing.ObjectType, h plumbing.Hash, limit int64) ([]byte, error) {
	o, err := s.Storer.EncodedObject(t, h)
	if err != nil {
		return nil, err
	}
	return ReadEncoded(o, limit)
}

// ReadEncoded returns the content of o, refusing one larger than limit
// (no limit when limit <= 0).
func ReadEncoded(o plumbing.EncodedObject, limit int64) ([]byte, error) {
	if limit > 0 && o.Size() > limit {
		return nil, fmt.Errorf("%d bytes is more than %d", o.Size(), limit)
	}
	r, err := o.Reader()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	b := make([]byte, o.Size())
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	return b, nil
}

// maxObjectSize bounds any object Dir inflates: evidence files are small,
// and a declared size is not allocated before it is checked. (A variable
// so that fuzzing need not allocate it.)
var maxObjectSize int64 = 1 << 30

func checkSize(size, limit int64) error {
	if size < 0 {
		// A pack header's size varint can reach bit 63.
		return fmt.Errorf("size %d is negative", size)
	}
	if size > maxObjectSize || (limit > 0 && size > limit) {
		return fmt.Errorf("%d bytes is more than an evidence object may hold", size)
	}
	return nil
}

// Decompressors and hashers are reused through free lists rather than a
// sync.Pool: a pool is emptied at every GC, and a fresh zlib reader
// allocates its 32 KiB window (the audit reads thousands of small objects
// between two collections).
var (
	inflaters = make(chan *inflater, 64)
	hashers   = make(chan hash.Hash, 64)
)

type inflater struct {
	br bytes.Reader
	zr io.ReadCloser
}

// getInflater returns a zlib reader of src from the free list.
func getInflater(src []byte) (*inflater, error) {
	select {
	case f := <-inflaters:
		f.br.Reset(src)
		if err := f.zr.(zlib.Resetter).Reset(&f.br, nil); err != nil {
			putInflater(f)
			return nil, err
		}
		return f, nil
	default:
		f := &inflater{}
		f.br.Reset(src)
		zr, err := zlib.NewReader(&f.br)
		if err != nil {
			return nil, err
		}
		f.zr = zr
		return f, nil
	}
}

func putInflater(f *inflater) {
	select {
	case inflaters <- f:
	default:
	}
}

// inflate decompresses one zlib stream of exactly size bytes from src.
func inflate(src []byte, size int64) ([]byte, error) {
	f, err := getInflater(src)
	if err != nil {
		return nil, err
	}
	defer putInflater(f)
	out := make([]byte, size)
	if _, err := io.ReadFull(f.zr, out); err != nil {
		return nil, fmt.Errorf("inflate: %w", err)
	}
	return out, nil
}

// HashObject is the object name of data as an object of type t: SHA-1
// with collision detection, as go-git and `git hash-object` compute it.
func HashObject(t plumbing.ObjectType, data []byte) plumbing.Hash {
	var h hash.Hash
	select {
	case h = <-hashers:
		h.Reset()
	default:
		h = gitHash.New(crypto.SHA1)
	}
	var hdr [32]byte
	b := append(hdr[:0], t.Bytes()...)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(len(data)), 10)
	b = append(b, 0)
	h.Write(b)
	h.Write(data)
	var sum plumbing.Hash
	h.Sum(sum[:0])
	select {
	case hashers <- h:
	default:
	}
	return sum
}

// ParseTree decodes a tree object's entries (name, mode, hash), in the
// order the tree holds them, without go-git's reader machinery. A
// malformed tree is an error, never a shorter list.
func ParseTree(data []byte) ([]object.TreeEntry, error) {
	entries := make([]object.TreeEntry, 0, bytes.Count(data, []byte{0}))
	for e, err := range rawEntries(data) {
		if err != nil {
			return nil, err
		}
		entries = append(entries, object.TreeEntry{Name: string(e.name), Mode: e.mode, Hash: e.hash})
	}
	return entries, nil
}

// CommitHeader is what a walk of history needs of a commit.
type CommitHeader struct {
	Tree    plumbing.Hash
	Parents []plumbing.Hash
	When    time.Time // committer time
}

// ParseCommitHeader reads the tree, parents and committer time of a raw
// commit (its header lines, up to the first empty line): a walk reads
// every commit of a branch, and go-git's decoder also copies the message
// and signature through a buffered reader. A commit without exactly one
// tree and one committer line, or with a malformed one, is an error.
func ParseCommitHeader(raw []byte) (CommitHeader, error) {
	var c CommitHeader
	var haveTree, haveCommitter bool
	for len(raw) > 0 {
		line := raw
		if i := bytes.IndexByte(raw, '\n'); i >= 0 {
			line, raw = raw[:i], raw[i+1:]
		} else {
			raw = nil
		}
		if len(line) == 0 {
			break
		}
		key, val, _ := bytes.Cut(line, []byte{' '})
		switch string(key) {
		case "tree", "parent":
			var h plumbing.Hash
			if len(val) != 2*hashSize {
				return c, fmt.Errorf("malformed %s line", key)
			}
			if _, err := hex.Decode(h[:], val); err != nil {
				return c, fmt.Errorf("malformed %s line", key)
			}
			if string(key) == "tree" {
				if haveTree {
					return c, errors.New("two tree lines")
				}
				c.Tree, haveTree = h, true
			} else {
				c.Parents = append(c.Parents, h)
			}
		case "committer":
			// committer NAME <EMAIL> UNIX-SECONDS ZONE
			gt := bytes.LastIndexByte(val, '>')
			if gt < 0 {
				return c, errors.New("malformed committer line")
			}
			f := strings.Fields(string(val[gt+1:]))
			if len(f) != 2 {
				return c, errors.New("malformed committer line")
			}
			sec, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				return c, errors.New("malformed committer time")
			}
			if haveCommitter {
				return c, errors.New("two committer lines")
			}
			c.When, haveCommitter = time.Unix(sec, 0), true
		}
	}
	if !haveTree || !haveCommitter {
		return c, errors.New("no tree or committer line")
	}
	return c, nil
}
