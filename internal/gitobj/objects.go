package evidence

import (
	"bytes"
	"compress/zlib"
	"crypto"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	gitHash "github.com/go-git/go-git/v5/plumbing/hash"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
)

// objectSource reads whole objects. Implementations return an error
// wrapping plumbing.ErrObjectNotFound for a missing object or one of
// another type.
type objectSource interface {
	// object returns the content of object h of type t, refusing one
	// larger than limit bytes (no limit when limit <= 0).
	object(t plumbing.ObjectType, h plumbing.Hash, limit int64) ([]byte, error)
	// concurrent reports whether object may be called from several
	// goroutines at once.
	concurrent() bool
}

// storerSource reads through a go-git object storer (not safe for
// concurrent use): the fallback for repositories objectDir cannot read
// (alternates, a linked worktree) and the store's layered objects.
type storerSource struct{ st storer.EncodedObjectStorer }

func (s storerSource) concurrent() bool { return false }

func (s storerSource) object(t plumbing.ObjectType, h plumbing.Hash, limit int64) ([]byte, error) {
	o, err := s.st.EncodedObject(t, h)
	if err != nil {
		return nil, err
	}
	return readEncoded(o, limit)
}

// readEncoded returns the content of o, refusing one larger than limit
// (no limit when limit <= 0).
func readEncoded(o plumbing.EncodedObject, limit int64) ([]byte, error) {
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

// objectDir reads the objects of a repository's objects directory
// directly: pack files mapped into memory and found through their .idx,
// loose objects read whole. It is what the audit reads a branch with:
// go-git's pack reader seeks and reads the file for every object header
// and body, which made the walk of a branch cost several times the
// signature checks. objectDir is safe for concurrent use, never writes,
// and checks the hash of every object it returns (a pack or loose file
// whose content does not hash to its name is an error, never evidence).
type objectDir struct {
	dir string // the objects directory

	mu     sync.Mutex
	packs  []*mappedPack
	loaded map[string]bool

	// bases caches objects delta chains resolve through, by pack and
	// offset: deltified trees share long chains.
	baseMu    sync.Mutex
	bases     map[baseKey][]byte
	baseBytes int
}

type baseKey struct {
	pack *mappedPack
	off  int64
}

// maxBaseBytes bounds the delta base cache.
const maxBaseBytes = 64 << 20

// maxObjectSize bounds any object objectDir inflates: evidence files are
// small, and a declared size is not allocated before it is checked.
const maxObjectSize = 1 << 30

type mappedPack struct {
	name string
	data []byte // the pack
	idx  packIndex
	// unmap releases both mappings.
	unmap func() error
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

// openObjectDir opens gitDir's objects directory. It refuses a
// repository with alternates (objects stored elsewhere), which the
// caller reads through go-git instead.
func openObjectDir(gitDir string) (*objectDir, error) {
	dir := filepath.Join(gitDir, "objects")
	if _, err := os.Stat(filepath.Join(dir, "info", "alternates")); err == nil {
		return nil, errors.New("repository has alternates")
	}
	d := &objectDir{dir: dir, loaded: map[string]bool{}, bases: map[baseKey][]byte{}}
	if err := d.rescan(); err != nil {
		d.close()
		return nil, err
	}
	return d, nil
}

func (d *objectDir) concurrent() bool { return true }

// rescan maps pack files not mapped yet (a fetch or flush adds packs).
func (d *objectDir) rescan() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	idxs, err := filepath.Glob(filepath.Join(d.dir, "pack", "pack-*.idx"))
	if err != nil {
		return err
	}
	for _, idxPath := range idxs {
		name := strings.TrimSuffix(filepath.Base(idxPath), ".idx")
		if d.loaded[name] {
			continue
		}
		p, err := mapPack(idxPath, strings.TrimSuffix(idxPath, ".idx")+".pack")
		if errors.Is(err, fs.ErrNotExist) {
			continue // an .idx written before its pack is renamed in
		}
		if err != nil {
			return fmt.Errorf("pack %s: %w", name, err)
		}
		p.name = name
		d.loaded[name] = true
		// Newest packs first: they hold what was written last.
		d.packs = append([]*mappedPack{p}, d.packs...)
	}
	return nil
}

func mapPack(idxPath, packPath string) (*mappedPack, error) {
	ib, unmapIdx, err := mapFile(idxPath)
	if err != nil {
		return nil, err
	}
	idx, err := parsePackIndex(ib)
	if err != nil {
		unmapIdx()
		return nil, fmt.Errorf("index: %w", err)
	}
	data, unmapPack, err := mapFile(packPath)
	if err != nil {
		unmapIdx()
		return nil, err
	}
	unmap := func() error { return errors.Join(unmapPack(), unmapIdx()) }
	if len(data) < 32 || string(data[:4]) != "PACK" || !bytes.Equal(data[len(data)-20:], idx.pack) ||
		int(binary.BigEndian.Uint32(data[8:])) != idx.n {
		unmap()
		return nil, errors.New("not a pack file matching its index")
	}
	return &mappedPack{data: data, idx: idx, unmap: unmap}, nil
}

// offset finds h in the pack's mapped index (a binary search within the
// fanout bucket of its first byte). go-git's idxfile.MemoryIndex is not
// used: it decodes the whole index into memory, and its FindOffset records
// every lookup in a map under a mutex, which the audit's workers would
// contend on.
func (p *mappedPack) offset(h plumbing.Hash) (int64, bool) {
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

// packList returns the packs mapped now.
func (d *objectDir) packList() []*mappedPack {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.packs)
}

// forget unmaps the packs named (their files are about to be removed).
// The caller makes sure nothing reads them meanwhile: a read of an
// unmapped pack is a fault, not an error (the Store holds s.mu around
// every read and around the swap that calls forget).
func (d *objectDir) forget(names []string) {
	d.mu.Lock()
	d.packs = slices.DeleteFunc(d.packs, func(p *mappedPack) bool {
		if !slices.Contains(names, p.name) {
			return false
		}
		p.unmap()
		delete(d.loaded, p.name)
		return true
	})
	d.mu.Unlock()
	d.baseMu.Lock()
	clear(d.bases)
	d.baseBytes = 0
	d.baseMu.Unlock()
}

func (d *objectDir) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, p := range d.packs {
		p.unmap()
	}
	d.packs = nil
}

// object implements objectSource.
func (d *objectDir) object(t plumbing.ObjectType, h plumbing.Hash, limit int64) ([]byte, error) {
	gt, data, err := d.find(h, limit)
	if errors.Is(err, plumbing.ErrObjectNotFound) {
		// A pack may have arrived since the last scan.
		if err := d.rescan(); err != nil {
			return nil, err
		}
		gt, data, err = d.find(h, limit)
	}
	if err != nil {
		return nil, err
	}
	if t != plumbing.AnyObject && gt != t {
		return nil, fmt.Errorf("%w: %s is a %s, not a %s", plumbing.ErrObjectNotFound, h, gt, t)
	}
	if got := objectHash(gt, data); got != h {
		return nil, fmt.Errorf("object %s is corrupt: its content hashes to %s", h, got)
	}
	return data, nil
}

func (d *objectDir) find(h plumbing.Hash, limit int64) (plumbing.ObjectType, []byte, error) {
	if p, off, ok := d.locate(h); ok {
		return d.packed(p, off, limit, 0)
	}
	return d.loose(h, limit)
}

// locate finds h in the packs mapped now.
func (d *objectDir) locate(h plumbing.Hash) (*mappedPack, int64, bool) {
	d.mu.Lock()
	packs := d.packs
	d.mu.Unlock()
	for _, p := range packs {
		if off, ok := p.offset(h); ok {
			return p, off, true
		}
	}
	return nil, 0, false
}

// loosePath is where h would be stored as a loose object.
func (d *objectDir) loosePath(h plumbing.Hash) string {
	hex := h.String()
	return filepath.Join(d.dir, hex[:2], hex[2:])
}

// has reports whether the directory holds h, without reading it (a pack
// that arrived since the last scan is mapped first).
func (d *objectDir) has(h plumbing.Hash) bool {
	for range 2 {
		if _, _, ok := d.locate(h); ok {
			return true
		}
		if _, err := os.Stat(d.loosePath(h)); err == nil {
			return true
		}
		if d.rescan() != nil {
			return false
		}
	}
	return false
}

// loose reads a loose object file.
func (d *objectDir) loose(h plumbing.Hash, limit int64) (plumbing.ObjectType, []byte, error) {
	raw, err := os.ReadFile(d.loosePath(h))
	if errors.Is(err, fs.ErrNotExist) {
		return plumbing.InvalidObject, nil, fmt.Errorf("%w: %s", plumbing.ErrObjectNotFound, h)
	}
	if err != nil {
		return plumbing.InvalidObject, nil, err
	}
	f, err := getInflater(raw)
	if err != nil {
		return plumbing.InvalidObject, nil, fmt.Errorf("loose object %s: %w", h, err)
	}
	defer putInflater(f)
	zr := f.zr
	var hdr [32]byte
	n, _ := io.ReadFull(zr, hdr[:])
	sp := bytes.IndexByte(hdr[:n], ' ')
	nul := bytes.IndexByte(hdr[:n], 0)
	if sp < 0 || nul < sp {
		return plumbing.InvalidObject, nil, fmt.Errorf("loose object %s: malformed header", h)
	}
	t, err := plumbing.ParseObjectType(string(hdr[:sp]))
	if err != nil {
		return plumbing.InvalidObject, nil, fmt.Errorf("loose object %s: %w", h, err)
	}
	size, err := strconv.ParseInt(string(hdr[sp+1:nul]), 10, 64)
	if err != nil || size < 0 {
		return plumbing.InvalidObject, nil, fmt.Errorf("loose object %s: malformed size", h)
	}
	if err := checkSize(size, limit); err != nil {
		return plumbing.InvalidObject, nil, fmt.Errorf("object %s: %w", h, err)
	}
	data := make([]byte, size)
	got := copy(data, hdr[nul+1:n])
	if _, err := io.ReadFull(zr, data[got:]); err != nil {
		return plumbing.InvalidObject, nil, fmt.Errorf("loose object %s: %w", h, err)
	}
	return t, data, nil
}

func checkSize(size, limit int64) error {
	if size > maxObjectSize || (limit > 0 && size > limit) {
		return fmt.Errorf("%d bytes is more than an evidence object may hold", size)
	}
	return nil
}

// maxDeltaDepth bounds a delta chain (git's default is 50).
const maxDeltaDepth = 1000

// packed reads the object at off in p, resolving deltas.
func (d *objectDir) packed(p *mappedPack, off int64, limit int64, depth int) (plumbing.ObjectType, []byte, error) {
	if depth > maxDeltaDepth {
		return plumbing.InvalidObject, nil, fmt.Errorf("pack %s: delta chain longer than %d", p.name, maxDeltaDepth)
	}
	bad := func(what string) error { return fmt.Errorf("pack %s: object at offset %d: %s", p.name, off, what) }
	data := p.data
	end := int64(len(data)) - 20
	if off < 12 || off >= end {
		return plumbing.InvalidObject, nil, bad("offset outside the pack")
	}
	pos := off
	c := data[pos]
	pos++
	t := plumbing.ObjectType((c >> 4) & 7)
	size := int64(c & 0x0f)
	for shift := 4; c&0x80 != 0; shift += 7 {
		if pos >= end || shift > 60 {
			return plumbing.InvalidObject, nil, bad("malformed header")
		}
		c = data[pos]
		pos++
		size |= int64(c&0x7f) << shift
	}
	switch t {
	case plumbing.CommitObject, plumbing.TreeObject, plumbing.BlobObject, plumbing.TagObject:
		if err := checkSize(size, limit); err != nil {
			return plumbing.InvalidObject, nil, bad(err.Error())
		}
		b, err := inflate(data[pos:end], size)
		if err != nil {
			return plumbing.InvalidObject, nil, bad(err.Error())
		}
		return t, b, nil
	case plumbing.OFSDeltaObject, plumbing.REFDeltaObject:
	default:
		return plumbing.InvalidObject, nil, bad(fmt.Sprintf("unknown type %d", t))
	}
	var base []byte
	var bt plumbing.ObjectType
	var err error
	if t == plumbing.OFSDeltaObject {
		if pos >= end {
			return plumbing.InvalidObject, nil, bad("malformed delta offset")
		}
		c = data[pos]
		pos++
		rel := int64(c & 0x7f)
		for c&0x80 != 0 {
			if pos >= end || rel > 1<<48 {
				return plumbing.InvalidObject, nil, bad("malformed delta offset")
			}
			c = data[pos]
			pos++
			rel = ((rel + 1) << 7) | int64(c&0x7f)
		}
		if rel <= 0 || rel > off {
			return plumbing.InvalidObject, nil, bad("delta base outside the pack")
		}
		bt, base, err = d.base(p, off-rel, depth)
	} else {
		if pos+20 > end {
			return plumbing.InvalidObject, nil, bad("malformed delta base")
		}
		var bh plumbing.Hash
		copy(bh[:], data[pos:pos+20])
		pos += 20
		bo, found := p.offset(bh)
		if !found {
			return plumbing.InvalidObject, nil, bad("delta base " + bh.String() + " is not in the pack")
		}
		bt, base, err = d.base(p, bo, depth)
	}
	if err != nil {
		return plumbing.InvalidObject, nil, err
	}
	if err := checkSize(size, maxObjectSize); err != nil {
		return plumbing.InvalidObject, nil, bad(err.Error())
	}
	delta, err := inflate(data[pos:end], size)
	if err != nil {
		return plumbing.InvalidObject, nil, bad(err.Error())
	}
	if target, ok := deltaTargetSize(delta); !ok || checkSize(target, limit) != nil {
		return plumbing.InvalidObject, nil, bad("delta target too large or malformed")
	}
	out, err := packfile.PatchDelta(base, delta)
	if err != nil {
		return plumbing.InvalidObject, nil, bad(err.Error())
	}
	return bt, out, nil
}

// base returns a delta base, cached.
func (d *objectDir) base(p *mappedPack, off int64, depth int) (plumbing.ObjectType, []byte, error) {
	k := baseKey{p, off}
	d.baseMu.Lock()
	b, ok := d.bases[k]
	d.baseMu.Unlock()
	if ok {
		return plumbing.ObjectType(b[0]), b[1:], nil
	}
	t, data, err := d.packed(p, off, 0, depth+1)
	if err != nil {
		return t, nil, err
	}
	e := make([]byte, 1+len(data))
	e[0] = byte(t)
	copy(e[1:], data)
	d.baseMu.Lock()
	if d.baseBytes+len(e) > maxBaseBytes {
		clear(d.bases)
		d.baseBytes = 0
	}
	d.bases[k] = e
	d.baseBytes += len(e)
	d.baseMu.Unlock()
	return t, data, nil
}

// deltaTargetSize reads the target size of a delta (after its source
// size).
func deltaTargetSize(delta []byte) (int64, bool) {
	i := 0
	for n := 0; n < 2; n++ {
		var v int64
		for shift := 0; ; shift += 7 {
			if i >= len(delta) || shift > 56 {
				return 0, false
			}
			c := delta[i]
			i++
			v |= int64(c&0x7f) << shift
			if c&0x80 == 0 {
				break
			}
		}
		if n == 1 {
			return v, true
		}
	}
	return 0, false
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

// objectHash is the object name of data as an object of type t: SHA-1
// with collision detection, as go-git computes it.
func objectHash(t plumbing.ObjectType, data []byte) plumbing.Hash {
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

// parseTree decodes a tree object's entries (name, mode, hash) with the
// store's tree reader, without go-git's reader machinery.
func parseTree(data []byte) ([]object.TreeEntry, error) {
	entries := make([]object.TreeEntry, 0, bytes.Count(data, []byte{0}))
	for e, err := range rawEntries(data) {
		if err != nil {
			return nil, err
		}
		entries = append(entries, object.TreeEntry{Name: string(e.name), Mode: e.mode, Hash: e.hash})
	}
	return entries, nil
}
