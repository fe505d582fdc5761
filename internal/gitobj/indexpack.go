package gitobj

import (
	"bufio"
	"bytes"
	"cmp"
	"crypto/sha1"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/go-git/go-git/v5/plumbing"
)

// PackIndexer receives a pack as a stream (what a fetch downloads) and,
// on Close, installs it in a pack directory with its version 2 index:
// what `git index-pack` does, in memory bounded independent of the
// number of objects. go-git's pack parser, which it replaces for a fetch,
// kept a record and often the content of every object until the end:
// about 1 GiB for the first fetch of a branch of 10^4 runs (issue 19).
//
// The pack is written to a temporary file, checked against its trailing
// checksum, mapped, and read once in order: each object is inflated (a
// delta is applied to its base, read from the pack through a bounded
// cache) and hashed, and its name, offset and CRC-32 go to a spill file,
// 32 bytes an object, not to memory. The index is then written from the
// spill file one range of names at a time (at most indexBatch objects in
// memory). A REF_DELTA whose base comes later in the pack (stock git
// sends OFS_DELTA when asked, which go-git's fetch does) waits for a
// second round; a base that is not in the pack at all (a thin pack) is
// an error, and nothing is installed.
//
// Its objects are checked as Dir checks them: a declared size within
// maxObjectSize before allocation, a zlib stream that ends where its
// object does, a bounded delta chain; the index it writes is byte for byte
// the one `git index-pack` writes for the same pack.
type PackIndexer struct {
	dir string // the pack directory
	tmp *os.File
	bw  *bufio.Writer
	err error
}

// indexBatch bounds the index entries sorted in memory at once (about
// 10 MiB).
var indexBatch = 1 << 18

// indexBaseBytes bounds the delta base cache while a pack is indexed:
// at 10^4 runs (1.3 million objects) 16 MiB cost about a fifth more time
// than 64 MiB, for about 140 MiB less peak RSS.
const indexBaseBytes = 16 << 20

// NewPackIndexer starts a pack for the pack directory dir (objects/pack),
// written first to a temporary file next to it: a reader of the pack
// directory never sees a partial file.
func NewPackIndexer(dir string) (*PackIndexer, error) {
	tmp, err := os.CreateTemp(filepath.Dir(dir), tempPrefixes[0])
	if err != nil {
		return nil, err
	}
	return &PackIndexer{dir: dir, tmp: tmp, bw: bufio.NewWriterSize(tmp, 1<<16)}, nil
}

// Write appends to the pack.
func (x *PackIndexer) Write(b []byte) (int, error) {
	if x.err != nil {
		return 0, x.err
	}
	n, err := x.bw.Write(b)
	x.err = err
	return n, err
}

// Close indexes the pack and moves it and its index into the pack
// directory, synced. On any error it removes what it wrote.
func (x *PackIndexer) Close() error {
	defer os.Remove(x.tmp.Name()) // a no-op once renamed
	err := x.err
	if err == nil {
		err = x.bw.Flush()
	}
	if err == nil {
		err = x.install()
	}
	if cerr := x.tmp.Close(); err == nil && cerr != nil && !errors.Is(cerr, os.ErrClosed) {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("gitobj: index pack: %w", err)
	}
	return nil
}

func (x *PackIndexer) install() error {
	data, unmap, err := mapFile(x.tmp.Name())
	if err != nil {
		return err
	}
	defer unmap()
	name, count, err := checkPackTrailer(data)
	if err != nil {
		return err
	}
	if count == 0 {
		return nil // nothing to keep
	}
	parent := filepath.Dir(x.dir)
	spill, err := os.CreateTemp(parent, tempPrefixes[1])
	if err != nil {
		return err
	}
	defer os.Remove(spill.Name())
	defer spill.Close()
	fanout, err := scanPack(data, count, spill)
	if err != nil {
		return err
	}
	idxTmp, err := os.CreateTemp(parent, tempPrefixes[1])
	if err != nil {
		return err
	}
	defer os.Remove(idxTmp.Name())
	defer idxTmp.Close()
	if err := writeIndex(idxTmp, spill, fanout, name); err != nil {
		return err
	}
	if err := syncFiles(x.tmp, idxTmp); err != nil {
		return err
	}
	base := filepath.Join(x.dir, "pack-"+name.String())
	if err := os.Rename(idxTmp.Name(), base+".idx"); err != nil {
		return err
	}
	if err := os.Rename(x.tmp.Name(), base+".pack"); err != nil {
		return err // the index left alone is ignored, and removed by RemoveTempPacks
	}
	return syncPath(x.dir)
}

// checkPackTrailer checks a pack's header and that its last 20 bytes are
// the SHA-1 of the rest, and returns that checksum (the pack's name) and
// the object count the header declares.
func checkPackTrailer(data []byte) (plumbing.Hash, int, error) {
	if len(data) < 32 || string(data[:4]) != "PACK" {
		return plumbing.ZeroHash, 0, errors.New("not a pack")
	}
	if v := binary.BigEndian.Uint32(data[4:]); v != 2 && v != 3 {
		return plumbing.ZeroHash, 0, fmt.Errorf("pack version %d", v)
	}
	body := data[:len(data)-20]
	h := sha1.New()
	// A megabyte at a time, each dropped once hashed: read once, in order.
	for i := 0; i < len(body); i += 1 << 20 {
		chunk := body[i:min(len(body), i+1<<20)]
		h.Write(chunk)
		dropResident(chunk)
	}
	var name plumbing.Hash
	h.Sum(name[:0])
	if !bytes.Equal(name[:], data[len(body):]) {
		return plumbing.ZeroHash, 0, fmt.Errorf("pack checksum mismatch: the pack hashes to %s, its trailer says %x", name, data[len(body):])
	}
	return name, int(binary.BigEndian.Uint32(data[8:])), nil
}

// errNotInPack ends the message of a REF_DELTA whose base the pack's
// index (or, while indexing, the objects hashed so far) does not hold.
var errNotInPack = errors.New("is not in the pack")

// spillEntry is an index entry as the spill file holds it: name, offset
// (big-endian uint64), CRC-32 (big-endian uint32).
const spillEntry = hashSize + 8 + 4

type indexEntry struct {
	h   plumbing.Hash
	off int64
	crc uint32
}

// scanPack reads the count objects of the pack data in order, hashes
// each and appends its index entry to spill. It returns the fanout
// counts: objects by the first byte of their name.
func scanPack(data []byte, count int, spill *os.File) (*[256]int, error) {
	p := &mappedPack{name: "(being indexed)", data: data}
	d := &Dir{bases: map[baseKey][]byte{}, maxBase: indexBaseBytes}
	// REF_DELTA bases found so far, by name: only the names REF_DELTAs
	// asked for are kept (stock git sends none when asked for OFS_DELTA).
	refs := map[plumbing.Hash]int64{}
	wanted := map[plumbing.Hash]bool{}
	p.refs = func(h plumbing.Hash) (int64, bool) {
		off, ok := refs[h]
		if !ok {
			wanted[h] = true
		}
		return off, ok
	}
	var fanout [256]int
	bw := bufio.NewWriterSize(spill, 1<<16)
	var rec [spillEntry]byte
	emit := func(e indexEntry) error {
		fanout[e.h[0]]++
		if wanted[e.h] {
			refs[e.h] = e.off
		}
		copy(rec[:], e.h[:])
		binary.BigEndian.PutUint64(rec[hashSize:], uint64(e.off))
		binary.BigEndian.PutUint32(rec[hashSize+8:], e.crc)
		_, err := bw.Write(rec[:])
		return err
	}
	var waiting []indexEntry // deltas whose base was not hashed yet (no name)
	end := int64(len(data)) - 20
	off := int64(12)
	var meter residentMeter
	meter.start()
	for i := 0; i < count; i++ {
		if off >= end {
			return nil, fmt.Errorf("pack ends after %d of its %d objects", i, count)
		}
		e, err := p.entryHeader(off)
		if err != nil {
			return nil, err
		}
		raw, next, err := inflateEntry(p, off, e)
		if err != nil {
			return nil, err
		}
		ie := indexEntry{off: off, crc: crc32.ChecksumIEEE(data[off:next])}
		t, content := e.t, raw
		switch e.t {
		case plumbing.OFSDeltaObject, plumbing.REFDeltaObject:
			var base []byte
			if e.t == plumbing.OFSDeltaObject {
				t, base, err = d.base(p, e.baseOff, 0)
			} else if bo, ok := p.offset(e.baseRef); ok {
				t, base, err = d.base(p, bo, 0)
			} else {
				err = errNotInPack
			}
			if err == nil {
				content, err = p.patch(off, base, raw, 0)
			}
		}
		switch {
		case errors.Is(err, errNotInPack):
			waiting = append(waiting, ie)
		case err != nil:
			return nil, err
		default:
			ie.h = HashObject(t, content)
			d.keepBase(p, off, t, content)
			if err := emit(ie); err != nil {
				return nil, err
			}
		}
		// Within the readers' bound (Dir.touch). Delta bases are read
		// back from anywhere before next: drop every page read so far,
		// not only the ones scanned since the last drop.
		if meter.over(next - off) {
			dropResident(data[:next])
			meter.start()
		}
		off = next
	}
	if off != end {
		return nil, fmt.Errorf("pack has %d bytes after its %d objects", end-off, count)
	}
	// Deltas whose REF_DELTA base was not named when they were read:
	// resolve them round by round, each round finding the bases hashed
	// before it (in the spill file) and in it.
	for len(waiting) > 0 {
		if err := bw.Flush(); err != nil {
			return nil, err
		}
		if err := findWanted(spill, wanted, refs); err != nil {
			return nil, err
		}
		before := len(waiting)
		left := waiting[:0]
		for _, e := range waiting {
			t, content, err := d.packed(p, e.off, 0, 0)
			switch {
			case errors.Is(err, errNotInPack):
				left = append(left, e)
				continue
			case err != nil:
				return nil, err
			}
			e.h = HashObject(t, content)
			if err := emit(e); err != nil {
				return nil, err
			}
		}
		waiting = left
		if len(waiting) == before {
			_, _, err := d.packed(p, waiting[0].off, 0, 0)
			return nil, fmt.Errorf("%w (a thin pack, or a delta cycle)", err)
		}
	}
	dropResident(data)
	return &fanout, bw.Flush()
}

// findWanted adds to refs the offsets of the names in wanted that the
// spill file holds.
func findWanted(spill *os.File, wanted map[plumbing.Hash]bool, refs map[plumbing.Hash]int64) error {
	return eachSpilled(spill, func(e indexEntry) {
		if wanted[e.h] {
			refs[e.h] = e.off
		}
	})
}

// inflateEntry inflates the zlib stream of the entry at off (header e)
// and returns it and where the entry ends. The stream must inflate to
// exactly the size the header declares, and end there.
func inflateEntry(p *mappedPack, off int64, e packEntry) ([]byte, int64, error) {
	if err := checkSize(e.size, maxObjectSize); err != nil {
		return nil, 0, p.bad(off, err.Error())
	}
	end := int64(len(p.data) - 20)
	f, err := getInflater(p.data[e.pos:end])
	if err != nil {
		return nil, 0, p.bad(off, err.Error())
	}
	defer putInflater(f)
	out := make([]byte, e.size)
	if _, err := io.ReadFull(f.zr, out); err != nil {
		return nil, 0, p.bad(off, "inflate: "+err.Error())
	}
	var more [1]byte
	if n, err := f.zr.Read(more[:]); n != 0 || err != io.EOF {
		if err == nil || err == io.EOF {
			return nil, 0, p.bad(off, fmt.Sprintf("inflates to more than the %d bytes its header says", e.size))
		}
		return nil, 0, p.bad(off, "inflate: "+err.Error())
	}
	return out, end - int64(f.br.Len()), nil
}

// writeIndex writes the version 2 index of the pack named name to w from
// the spill file's entries, one range of first bytes at a time. Sections
// are placed by position (names, then CRCs, then offsets, then the
// 64-bit offsets), each written in order; the index's own checksum is
// computed reading the file back.
func writeIndex(w *os.File, spill *os.File, fanout *[256]int, name plumbing.Hash) error {
	n := 0
	for _, c := range fanout {
		n += c
	}
	const hdr = 8 + 256*4
	head := make([]byte, 0, hdr)
	head = append(head, "\xfftOc\x00\x00\x00\x02"...)
	cum := 0
	for _, c := range fanout {
		cum += c
		head = binary.BigEndian.AppendUint32(head, uint32(cum))
	}
	if _, err := w.WriteAt(head, 0); err != nil {
		return err
	}
	names := &sectionWriter{f: w, at: hdr}
	crcs := &sectionWriter{f: w, at: hdr + 20*int64(n)}
	offs := &sectionWriter{f: w, at: hdr + 24*int64(n)}
	large := &sectionWriter{f: w, at: hdr + 28*int64(n)}
	nlarge := uint32(0)
	var prev plumbing.Hash
	first := true
	for lo := 0; lo < 256; {
		hi, batch := lo, 0
		for hi < 256 && (hi == lo || batch+fanout[hi] <= indexBatch) {
			batch += fanout[hi]
			hi++
		}
		entries, err := readSpill(spill, byte(lo), byte(hi-1), batch)
		if err != nil {
			return err
		}
		slices.SortFunc(entries, func(a, b indexEntry) int { return bytes.Compare(a.h[:], b.h[:]) })
		for _, e := range entries {
			if !first && e.h == prev {
				return fmt.Errorf("pack holds object %s twice", e.h)
			}
			first, prev = false, e.h
			names.write(e.h[:])
			crcs.write(binary.BigEndian.AppendUint32(nil, e.crc))
			if e.off < 1<<31 {
				offs.write(binary.BigEndian.AppendUint32(nil, uint32(e.off)))
			} else {
				offs.write(binary.BigEndian.AppendUint32(nil, 1<<31|nlarge))
				large.write(binary.BigEndian.AppendUint64(nil, uint64(e.off)))
				nlarge++
			}
		}
		lo = hi
	}
	large.write(name[:])
	for _, s := range []*sectionWriter{names, crcs, offs, large} {
		if err := s.flush(); err != nil {
			return err
		}
	}
	sum := sha1.New()
	if _, err := io.Copy(sum, io.NewSectionReader(w, 0, large.at)); err != nil {
		return err
	}
	_, err := w.WriteAt(sum.Sum(nil), large.at)
	return err
}

// readSpill reads the spill file's entries whose name starts with a byte
// in [lo, hi]; want is how many there are.
func readSpill(spill *os.File, lo, hi byte, want int) ([]indexEntry, error) {
	entries := make([]indexEntry, 0, want)
	err := eachSpilled(spill, func(e indexEntry) {
		if e.h[0] >= lo && e.h[0] <= hi {
			entries = append(entries, e)
		}
	})
	if err == nil && len(entries) != want {
		err = fmt.Errorf("index spill file holds %d objects for names %02x–%02x, counted %d", len(entries), lo, hi, want)
	}
	return entries, err
}

// eachSpilled calls f with every entry of the spill file, in order.
func eachSpilled(spill *os.File, f func(indexEntry)) error {
	br := bufio.NewReaderSize(io.NewSectionReader(spill, 0, 1<<62), 1<<16)
	var rec [spillEntry]byte
	for {
		if _, err := io.ReadFull(br, rec[:]); err == io.EOF {
			return nil
		} else if err != nil {
			return fmt.Errorf("index spill file: %w", err)
		}
		e := indexEntry{off: int64(binary.BigEndian.Uint64(rec[hashSize:])), crc: binary.BigEndian.Uint32(rec[hashSize+8:])}
		copy(e.h[:], rec[:hashSize])
		f(e)
	}
}

// sectionWriter writes a region of a file in order from at, buffered.
type sectionWriter struct {
	f   *os.File
	at  int64
	buf []byte
	err error
}

func (s *sectionWriter) write(b []byte) {
	s.buf = append(s.buf, b...)
	if len(s.buf) >= 1<<16 {
		s.err = cmp.Or(s.err, s.flush())
	}
}

func (s *sectionWriter) flush() error {
	if s.err != nil {
		return s.err
	}
	_, err := s.f.WriteAt(s.buf, s.at)
	s.at += int64(len(s.buf))
	s.buf = s.buf[:0]
	return err
}

// keepBase puts an object just read into d's delta base cache: in a pack
// a delta's base most often comes shortly before it.
func (d *Dir) keepBase(p *mappedPack, off int64, t plumbing.ObjectType, data []byte) {
	e := make([]byte, 1+len(data))
	e[0] = byte(t)
	copy(e[1:], data)
	d.putBase(baseKey{p, off}, e)
}
