package gitobj

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
)

// Dir reads the objects of a repository's objects directory
// directly: pack files mapped into memory and found through their .idx,
// loose objects read whole. It is what the audit reads a branch with:
// go-git's pack reader seeks and reads the file for every object header
// and body, which made the walk of a branch cost several times the
// signature checks. Dir is safe for concurrent use, and checks the hash
// of every object it returns (a pack or loose file whose content does not
// hash to its name is an error, never returned). Reading never writes;
// only AddPack and Consolidate, for a repository's one writer, do.
type Dir struct {
	dir string // the objects directory

	mu     sync.Mutex
	packs  []*mappedPack
	loaded map[string]bool
	// random: the packs and indexes are mapped for random access
	// (AdviseRandom).
	random bool

	// bases caches objects delta chains resolve through, by pack and
	// offset: deltified trees share long chains. maxBase bounds it (0:
	// MaxBaseBytes).
	baseMu    sync.Mutex
	bases     map[baseKey][]byte
	baseBytes int
	maxBase   int64

	// resident bounds what d's reads leave mapped (touch).
	resident residentMeter
}

type baseKey struct {
	pack *mappedPack
	off  int64
}

// MaxBaseBytes bounds the delta base cache of every Dir: 64 MiB unless a
// benchmark that measures what else a reader keeps sets it lower.
var MaxBaseBytes atomic.Int64

// MaxResidentBytes bounds, for every Dir, by how much its reads may grow
// the process's resident file pages (its mapped packs and indexes) before
// the pages it mapped are dropped from the resident set (they stay in the
// page cache): 64 MiB.
var MaxResidentBytes atomic.Int64

func init() {
	MaxBaseBytes.Store(64 << 20)
	MaxResidentBytes.Store(64 << 20)
}

// OpenDir opens gitDir's objects directory. It refuses a
// repository with alternates (objects stored elsewhere), which the
// caller reads through go-git instead.
func OpenDir(gitDir string) (*Dir, error) {
	dir := filepath.Join(gitDir, "objects")
	if _, err := os.Stat(filepath.Join(dir, "info", "alternates")); err == nil {
		return nil, errors.New("repository has alternates")
	}
	d := &Dir{dir: dir, loaded: map[string]bool{}, bases: map[baseKey][]byte{}}
	d.resident.start()
	if err := d.rescan(); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// LimitBaseCache bounds d's delta base cache to n bytes (instead of
// MaxBaseBytes), for a reader whose memory matters more than its speed
// over long delta chains.
func (d *Dir) LimitBaseCache(n int64) {
	d.baseMu.Lock()
	defer d.baseMu.Unlock()
	d.maxBase = n
}

// LimitResident bounds to n bytes (instead of MaxResidentBytes) by how
// much d's reads may grow the process's resident file pages between two
// drops.
func (d *Dir) LimitResident(n int64) { d.resident.limit.Store(n) }

// touch counts n more bytes of the mapped packs and indexes looked at,
// and drops d's mapped pages when the meter says so.
func (d *Dir) touch(n int64) {
	if d.resident.over(n) {
		d.DropResident()
		d.resident.start()
	}
}

// residentCheckEvery is how many bytes a residentMeter counts between two
// measures of the process's resident file pages.
const residentCheckEvery = 1 << 20

// residentMeter tells a reader of mapped files when to drop the pages it
// mapped: once the process's resident file pages have grown by limit (0:
// MaxResidentBytes) since start, measured every residentCheckEvery bytes
// read. It measures (residentFileBytes) rather than counts the pages
// read: the kernel decides how much one page fault maps (the cached pages
// around it, or a large folio of the page cache: up to megabytes of a
// file written in one go). Safe for concurrent use.
type residentMeter struct {
	limit atomic.Int64
	read  atomic.Int64
	// mu serializes measures; base is the resident file pages at start.
	mu   sync.Mutex
	base int64
}

// start takes the process's resident file pages now as the base: at
// open, and after each drop.
func (m *residentMeter) start() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.base, _ = residentFileBytes()
}

// over counts n more bytes read and reports whether the pages mapped
// should be dropped now (the caller then drops them and calls start).
func (m *residentMeter) over(n int64) bool {
	if m.read.Add(n) < residentCheckEvery {
		return false
	}
	m.read.Store(0)
	if !m.mu.TryLock() {
		return false // another reader is measuring
	}
	defer m.mu.Unlock()
	limit := m.limit.Load()
	if limit == 0 {
		limit = MaxResidentBytes.Load()
	}
	now, ok := residentFileBytes()
	return ok && now-m.base >= limit
}

// AdviseRandom tells the kernel that d's packs and their indexes, those
// mapped now and those mapped later, are read at random (Linux's
// MADV_RANDOM; elsewhere it does nothing): a page fault then reads one
// page from disk, not a read-around window. For a reader that looks up
// objects here and there in packs larger than its memory limit (a
// reconciler's store); a reader of the whole history in pack order keeps
// the read-ahead.
func (d *Dir) AdviseRandom() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.random = true
	for _, p := range d.packs {
		adviseRandom(p.data)
		adviseRandom(p.idxData)
	}
}

// Concurrent implements Source: a Dir is safe for concurrent use.
func (d *Dir) Concurrent() bool { return true }

// rescan maps pack files not mapped yet (a fetch or flush adds packs).
func (d *Dir) rescan() error {
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
		if d.random {
			adviseRandom(p.data)
			adviseRandom(p.idxData)
		}
		// Newest packs first: they hold what was written last.
		d.packs = append([]*mappedPack{p}, d.packs...)
	}
	return nil
}

// packList returns the packs mapped now.
func (d *Dir) packList() []*mappedPack {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.packs)
}

// forget unmaps the packs named (their files are about to be removed).
// The caller makes sure nothing reads them meanwhile: a read of an
// unmapped pack is a fault, not an error (see Consolidate).
func (d *Dir) forget(names []string) {
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

// DropResident drops the pages of the mapped packs and their indexes read
// so far from the process's resident set (Linux; elsewhere it does
// nothing). Reading an object afterwards maps its pages again: a reader
// of the whole history (the audit, a reconciler's recovery) calls it now
// and then, so that its resident set does not grow with the packs' size.
// The indexes count: lookups of every object of a 10^5-run branch (13
// million objects) touch nearly all of its 364 MB index.
func (d *Dir) DropResident() {
	// Under d.mu, as forget unmaps: advice on an address range unmapped
	// and mapped again for something else (the Go heap) would discard it.
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, p := range d.packs {
		dropResident(p.data)
		dropResident(p.idxData)
	}
}

// Close unmaps every pack; d must not be read afterwards.
func (d *Dir) Close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, p := range d.packs {
		p.unmap()
	}
	d.packs = nil
}

// Object implements Source. It checks that the content hashes to h: a
// corrupt object is an error, never returned.
func (d *Dir) Object(t plumbing.ObjectType, h plumbing.Hash, limit int64) ([]byte, error) {
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
	if got := HashObject(gt, data); got != h {
		return nil, fmt.Errorf("object %s is corrupt: its content hashes to %s", h, got)
	}
	return data, nil
}

func (d *Dir) find(h plumbing.Hash, limit int64) (plumbing.ObjectType, []byte, error) {
	if p, off, ok := d.locate(h); ok {
		return d.packed(p, off, limit, 0)
	}
	return d.loose(h, limit)
}

// locate finds h in the packs mapped now.
func (d *Dir) locate(h plumbing.Hash) (*mappedPack, int64, bool) {
	d.mu.Lock()
	packs := d.packs
	d.mu.Unlock()
	for _, p := range packs {
		if off, ok := p.offset(h); ok {
			// A page of names, one of offsets. (A miss in another
			// pack's index reads pages of a small, recent index: they
			// stay mapped between lookups and are not counted.)
			d.touch(2 * pageSize)
			return p, off, true
		}
	}
	return nil, 0, false
}

// pageSize is the size of the pages touch counts.
const pageSize = 4096

// loosePath is where h would be stored as a loose object.
func (d *Dir) loosePath(h plumbing.Hash) string {
	hex := h.String()
	return filepath.Join(d.dir, hex[:2], hex[2:])
}

// Has reports whether the directory holds h, without reading it (a pack
// that arrived since the last scan is mapped first).
func (d *Dir) Has(h plumbing.Hash) bool {
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
func (d *Dir) loose(h plumbing.Hash, limit int64) (plumbing.ObjectType, []byte, error) {
	raw, err := os.ReadFile(d.loosePath(h))
	if errors.Is(err, fs.ErrNotExist) {
		return plumbing.InvalidObject, nil, fmt.Errorf("%w: %s", plumbing.ErrObjectNotFound, h)
	}
	if err != nil {
		return plumbing.InvalidObject, nil, err
	}
	t, data, err := parseLoose(raw, limit)
	if err != nil {
		return plumbing.InvalidObject, nil, fmt.Errorf("loose object %s: %w", h, err)
	}
	return t, data, nil
}

// parseLoose reads the type and content of a loose object file: one zlib
// stream of "<type> <size>\0<content>". A size over limit (or over
// maxObjectSize) is refused before it is allocated.
func parseLoose(raw []byte, limit int64) (plumbing.ObjectType, []byte, error) {
	f, err := getInflater(raw)
	if err != nil {
		return plumbing.InvalidObject, nil, err
	}
	defer putInflater(f)
	zr := f.zr
	var hdr [32]byte
	n, _ := io.ReadFull(zr, hdr[:])
	sp := bytes.IndexByte(hdr[:n], ' ')
	nul := bytes.IndexByte(hdr[:n], 0)
	if sp < 0 || nul < sp {
		return plumbing.InvalidObject, nil, errors.New("malformed header")
	}
	t, err := plumbing.ParseObjectType(string(hdr[:sp]))
	if err != nil {
		return plumbing.InvalidObject, nil, err
	}
	if t != plumbing.BlobObject && t != plumbing.TreeObject && t != plumbing.CommitObject && t != plumbing.TagObject {
		return plumbing.InvalidObject, nil, fmt.Errorf("loose object of type %s", t)
	}
	// The size is canonical decimal, as git reads it: digits only, no sign,
	// no leading zero ("04" names no size git would write).
	digits := hdr[sp+1 : nul]
	if len(digits) == 0 || (digits[0] == '0' && len(digits) > 1) || bytes.IndexFunc(digits, func(r rune) bool { return r < '0' || r > '9' }) >= 0 {
		return plumbing.InvalidObject, nil, errors.New("malformed size")
	}
	size, err := strconv.ParseInt(string(digits), 10, 64)
	if err != nil || size < 0 {
		return plumbing.InvalidObject, nil, errors.New("malformed size")
	}
	if err := checkSize(size, limit); err != nil {
		return plumbing.InvalidObject, nil, err
	}
	data := make([]byte, size)
	got := copy(data, hdr[nul+1:n])
	if _, err := io.ReadFull(zr, data[got:]); err != nil {
		return plumbing.InvalidObject, nil, err
	}
	return t, data, nil
}

// maxDeltaDepth bounds a delta chain (git's default is 50).
const maxDeltaDepth = 1000

// packEntry is the header of a pack entry: its type and inflated size,
// where its zlib stream starts, and for a delta where its base is (an
// offset for OFS_DELTA, a name for REF_DELTA).
type packEntry struct {
	t       plumbing.ObjectType
	size    int64
	pos     int64
	baseOff int64
	baseRef plumbing.Hash
}

// bad is an error about the entry at off.
func (p *mappedPack) bad(off int64, what string) error {
	return fmt.Errorf("pack %s: object at offset %d: %s", p.name, off, what)
}

// entryHeader parses the header of the entry at off.
func (p *mappedPack) entryHeader(off int64) (packEntry, error) {
	data := p.data
	end := int64(len(data)) - 20
	if off < 12 || off >= end {
		return packEntry{}, p.bad(off, "offset outside the pack")
	}
	pos := off
	c := data[pos]
	pos++
	e := packEntry{t: plumbing.ObjectType((c >> 4) & 7), size: int64(c & 0x0f)}
	for shift := 4; c&0x80 != 0; shift += 7 {
		if pos >= end || shift > 60 {
			return packEntry{}, p.bad(off, "malformed header")
		}
		c = data[pos]
		pos++
		e.size |= int64(c&0x7f) << shift
	}
	switch e.t {
	case plumbing.CommitObject, plumbing.TreeObject, plumbing.BlobObject, plumbing.TagObject:
	case plumbing.OFSDeltaObject:
		if pos >= end {
			return packEntry{}, p.bad(off, "malformed delta offset")
		}
		c = data[pos]
		pos++
		rel := int64(c & 0x7f)
		for c&0x80 != 0 {
			if pos >= end || rel > 1<<48 {
				return packEntry{}, p.bad(off, "malformed delta offset")
			}
			c = data[pos]
			pos++
			rel = ((rel + 1) << 7) | int64(c&0x7f)
		}
		if rel <= 0 || rel > off {
			return packEntry{}, p.bad(off, "delta base outside the pack")
		}
		e.baseOff = off - rel
	case plumbing.REFDeltaObject:
		if pos+20 > end {
			return packEntry{}, p.bad(off, "malformed delta base")
		}
		copy(e.baseRef[:], data[pos:pos+20])
		pos += 20
	default:
		return packEntry{}, p.bad(off, fmt.Sprintf("unknown type %d", e.t))
	}
	e.pos = pos
	return e, nil
}

// packed reads the object at off in p, resolving deltas.
func (d *Dir) packed(p *mappedPack, off int64, limit int64, depth int) (plumbing.ObjectType, []byte, error) {
	if depth > maxDeltaDepth {
		return plumbing.InvalidObject, nil, fmt.Errorf("pack %s: delta chain longer than %d", p.name, maxDeltaDepth)
	}
	e, err := p.entryHeader(off)
	if err != nil {
		return plumbing.InvalidObject, nil, err
	}
	// Its header and zlib stream, counted at the inflated size (a
	// stream is rarely longer), and a page it may straddle.
	d.touch(e.pos - off + e.size + pageSize)
	end := int64(len(p.data)) - 20
	if e.t != plumbing.OFSDeltaObject && e.t != plumbing.REFDeltaObject {
		if err := checkSize(e.size, limit); err != nil {
			return plumbing.InvalidObject, nil, p.bad(off, err.Error())
		}
		b, err := inflate(p.data[e.pos:end], e.size)
		if err != nil {
			return plumbing.InvalidObject, nil, p.bad(off, err.Error())
		}
		return e.t, b, nil
	}
	var base []byte
	var bt plumbing.ObjectType
	if e.t == plumbing.OFSDeltaObject {
		bt, base, err = d.base(p, e.baseOff, depth)
	} else {
		bo, found := p.offset(e.baseRef)
		if !found {
			return plumbing.InvalidObject, nil, fmt.Errorf("pack %s: object at offset %d: delta base %s %w", p.name, off, e.baseRef, errNotInPack)
		}
		bt, base, err = d.base(p, bo, depth)
	}
	if err != nil {
		return plumbing.InvalidObject, nil, err
	}
	if err := checkSize(e.size, maxObjectSize); err != nil {
		return plumbing.InvalidObject, nil, p.bad(off, err.Error())
	}
	delta, err := inflate(p.data[e.pos:end], e.size)
	if err != nil {
		return plumbing.InvalidObject, nil, p.bad(off, err.Error())
	}
	out, err := p.patch(off, base, delta, limit)
	return bt, out, err
}

// patch applies the delta of the entry at off to base; the result must
// be within limit (0: maxObjectSize).
func (p *mappedPack) patch(off int64, base, delta []byte, limit int64) ([]byte, error) {
	if target, ok := deltaTargetSize(delta); !ok || checkSize(target, limit) != nil {
		return nil, p.bad(off, "delta target too large or malformed")
	}
	out, err := packfile.PatchDelta(base, delta)
	if err != nil {
		return nil, p.bad(off, err.Error())
	}
	return out, nil
}

// base returns a delta base, cached.
func (d *Dir) base(p *mappedPack, off int64, depth int) (plumbing.ObjectType, []byte, error) {
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
	d.putBase(k, e)
	return t, data, nil
}

// putBase caches e (type byte, then content) as the object at k, within
// the cache's bound: a full cache is emptied first.
func (d *Dir) putBase(k baseKey, e []byte) {
	d.baseMu.Lock()
	defer d.baseMu.Unlock()
	limit := d.maxBase
	if limit == 0 {
		limit = MaxBaseBytes.Load()
	}
	if int64(d.baseBytes+len(e)) > limit {
		clear(d.bases)
		d.baseBytes = 0
	}
	d.bases[k] = e
	d.baseBytes += len(e)
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
