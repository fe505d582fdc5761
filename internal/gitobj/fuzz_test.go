package gitobj

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/stretchr/testify/require"
)

// FuzzParseCommitHeader: the commit header parser either refuses a
// commit or reads exactly its header's one tree line, its parent lines in
// order and the time of its one committer line.
func FuzzParseCommitHeader(f *testing.F) {
	tree := "tree " + strings.Repeat("a", 40) + "\n"
	who := "committer c <c@x> 1700000000 +0000\n"
	f.Add([]byte(tree + who + "\nmsg"))
	f.Add([]byte(tree + "parent " + strings.Repeat("b", 40) + "\nparent " + strings.Repeat("c", 40) + "\n" + who + "gpgsig -----BEGIN\n x\n\ncommitter m <m> 5 +0000\n"))
	f.Add([]byte(tree + "committer c <c@x> -5 +0000\n"))
	f.Add([]byte(tree + tree + who))
	f.Fuzz(func(t *testing.T, raw []byte) {
		c, err := ParseCommitHeader(raw)
		if err != nil {
			return
		}
		header, _, _ := bytes.Cut(raw, []byte("\n\n"))
		var trees, committers []string
		var parents []plumbing.Hash
		for _, line := range strings.Split(string(header), "\n") {
			key, val, _ := strings.Cut(line, " ")
			switch key {
			case "tree":
				trees = append(trees, val)
			case "parent":
				parents = append(parents, plumbing.NewHash(val))
			case "committer":
				committers = append(committers, val)
			}
		}
		if len(trees) != 1 || strings.ToLower(trees[0]) != c.Tree.String() {
			t.Fatalf("tree %s read from tree lines %q", c.Tree, trees)
		}
		if len(parents) != len(c.Parents) {
			t.Fatalf("%d parents read from %d parent lines", len(c.Parents), len(parents))
		}
		for i := range parents {
			if parents[i] != c.Parents[i] {
				t.Fatalf("parent %d: %s read as %s", i, parents[i], c.Parents[i])
			}
		}
		if len(committers) != 1 {
			t.Fatalf("read from %d committer lines", len(committers))
		}
		fields := strings.Fields(committers[0][strings.LastIndexByte(committers[0], '>')+1:])
		if sec, err := strconv.ParseInt(fields[0], 10, 64); err != nil || sec != c.When.Unix() {
			t.Fatalf("committer time %q read as %d", fields[0], c.When.Unix())
		}
	})
}

// seedPack writes a pack of a few objects with its index (AddPack) and
// returns both files' bytes.
func seedPack(f *testing.F) (pack, idx []byte) {
	repo := filepath.Join(f.TempDir(), "repo.git")
	require.NoError(f, os.MkdirAll(filepath.Join(repo, "objects", "pack"), 0o755))
	d, err := OpenDir(repo)
	require.NoError(f, err)
	defer d.Close()
	b := NewBuilder(d)
	_, err = b.Commit(plumbing.ZeroHash, changesOf(map[string]string{"a": "1", "d/b": "2"}), "m\n", testWho,
		func(io.Reader) ([]byte, error) { return []byte("sig"), nil })
	require.NoError(f, err)
	name, err := d.AddPack(b.Objects(), b.Hashes())
	require.NoError(f, err)
	base := filepath.Join(repo, "objects", "pack", "pack-"+name.String())
	pack, err = os.ReadFile(base + ".pack")
	require.NoError(f, err)
	idx, err = os.ReadFile(base + ".idx")
	require.NoError(f, err)
	return pack, idx
}

// FuzzParsePackIndex: a pack index is refused or its tables exactly fill
// it, its fanout never decreases, and every lookup of every name it
// holds stays inside it.
func FuzzParsePackIndex(f *testing.F) {
	_, idx := seedPack(f)
	f.Add(idx)
	f.Add(idx[:len(idx)-41])
	f.Add(append(bytes.Clone(idx), 0, 0, 0, 0, 0, 0, 0, 0))
	f.Fuzz(func(t *testing.T, b []byte) {
		x, err := parsePackIndex(b)
		if err != nil {
			return
		}
		if got := 8 + 256*4 + 28*x.n + len(x.large) + 40; got != len(b) {
			t.Fatalf("tables of %d objects fill %d of %d bytes", x.n, got, len(b))
		}
		prev := uint32(0)
		for i := range 256 {
			v := binary.BigEndian.Uint32(x.fanout[i*4:])
			if v < prev {
				t.Fatalf("fanout decreases at %d", i)
			}
			prev = v
		}
		p := &mappedPack{idx: x}
		for i := range x.n {
			h, off, _, ok := x.entry(i)
			if o, found := p.offset(h); found && ok && o != off && !hasDuplicate(x, h) {
				t.Fatalf("%s: entry at %d, lookup at %d", h, off, o)
			}
		}
	})
}

// hasDuplicate reports whether name h appears twice in x (a malformed
// index may list a name twice; a lookup then finds one of them).
func hasDuplicate(x packIndex, h plumbing.Hash) bool {
	return bytes.Count(x.names, h[:]) > 1
}

// FuzzPackedObject: reading the first entry of any pack (its object
// header, delta offsets, delta base names and zlib streams) returns an
// error or an object of one of the four types, never a panic or more than
// maxObjectSize bytes.
func FuzzPackedObject(f *testing.F) {
	pack, _ := seedPack(f)
	f.Add(pack)
	dir := gitPacks(f, "50")
	packs, err := filepath.Glob(filepath.Join(dir, ".git", "objects", "pack", "pack-*.pack"))
	require.NoError(f, err)
	for _, p := range packs {
		b, err := os.ReadFile(p)
		require.NoError(f, err)
		f.Add(b)
	}
	empty, err := parsePackIndex(emptyIndex())
	require.NoError(f, err)
	smallObjects(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		d := &Dir{bases: map[baseKey][]byte{}}
		p := &mappedPack{name: "fuzz", data: data, idx: empty}
		for off := int64(12); off < int64(len(data)) && off < 12+64; off++ {
			typ, obj, err := d.packed(p, off, 0, 0)
			if err != nil {
				continue
			}
			switch typ {
			case plumbing.CommitObject, plumbing.TreeObject, plumbing.BlobObject, plumbing.TagObject:
			default:
				t.Fatalf("offset %d read as a %s", off, typ)
			}
			if int64(len(obj)) > maxObjectSize {
				t.Fatalf("offset %d read as %d bytes", off, len(obj))
			}
		}
	})
}

// emptyIndex is a version 2 index of no objects.
func emptyIndex() []byte {
	b := append([]byte("\xfftOc\x00\x00\x00\x02"), make([]byte, 256*4+40)...)
	return b
}

// FuzzParseLoose: a loose object file is refused or is one zlib stream
// that starts with "<type> <size>\0" and the content read.
func FuzzParseLoose(f *testing.F) {
	for _, s := range []string{"blob 5\x00hello", "tree 0\x00", "commit 3\x00abcdef", "blob 99999999999\x00", "blob -1\x00", "blob\x00 1"} {
		var z bytes.Buffer
		zw := zlib.NewWriter(&z)
		zw.Write([]byte(s))
		zw.Close()
		f.Add(z.Bytes())
	}
	smallObjects(f)
	f.Fuzz(func(t *testing.T, raw []byte) {
		typ, data, err := parseLoose(raw, 0)
		if err != nil {
			return
		}
		zr, err := zlib.NewReader(bytes.NewReader(raw))
		if err != nil {
			t.Fatalf("read a file that is not zlib: %v", err)
		}
		want := fmt.Sprintf("%s %d\x00", typ, len(data)) + string(data)
		got := make([]byte, len(want))
		if _, err := io.ReadFull(zr, got); err != nil || string(got) != want {
			t.Fatalf("read %q from a stream starting %q", want, got)
		}
	})
}

// smallObjects lowers maxObjectSize for a fuzz target, so that an input
// declaring a large object costs no large allocation.
func smallObjects(f *testing.F) {
	saved := maxObjectSize
	f.Cleanup(func() { maxObjectSize = saved })
	maxObjectSize = 1 << 20
}
