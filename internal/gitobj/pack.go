package gitobj

import (
	"bufio"
	"bytes"
	"compress/zlib"
	"crypto/sha1"
	"encoding/binary"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"sync"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/storer"
)

// writePack writes the objects hashes of st to w as a version 2 packfile
// of whole objects (no deltas), with one compressor per level reused for
// every object. It is what a push sends and what a flush adds to the
// mirror: a few dozen new objects, where go-git's encoder (default
// compression, a fresh compressor state per object) costs more than
// building the commit.
//
// Blobs and commits are deflated at zlib's best speed. Trees are stored
// (zlib level 0): they are mostly 20-byte hashes, which do not compress,
// and a shard's tree grows with the runs of its day, so deflating it was
// the one part of an append whose cost grew with the branch.
func writePack(w io.Writer, st storer.EncodedObjectStorer, hashes []plumbing.Hash) error {
	pw := newPackWriter(w, len(hashes))
	if err := pw.addObjects(st, hashes, func(plumbing.Hash, uint64, uint32) {}); err != nil {
		return err
	}
	_, err := pw.finish()
	return err
}

// addObjects adds the objects hashes of st and reports each one's offset
// and CRC-32 to added.
func (p *packWriter) addObjects(st storer.EncodedObjectStorer, hashes []plumbing.Hash, added func(h plumbing.Hash, off uint64, crc uint32)) error {
	for _, h := range hashes {
		o, err := st.EncodedObject(plumbing.AnyObject, h)
		if err != nil {
			return fmt.Errorf("object %s: %w", h, err)
		}
		r, err := o.Reader()
		if err != nil {
			return fmt.Errorf("object %s: %w", h, err)
		}
		off, crc, err := p.add(o.Type(), o.Size(), r)
		r.Close()
		if err != nil {
			return fmt.Errorf("object %s: %w", h, err)
		}
		added(h, uint64(off), crc)
	}
	return nil
}

// packWriter writes a version 2 packfile of whole objects (see writePack),
// keeping each entry's offset and CRC-32 for an index.
type packWriter struct {
	w             io.Writer
	sum           hash.Hash
	bw            *bufio.Writer
	off           int64       // bytes written so far
	crc           hash.Hash32 // of the entry being written
	zfast, zstore *zlib.Writer
	buf           []byte
	err           error
}

// newPackWriter starts a packfile of count objects on w.
func newPackWriter(w io.Writer, count int) *packWriter {
	p := &packWriter{w: w, sum: sha1.New(), crc: crc32.NewIEEE()}
	p.bw = bufio.NewWriterSize(io.MultiWriter(w, p.sum), 64<<10)
	var hdr [12]byte
	copy(hdr[:], "PACK")
	binary.BigEndian.PutUint32(hdr[4:], 2)
	binary.BigEndian.PutUint32(hdr[8:], uint32(count))
	p.Write(hdr[:])
	p.zfast = fastWriters.Get().(*zlib.Writer)
	p.zstore = storeWriters.Get().(*zlib.Writer)
	return p
}

// Each zlib writer allocates its compressor (about 1 MiB at best speed)
// on first use and keeps it across Reset: they are pooled so that an
// append's pack does not allocate two.
var (
	fastWriters = sync.Pool{New: func() any {
		w, _ := zlib.NewWriterLevel(io.Discard, zlib.BestSpeed)
		return w
	}}
	storeWriters = sync.Pool{New: func() any {
		w, _ := zlib.NewWriterLevel(io.Discard, zlib.NoCompression)
		return w
	}}
)

// release returns the pooled writers; p writes nothing after it.
func (p *packWriter) release() {
	if p.zfast != nil {
		p.zfast.Reset(io.Discard)
		p.zstore.Reset(io.Discard)
		fastWriters.Put(p.zfast)
		storeWriters.Put(p.zstore)
		p.zfast, p.zstore = nil, nil
	}
}

// Write writes to the pack, counting the bytes and summing the entry.
func (p *packWriter) Write(b []byte) (int, error) {
	n, err := p.bw.Write(b)
	p.off += int64(n)
	p.crc.Write(b[:n])
	return n, err
}

// add writes one whole object of type t and size bytes read from r, and
// returns the entry's offset and CRC-32.
func (p *packWriter) add(t plumbing.ObjectType, size int64, r io.Reader) (int64, uint32, error) {
	off := p.off
	if p.err == nil {
		p.crc.Reset()
		p.err = p.write(t, size, 0, r)
	}
	return off, p.crc.Sum32(), p.err
}

// ofsDelta writes delta as an OFS_DELTA entry whose base is the entry this
// writer wrote at baseOff, and returns the entry's offset and CRC-32.
func (p *packWriter) ofsDelta(baseOff int64, delta []byte) (int64, uint32, error) {
	off := p.off
	if p.err == nil {
		if baseOff < 12 || baseOff >= off {
			p.err = fmt.Errorf("delta base at offset %d is not before the entry at %d", baseOff, off)
		} else {
			p.crc.Reset()
			p.err = p.write(plumbing.OFSDeltaObject, int64(len(delta)), off-baseOff, bytes.NewReader(delta))
		}
	}
	return off, p.crc.Sum32(), p.err
}

// raw copies an entry of another pack, header and deflated data, as is:
// only a whole object may be copied (a delta's base would be elsewhere).
func (p *packWriter) raw(entry []byte) (int64, uint32, error) {
	off := p.off
	if p.err == nil {
		p.crc.Reset()
		_, p.err = p.Write(entry)
	}
	return off, p.crc.Sum32(), p.err
}

// write writes an entry of type t whose content (the object, or a delta)
// is size bytes read from r; rel is an OFS_DELTA's distance back to its
// base (0 for a whole object).
func (p *packWriter) write(t plumbing.ObjectType, size, rel int64, r io.Reader) error {
	// Type and size: 3 bits of type and 4 of size in the first byte, then
	// 7 bits of size a byte, low bits first.
	p.buf = p.buf[:0]
	u := uint64(size)
	c := byte(t)<<4 | byte(u&0x0f)
	u >>= 4
	for u > 0 {
		p.buf = append(p.buf, c|0x80)
		c = byte(u & 0x7f)
		u >>= 7
	}
	p.buf = append(p.buf, c)
	if t == plumbing.OFSDeltaObject {
		// The distance back to the base, high bits first, 7 a byte, each
		// continued byte's value one less (git's offset encoding).
		var b [10]byte
		i := len(b) - 1
		b[i] = byte(rel & 0x7f)
		for rel >>= 7; rel > 0; rel >>= 7 {
			rel--
			i--
			b[i] = 0x80 | byte(rel&0x7f)
		}
		p.buf = append(p.buf, b[i:]...)
	}
	if _, err := p.Write(p.buf); err != nil {
		return err
	}
	zw := p.zfast
	if t == plumbing.TreeObject {
		zw = p.zstore
	}
	zw.Reset(p)
	n, err := io.Copy(zw, r)
	if err != nil {
		return err
	}
	if n != size {
		return fmt.Errorf("%d bytes, not the %d its header says", n, size)
	}
	return zw.Close()
}

// finish writes the trailing checksum and returns it (the pack's name).
func (p *packWriter) finish() (plumbing.Hash, error) {
	p.release()
	if p.err != nil {
		return plumbing.ZeroHash, p.err
	}
	if err := p.bw.Flush(); err != nil {
		return plumbing.ZeroHash, err
	}
	var h plumbing.Hash
	copy(h[:], p.sum.Sum(nil))
	_, err := p.w.Write(h[:])
	return h, err
}
