package evidence

import (
	"bufio"
	"compress/zlib"
	"crypto/sha1"
	"encoding/binary"
	"fmt"
	"io"

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
	sum := sha1.New()
	bw := bufio.NewWriterSize(io.MultiWriter(w, sum), 64<<10)
	var hdr [12]byte
	copy(hdr[:], "PACK")
	binary.BigEndian.PutUint32(hdr[4:], 2)
	binary.BigEndian.PutUint32(hdr[8:], uint32(len(hashes)))
	bw.Write(hdr[:])
	zfast, _ := zlib.NewWriterLevel(bw, zlib.BestSpeed)
	zstore, _ := zlib.NewWriterLevel(bw, zlib.NoCompression)
	var buf []byte
	for _, h := range hashes {
		o, err := st.EncodedObject(plumbing.AnyObject, h)
		if err != nil {
			return fmt.Errorf("object %s: %w", h, err)
		}
		buf = buf[:0]
		// Type and size: 3 bits of type and 4 of size in the first byte,
		// then 7 bits of size a byte, low bits first.
		size := uint64(o.Size())
		c := byte(o.Type())<<4 | byte(size&0x0f)
		size >>= 4
		for size > 0 {
			buf = append(buf, c|0x80)
			c = byte(size & 0x7f)
			size >>= 7
		}
		buf = append(buf, c)
		if _, err := bw.Write(buf); err != nil {
			return err
		}
		r, err := o.Reader()
		if err != nil {
			return fmt.Errorf("object %s: %w", h, err)
		}
		zw := zfast
		if o.Type() == plumbing.TreeObject {
			zw = zstore
		}
		zw.Reset(bw)
		_, err = io.Copy(zw, r)
		r.Close()
		if err != nil {
			return fmt.Errorf("object %s: %w", h, err)
		}
		if err := zw.Close(); err != nil {
			return err
		}
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	_, err := w.Write(sum.Sum(nil))
	return err
}
