package gitobj

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/go-git/go-git/v5/plumbing"
)

// mappedPack is a pack file and its index, both mapped read-only.
type mappedPack struct {
	name string
	data []byte // the pack
	idx  packIndex
	// idxData is the whole mapped index (idx slices it).
	idxData []byte
	// unmap releases both mappings.
	unmap func() error
	// refs, while the pack is being indexed (PackIndexer), finds the
	// objects hashed so far in place of idx.
	refs func(plumbing.Hash) (int64, bool)
}

// packIndex is a version 2 pack index read in place (mapped, never
// decoded into memory: a branch of 10^5 runs has millions of objects).
type packIndex struct {
	fanout []byte // 256 big-endian uint32: objects whose first byte is <= i
	names  []byte // n sorted 20-byte names
	crcs   []byte // n CRC-32s of the packed entries
	offs   []byte // n 31-bit offsets, or indexes into large with the top bit set
	large  []byte // 64-bit offsets
	pack   []byte // the checksum of the pack it indexes
	n      int
}

// parsePackIndex checks the layout of a version 2 index (sizes, a
// non-decreasing fanout) and slices its tables. A wrong name or offset in
// a well-formed index finds nothing or an object whose hash does not
// match, both errors.
func parsePackIndex(b []byte) (packIndex, error) {
	const hdr = 8 + 256*4
	if len(b) < hdr+40 || string(b[:8]) != "\xfftOc\x00\x00\x00\x02" {
		return packIndex{}, errors.New("not a version 2 pack index")
	}
	fanout := b[8:hdr]
	prev := uint32(0)
	for i := 0; i < 256; i++ {
		v := binary.BigEndian.Uint32(fanout[i*4:])
		if v < prev {
			return packIndex{}, errors.New("pack index fanout decreases")
		}
		prev = v
	}
	n := int(prev)
	rest := len(b) - hdr - 40
	if n > rest/28 {
		return packIndex{}, fmt.Errorf("pack index of %d objects is truncated", n)
	}
	large := rest - 28*n
	if large%8 != 0 {
		return packIndex{}, errors.New("pack index has a partial 64-bit offset")
	}
	at := hdr
	next := func(size int) []byte { s := b[at : at+size : at+size]; at += size; return s }
	return packIndex{
		fanout: fanout, n: n,
		names: next(20 * n), crcs: next(4 * n), offs: next(4 * n), large: next(large),
		pack: next(20),
	}, nil
}

// entry returns the i-th object of the index (in name order): its name,
// offset in the pack and CRC-32.
func (x *packIndex) entry(i int) (plumbing.Hash, int64, uint32, bool) {
	var h plumbing.Hash
	copy(h[:], x.names[i*hashSize:(i+1)*hashSize])
	off, ok := x.offset(i)
	return h, off, binary.BigEndian.Uint32(x.crcs[i*4:]), ok
}

func (x *packIndex) offset(i int) (int64, bool) {
	ofs := binary.BigEndian.Uint32(x.offs[i*4:])
	if ofs&(1<<31) == 0 {
		return int64(ofs), true
	}
	at := 8 * int(ofs&^(1<<31))
	if at+8 > len(x.large) {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(x.large[at:])), true
}

// mapPack maps a pack and its index. The pack is opened first: writers
// (gitobj's and go-git's) put the index in place before the pack, so an
// index whose pack is missing (fs.ErrNotExist) may still be being written.
func mapPack(idxPath, packPath string) (*mappedPack, error) {
	data, unmapPack, err := mapFile(packPath)
	if err != nil {
		return nil, err
	}
	ib, unmapIdx, err := mapFile(idxPath)
	if err != nil {
		unmapPack()
		return nil, err
	}
	unmap := func() error { return errors.Join(unmapPack(), unmapIdx()) }
	idx, err := parsePackIndex(ib)
	if err != nil {
		unmap()
		return nil, fmt.Errorf("index: %w", err)
	}
	if len(data) < 32 || string(data[:4]) != "PACK" || !bytes.Equal(data[len(data)-20:], idx.pack) ||
		int(binary.BigEndian.Uint32(data[8:])) != idx.n {
		unmap()
		return nil, errors.New("not a pack file matching its index")
	}
	return &mappedPack{data: data, idx: idx, idxData: ib, unmap: unmap}, nil
}

// offset finds h in the pack's mapped index (a binary search within the
// fanout bucket of its first byte). go-git's idxfile.MemoryIndex is not
// used: it decodes the whole index into memory, and its FindOffset records
// every lookup in a map under a mutex, which the audit's workers would
// contend on.
func (p *mappedPack) offset(h plumbing.Hash) (int64, bool) {
	if p.refs != nil {
		return p.refs(h)
	}
	x := &p.idx
	lo := 0
	if h[0] > 0 {
		lo = int(binary.BigEndian.Uint32(x.fanout[(int(h[0])-1)*4:]))
	}
	hi := int(binary.BigEndian.Uint32(x.fanout[int(h[0])*4:]))
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		switch c := bytes.Compare(x.names[mid*hashSize:(mid+1)*hashSize], h[:]); {
		case c < 0:
			lo = mid + 1
		case c > 0:
			hi = mid
		default:
			return x.offset(mid)
		}
	}
	return 0, false
}

// count is how many objects p holds.
func (p *mappedPack) count() int { return p.idx.n }
