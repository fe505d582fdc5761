package gitobj

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/idxfile"
	"github.com/go-git/go-git/v5/plumbing/storer"
)

// A store's mirror gains a pack file with every flush and every fetch
// that brings objects. Left alone, a reconciler that appended 10^5 runs
// would hold about 12 000 packs: every object lookup that misses walks
// them all, and go-git keeps a descriptor and an in-memory index for each.
// Consolidate therefore merges small packs geometrically, as
// `git repack --geometric=2` does: after a consolidation every pack holds
// at least twice the objects of all smaller packs together, so the number
// of packs grows with the logarithm of the objects written, and an object
// is rewritten about log2 times over its life.
//
// Packs over Consolidate's maxObjects are never rewritten (the first
// clone of a large branch, or packs consolidated up to that size), so one
// consolidation costs at most that many objects.

// repackFactor is the geometric progression kept between packs.
const repackFactor = 2

// rollup returns how many of the smallest packs to merge into one, given
// the packs' object counts in ascending order: the shortest prefix whose
// merge leaves every larger pack at least repackFactor times the objects
// of all smaller ones, cut so that the merge stays within maxObjects.
// It is 0 when there is nothing to merge.
func rollup(counts []int, maxObjects int) int {
	k, sum := 0, 0
	for j, c := range counts {
		if c > maxObjects {
			break
		}
		if c < repackFactor*sum {
			k = j + 1
		}
		sum += c
	}
	for ; k > 0; k-- { // the longest prefix within maxObjects
		total := 0
		for _, c := range counts[:k] {
			total += c
		}
		if total <= maxObjects {
			break
		}
	}
	if k < 2 {
		return 0
	}
	return k
}

// Consolidate merges d's small packs (see rollup) into one pack of at
// most maxObjects objects, as `git repack --geometric=2` does. The merged
// pack is written and synced before the packs it replaces are removed, so
// a crash leaves objects twice, never missing. Nothing is written when
// there is nothing to merge.
//
// The merge runs without a lock; the removal runs inside swap, which the
// caller implements to call remove while nothing reads d (a read of an
// unmapped pack is a fault, not an error) and may skip (returning nil)
// when d is closing: the next consolidation removes the duplicates. Only
// one consolidation of d may run at a time, and Close must wait for it.
func (d *Dir) Consolidate(maxObjects int, swap func(remove func() error) error) error {
	if err := d.rescan(); err != nil {
		return fmt.Errorf("gitobj: packs: %w", err)
	}
	packs := d.packList()
	slices.SortStableFunc(packs, func(a, b *mappedPack) int { return a.count() - b.count() })
	counts := make([]int, len(packs))
	for i, p := range packs {
		counts[i] = p.count()
	}
	k := rollup(counts, maxObjects)
	if k < 2 {
		return nil
	}
	if err := d.mergePacks(packs[:k], swap); err != nil {
		return fmt.Errorf("gitobj: consolidate packs: %w", err)
	}
	return nil
}

// mergePacks writes the objects of packs as one new pack with its index,
// syncs both, then, inside swap (see Consolidate), removes packs. Whole
// commits, blobs and tags are copied as they are stored, their CRC-32
// checked against the old index; deltas (what a fetch brings) are
// resolved, their hash checked. Trees are written last, as deltas where
// that pays (see writeTrees). The index is written from the offsets and
// CRCs known here, not by parsing the new pack again.
func (d *Dir) mergePacks(packs []*mappedPack, swap func(remove func() error) error) error {
	var objs []packObject
	seen := map[plumbing.Hash]bool{}
	for _, p := range packs {
		es := make([]packObject, 0, p.count())
		for i := range p.count() {
			h, off, crc, ok := p.idx.entry(i)
			if !ok {
				return fmt.Errorf("pack %s: object %s has no valid offset", p.name, h)
			}
			es = append(es, packObject{p: p, off: off, crc: crc, h: h})
		}
		// An entry ends where the next one (by offset) begins.
		slices.SortFunc(es, func(a, b packObject) int { return cmp.Compare(a.off, b.off) })
		for i := range es {
			es[i].end = int64(len(p.data)) - 20
			if i+1 < len(es) {
				es[i].end = es[i+1].off
			}
			if !seen[es[i].h] {
				seen[es[i].h] = true
				objs = append(objs, es[i])
			}
		}
	}

	dir := filepath.Join(d.dir, "pack")
	name, err := writeIndexedPack(dir, len(objs), func(pw *packWriter, add func(plumbing.Hash, uint64, uint32)) error {
		var trees []treeObject
		for i, o := range objs {
			if o.off < 12 || o.end <= o.off || o.end > int64(len(o.p.data))-20 {
				return fmt.Errorf("pack %s: object %s at offset %d is outside the pack", o.p.name, o.h, o.off)
			}
			raw := o.p.data[o.off:o.end]
			var (
				off int64
				crc uint32
				err error
			)
			switch t := plumbing.ObjectType((raw[0] >> 4) & 7); t {
			case plumbing.CommitObject, plumbing.TreeObject, plumbing.BlobObject, plumbing.TagObject:
				if crc32.ChecksumIEEE(raw) != o.crc {
					return fmt.Errorf("pack %s: object %s does not match the CRC-32 of its index", o.p.name, o.h)
				}
				if t == plumbing.TreeObject {
					key, size, err := storedTreeKey(o.p, o.off)
					if err != nil {
						return err
					}
					trees = append(trees, treeObject{packObject: o, pos: i, key: key, size: size})
					continue
				}
				off, crc, err = pw.raw(raw)
			default:
				var data []byte
				t, data, err = d.packed(o.p, o.off, 0, 0)
				if err == nil && HashObject(t, data) != o.h {
					err = fmt.Errorf("pack %s: object %s is corrupt", o.p.name, o.h)
				}
				if err == nil && t == plumbing.TreeObject {
					trees = append(trees, treeObject{packObject: o, pos: i, key: treeKey(data), size: len(data)})
					continue
				}
				if err == nil {
					off, crc, err = pw.add(t, int64(len(data)), bytes.NewReader(data))
				}
			}
			if err != nil {
				return err
			}
			add(o.h, uint64(off), crc)
		}
		return d.writeTrees(pw, trees, add)
	}, nil)
	if err != nil {
		return err
	}

	return swap(func() error {
		// Forget the old packs before removing them: nothing may read a
		// mapping whose file is gone.
		names := make([]string, len(packs))
		for i, p := range packs {
			names[i] = p.name
		}
		d.forget(names)
		for _, n := range names {
			if n == "pack-"+name.String() {
				continue // the same objects written again: nothing to remove
			}
			for _, ext := range []string{".idx", ".pack", ".rev"} {
				if err := os.Remove(filepath.Join(dir, n+ext)); err != nil && !errors.Is(err, fs.ErrNotExist) {
					return err
				}
			}
		}
		return d.rescan()
	})
}

// writeIndexedPack writes a pack of n whole objects, given by fill, into
// dir with its version 2 index, both synced before they are renamed into
// place, and returns its name. beforeSync, if not nil, runs once both are
// written and before they are synced; the files it returns are synced
// with them, and its error is returned as it is. The index is made from the offsets and
// CRCs fill reports, not by parsing the pack again.
//
// The index goes into place first and the pack last, as go-git's own
// pack writer does: go-git lists a directory's packs by their .pack files
// and opens the .idx of each when it builds its index, so a .pack without
// its .idx fails that reader's every lookup with "packfile not found"
// (a store reading while a consolidation runs without its lock), while
// git and Dir list .idx files and skip one whose pack is not there yet.
// A crash between the two renames leaves an index without its pack,
// which every reader ignores and RemoveTempPacks removes.
//
// The temporary files are written next to the pack directory, not in it:
// go-git (through go-billy) lists a directory by reading its entries and
// then stat-ing each, and fails the whole listing when one has gone in
// between, which it takes for a missing pack directory (no packs: every
// lookup "object not found"). While it runs without the readers' lock, a
// writer only adds whole files to the pack directory; packs leave it only
// in the swap, under the lock.
func writeIndexedPack(dir string, n int, fill func(pw *packWriter, add func(h plumbing.Hash, off uint64, crc uint32)) error, beforeSync func() ([]*os.File, error)) (plumbing.Hash, error) {
	parent := filepath.Dir(dir)
	tmp, err := os.CreateTemp(parent, tempPrefixes[0])
	if err != nil {
		return plumbing.ZeroHash, err
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	defer tmp.Close()
	pw := newPackWriter(tmp, n)
	var iw idxfile.Writer
	iw.OnHeader(uint32(n))
	added := map[plumbing.Hash]bool{}
	var twice []plumbing.Hash
	if err := fill(pw, func(h plumbing.Hash, off uint64, crc uint32) {
		if added[h] {
			twice = append(twice, h)
		}
		added[h] = true
		iw.Add(h, off, crc)
	}); err != nil {
		return plumbing.ZeroHash, err
	}
	// An object twice would make a pack whose header counts more objects
	// than its index holds, which stock git refuses.
	if len(twice) > 0 {
		return plumbing.ZeroHash, fmt.Errorf("pack of %d objects holds %s twice", n, twice[0])
	}
	if len(added) != n {
		return plumbing.ZeroHash, fmt.Errorf("pack of %d objects announced %d", len(added), n)
	}
	name, err := pw.finish()
	if err != nil {
		return plumbing.ZeroHash, err
	}
	iw.OnFooter(name)
	idx, err := iw.Index()
	if err != nil {
		return plumbing.ZeroHash, err
	}
	idxTmp, err := os.CreateTemp(parent, tempPrefixes[1])
	if err != nil {
		return plumbing.ZeroHash, err
	}
	defer os.Remove(idxTmp.Name())
	defer idxTmp.Close()
	bw := bufio.NewWriter(idxTmp)
	if _, err := idxfile.NewEncoder(bw).Encode(idx); err != nil {
		return plumbing.ZeroHash, err
	}
	if err := bw.Flush(); err != nil {
		return plumbing.ZeroHash, err
	}
	sync := []*os.File{tmp, idxTmp}
	if beforeSync != nil {
		more, err := beforeSync()
		if err != nil {
			return plumbing.ZeroHash, err
		}
		sync = append(sync, more...)
	}
	// Pack, index and the caller's files are synced at once: a
	// journaling file system commits concurrent fsyncs together, so
	// they cost about one fsync's wait instead of one each.
	if err := syncFiles(sync...); err != nil {
		return plumbing.ZeroHash, err
	}
	if err := errors.Join(tmp.Close(), idxTmp.Close()); err != nil {
		return plumbing.ZeroHash, err
	}
	base := filepath.Join(dir, "pack-"+name.String())
	if err := os.Rename(idxTmp.Name(), base+".idx"); err != nil {
		return plumbing.ZeroHash, err
	}
	if err := os.Rename(tmp.Name(), base+".pack"); err != nil {
		return plumbing.ZeroHash, err // the index left alone is ignored
	}
	return name, syncPath(dir)
}

// syncFiles fsyncs files concurrently and waits for all of them.
func syncFiles(files ...*os.File) error {
	errs := make([]error, len(files))
	var wg sync.WaitGroup
	for i, f := range files {
		if i == 0 {
			continue
		}
		wg.Go(func() { errs[i] = f.Sync() })
	}
	errs[0] = files[0].Sync()
	wg.Wait()
	return errors.Join(errs...)
}

// AddPack writes the objects hashes of st into d as one new pack with its
// index (both synced before they are renamed into place, the index last)
// and returns the pack's name. d finds it on the next miss.
func (d *Dir) AddPack(st storer.EncodedObjectStorer, hashes []plumbing.Hash) (plumbing.Hash, error) {
	return writeIndexedPack(filepath.Join(d.dir, "pack"), len(hashes), func(pw *packWriter, add func(plumbing.Hash, uint64, uint32)) error {
		return pw.addObjects(st, hashes, add)
	}, nil)
}

// tempPrefixes name the temporary files writeIndexedPack and
// writeFileSynced leave behind when interrupted.
var tempPrefixes = []string{"tmp_pack_", "tmp_idx_"}

// RemoveTempPacks removes what an interrupted AddPack or Consolidate left
// in the pack directory dir and in its parent: temporary files, and an
// index whose pack was never renamed in. Only the directory's one writer
// may call it, while it writes nothing.
func RemoveTempPacks(dir string) error {
	if err := removeTempFiles(filepath.Dir(dir)); err != nil {
		return err
	}
	return removeTempFiles(dir)
}

func removeTempFiles(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() {
			continue
		}
		leftover := slices.ContainsFunc(tempPrefixes, func(p string) bool { return strings.HasPrefix(name, p) })
		if base, ok := strings.CutSuffix(name, ".idx"); ok && strings.HasPrefix(name, "pack-") {
			_, err := os.Stat(filepath.Join(dir, base+".pack"))
			leftover = errors.Is(err, fs.ErrNotExist)
		}
		if leftover {
			if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}

// syncPath fsyncs a file or directory.
func syncPath(name string) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
