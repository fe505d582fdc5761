package gitobj

import (
	"bytes"
	"errors"
	"iter"
	"strconv"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
)

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
