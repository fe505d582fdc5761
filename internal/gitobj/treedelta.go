package gitobj

import (
	"bytes"
	"cmp"
	"hash/maphash"
	"io"
	"slices"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
)

// Every append rewrites the trees on the paths to its new files, and the
// largest of them grow with the branch: a receipt chain's shard directory
// holds up to 10^4 links and a day's runs directory its day's runs, each
// rewritten whole by the next run. Stored whole (as a flush writes them,
// at zlib level 0 so that an append does not deflate a growing tree), the
// versions of those directories were most of the mirror: about 200–300 KB
// a run, some 20–30 GB at 10^5 runs. Consolidation therefore writes each
// version of such a tree as a delta against the next larger version of
// the same directory, as `git repack` does, so a version costs about the
// entry it lacks.
//
// A pack does not record the path of a tree, so versions of one
// directory are recognised by their first entry (mode, name and object):
// a shard's first link and a day's first run never change once written.
// Within one first entry trees go largest first, newest first among equal
// sizes, so the version an append reads next (the newest) stays whole and
// older ones are deltas against newer ones.

// maxWriteDeltaDepth bounds the delta chains consolidation writes: git's
// default pack.depth.
const maxWriteDeltaDepth = 50

// packObject is an entry of a pack being merged.
type packObject struct {
	p        *mappedPack
	off, end int64
	crc      uint32
	h        plumbing.Hash
}

// treeObject is a tree of a merge, with what orders it among the others.
type treeObject struct {
	packObject
	pos  int    // its place among the merge's objects (later is newer)
	key  uint64 // of its first entry: versions of one directory share it
	size int
}

// treeKeySeed seeds the first-entry keys; a key only groups trees within
// one merge.
var treeKeySeed = maphash.MakeSeed()

// treeKey is the key of an encoded tree (or of its beginning): its first
// entry (mode, name, NUL and the 20-byte object name), or all of it when
// it holds none.
func treeKey(tree []byte) uint64 {
	if i := bytes.IndexByte(tree, 0); i >= 0 && i+21 <= len(tree) {
		tree = tree[:i+21]
	}
	return maphash.Bytes(treeKeySeed, tree)
}

// treeKeyPrefix bounds what storedTreeKey inflates: more than a first
// entry of any name signet writes.
const treeKeyPrefix = 1024

// storedTreeKey returns the key and size of the whole tree stored at off
// in p, inflating only its beginning: the tree itself is read once, when
// writeTrees writes it.
func storedTreeKey(p *mappedPack, off int64) (uint64, int, error) {
	e, err := p.entryHeader(off)
	if err != nil {
		return 0, 0, err
	}
	f, err := getInflater(p.data[e.pos : int64(len(p.data))-20])
	if err != nil {
		return 0, 0, p.bad(off, err.Error())
	}
	defer putInflater(f)
	head := make([]byte, min(e.size, treeKeyPrefix))
	if _, err := io.ReadFull(f.zr, head); err != nil {
		return 0, 0, p.bad(off, "inflate: "+err.Error())
	}
	return treeKey(head), int(e.size), nil
}

// writeTrees writes trees (their keys and sizes filled in) to pw,
// ordered by first entry, then largest and
// newest first, each as an OFS_DELTA against the tree written just before
// it when both share a first entry, the chain is shorter than
// maxWriteDeltaDepth and the delta is under half the tree; otherwise
// whole (zlib level 0, as a flush writes trees). A delta is applied back
// and compared before it is written; one that does not give the tree back
// is not written (the tree goes whole).
func (d *Dir) writeTrees(pw *packWriter, trees []treeObject, add func(plumbing.Hash, uint64, uint32)) error {
	slices.SortFunc(trees, func(a, b treeObject) int {
		if c := cmp.Compare(a.key, b.key); c != 0 {
			return c
		}
		if c := cmp.Compare(b.size, a.size); c != 0 {
			return c
		}
		return cmp.Compare(b.pos, a.pos)
	})
	var (
		prev      []byte
		prevOff   int64
		prevKey   uint64
		prevDepth int
	)
	for i, t := range trees {
		_, data, err := d.packed(t.p, t.off, 0, 0)
		if err != nil {
			return err
		}
		var (
			off   int64
			crc   uint32
			depth int
			delta []byte
		)
		if i > 0 && t.key == prevKey && prevDepth < maxWriteDeltaDepth && len(prev) > 0 && len(data) > 0 {
			delta = treeDelta(prev, data)
			if len(delta) >= len(data)/2 {
				delta = nil
			} else if back, err := packfile.PatchDelta(prev, delta); err != nil || !bytes.Equal(back, data) {
				delta = nil // never written: the tree goes whole
			}
		}
		if delta != nil {
			off, crc, err = pw.ofsDelta(prevOff, delta)
			depth = prevDepth + 1
		} else {
			off, crc, err = pw.add(plumbing.TreeObject, int64(len(data)), bytes.NewReader(data))
		}
		if err != nil {
			return err
		}
		add(t.h, uint64(off), crc)
		prev, prevOff, prevKey, prevDepth = data, off, t.key, depth
	}
	return nil
}

// treeDelta returns a git delta that makes tgt from src. Two versions of
// one directory differ by the entries a few appends added or changed, so
// the delta is first tried as what they share at both ends (one copy of
// the common prefix, the differing middle inserted, one copy of the
// common suffix): a comparison at memory speed, where a general delta
// (packfile.DiffDelta) indexes all of src first, about 2 ms for a shard
// of 10^4 links. When the ends cover less than half of tgt, the general
// delta is used.
func treeDelta(src, tgt []byte) []byte {
	p := commonPrefix(src, tgt)
	s := commonSuffix(src[p:], tgt[p:])
	if 2*(p+s) < len(tgt) {
		return packfile.DiffDelta(src, tgt)
	}
	d := appendDeltaSize(nil, len(src))
	d = appendDeltaSize(d, len(tgt))
	d = appendDeltaCopy(d, 0, p)
	for mid := tgt[p : len(tgt)-s]; len(mid) > 0; {
		n := min(len(mid), 0x7f)
		d = append(d, byte(n))
		d = append(d, mid[:n]...)
		mid = mid[n:]
	}
	return appendDeltaCopy(d, len(src)-s, s)
}

// commonPrefix is the length of the longest common prefix of a and b,
// compared a block at a time.
func commonPrefix(a, b []byte) int {
	n := min(len(a), len(b))
	i := 0
	for ; i+4096 <= n && bytes.Equal(a[i:i+4096], b[i:i+4096]); i += 4096 {
	}
	for i < n && a[i] == b[i] {
		i++
	}
	return i
}

// commonSuffix is the length of the longest common suffix of a and b.
func commonSuffix(a, b []byte) int {
	n := min(len(a), len(b))
	i := 0
	for ; i+4096 <= n && bytes.Equal(a[len(a)-i-4096:len(a)-i], b[len(b)-i-4096:len(b)-i]); i += 4096 {
	}
	for i < n && a[len(a)-1-i] == b[len(b)-1-i] {
		i++
	}
	return i
}

// appendDeltaSize appends a delta header's size: 7 bits a byte, low bits
// first.
func appendDeltaSize(d []byte, n int) []byte {
	for n >= 0x80 {
		d = append(d, byte(n)|0x80)
		n >>= 7
	}
	return append(d, byte(n))
}

// appendDeltaCopy appends copy instructions for n bytes of the source at
// off, at most 64 KiB each (as git writes them): the instruction byte
// flags which of the offset's four and the size's two bytes follow.
func appendDeltaCopy(d []byte, off, n int) []byte {
	for n > 0 {
		size := min(n, 0x10000)
		op, args := byte(0x80), [6]byte{}
		k := 0
		for i := range 4 {
			if b := byte(off >> (8 * i)); b != 0 {
				op |= 1 << i
				args[k] = b
				k++
			}
		}
		if size != 0x10000 { // a size of zero bytes means 64 KiB
			for i := range 2 {
				if b := byte(size >> (8 * i)); b != 0 {
					op |= 0x10 << i
					args[k] = b
					k++
				}
			}
		}
		d = append(d, op)
		d = append(d, args[:k]...)
		off += size
		n -= size
	}
	return d
}
