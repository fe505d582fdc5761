package gitobj

import (
	"bytes"
	"compress/zlib"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/internal/testing/gittest"
)

// TestDirReadsWhatGitWrote reads every object of repositories stock
// git packed (deltas by offset and by reference, as gc and repack write
// them) and left loose, and compares each with `git cat-file`.
func TestDirReadsWhatGitWrote(t *testing.T) {
	for _, tc := range []struct {
		name, repack string
		large        bool // every offset in the index's 64-bit table
	}{
		{"ofs-delta", "true", false},
		{"ref-delta", "false", false},
		{"64-bit-offsets", "true", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			gittest.Git(t, dir, "init", "-q")
			// Similar versions of the same files: git stores them as
			// delta chains.
			for i := range 30 {
				for j := range 3 {
					body := strings.Repeat(fmt.Sprintf("line %d of file %d\n", j, j), 50) + fmt.Sprintf("version %d\n", i)
					require.NoError(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%d.json", j)), []byte(body), 0o644))
				}
				gittest.Git(t, dir, "add", "-A")
				gittest.Git(t, dir, "commit", "-q", "-m", fmt.Sprintf("v%d", i))
			}
			gittest.Git(t, dir, "-c", "repack.useDeltaBaseOffset="+tc.repack, "repack", "-a", "-d", "-f", "--depth=20", "--window=50")
			// And some loose objects after the pack.
			require.NoError(t, os.WriteFile(filepath.Join(dir, "loose.json"), []byte("loose\n"), 0o644))
			gittest.Git(t, dir, "add", "-A")
			gittest.Git(t, dir, "commit", "-q", "-m", "loose")
			if tc.large {
				// Rewrite the index with every offset past the first object in its
				// 64-bit table
				// (what a pack over 2 GiB needs).
				idx := mustGlob(t, filepath.Join(dir, ".git/objects/pack/*.idx"))
				small, err := os.Stat(idx)
				require.NoError(t, err)
				pack := strings.TrimSuffix(idx, ".idx") + ".pack"
				gittest.Git(t, dir, "index-pack", "--index-version=2,12", "-o", idx+".large", pack)
				require.NoError(t, os.Rename(idx+".large", idx))
				large, err := os.Stat(idx)
				require.NoError(t, err)
				require.Greater(t, large.Size(), small.Size()+8*100, "the index must use its 64-bit offset table")
			}
			if tc.repack == "false" {
				require.Contains(t, gittest.Git(t, dir, "verify-pack", "-v", mustGlob(t, filepath.Join(dir, ".git/objects/pack/*.idx"))), "chain length")
			}

			d, err := OpenDir(filepath.Join(dir, ".git"))
			require.NoError(t, err)
			defer d.Close()
			list := strings.Fields(gittest.Git(t, dir, "cat-file", "--batch-all-objects", "--batch-check=%(objectname):%(objecttype)"))
			require.Greater(t, len(list), 100)
			for _, l := range list {
				name, typ, _ := strings.Cut(l, ":")
				want, err := gittest.Cmd(t, dir, "cat-file", typ, name).Output()
				require.NoError(t, err)
				ot, err := plumbing.ParseObjectType(typ)
				require.NoError(t, err)
				got, err := d.Object(ot, plumbing.NewHash(name), 0)
				require.NoError(t, err, name)
				require.Equal(t, string(want), string(got), name)
				if ot == plumbing.CommitObject {
					// The walk's header parser agrees with go-git's decoder.
					mo := &plumbing.MemoryObject{}
					mo.SetType(ot)
					mo.Write(got)
					var c object.Commit
					require.NoError(t, c.Decode(mo))
					h, err := ParseCommitHeader(got)
					require.NoError(t, err)
					require.Equal(t, c.TreeHash, h.Tree)
					require.Equal(t, c.ParentHashes, h.Parents)
					require.True(t, c.Committer.When.Equal(h.When))
				}
				if ot == plumbing.TreeObject {
					// The tree parser agrees with `git ls-tree`.
					entries, err := ParseTree(got)
					require.NoError(t, err)
					var lines []string
					for _, e := range entries {
						typ := "blob"
						if e.Mode == filemode.Dir {
							typ = "tree"
						}
						lines = append(lines, fmt.Sprintf("%06o %s %s\t%s", uint32(e.Mode), typ, e.Hash, e.Name))
					}
					require.Equal(t, gittest.Git(t, dir, "ls-tree", name), strings.Join(lines, "\n"), name)
				}
				// Asking for another type is "not found", never the object.
				_, err = d.Object(plumbing.TagObject, plumbing.NewHash(name), 0)
				require.ErrorIs(t, err, plumbing.ErrObjectNotFound)
			}
			_, err = d.Object(plumbing.BlobObject, plumbing.NewHash(strings.Repeat("ab", 20)), 0)
			require.ErrorIs(t, err, plumbing.ErrObjectNotFound)
		})
	}
}

// TestDirRefusesCorruptObjects: an object whose content does not
// hash to its name, or larger than asked for, is an error.
func TestDirRefusesCorruptObjects(t *testing.T) {
	dir := t.TempDir()
	gittest.InitBare(t, dir)
	h, err := gittest.Run(t, dir, []byte("the real content\n"), "hash-object", "-w", "--stdin")
	require.NoError(t, err)
	h = strings.TrimSpace(h)
	// Rewrite the loose file with other content under the same name.
	var z bytes.Buffer
	zw := zlib.NewWriter(&z)
	zw.Write([]byte("blob 17\x00the fake content\n"))
	zw.Close()
	p := filepath.Join(dir, "objects", h[:2], h[2:])
	require.NoError(t, os.Chmod(p, 0o644))
	require.NoError(t, os.WriteFile(p, z.Bytes(), 0o644))
	d, err := OpenDir(dir)
	require.NoError(t, err)
	defer d.Close()
	_, err = d.Object(plumbing.BlobObject, plumbing.NewHash(h), 0)
	require.ErrorContains(t, err, "is corrupt", "an object whose content does not hash to its name must be refused")

	big, err := gittest.Run(t, dir, bytes.Repeat([]byte("x"), 4096), "hash-object", "-w", "--stdin")
	require.NoError(t, err)
	_, err = d.Object(plumbing.BlobObject, plumbing.NewHash(strings.TrimSpace(big)), 1024)
	require.ErrorContains(t, err, "more than")
}

func mustGlob(t *testing.T, pattern string) string {
	m, err := filepath.Glob(pattern)
	require.NoError(t, err)
	require.Len(t, m, 1)
	return m[0]
}

func TestParseCommitHeaderRefusesMalformed(t *testing.T) {
	tree := "tree " + strings.Repeat("a", 40) + "\n"
	who := "committer c <c@x> 1700000000 +0000\n"
	for name, raw := range map[string]string{
		"no tree":        who + "\nmsg",
		"short tree":     "tree abc\n" + who,
		"two trees":      tree + tree + who,
		"bad parent":     tree + "parent " + strings.Repeat("z", 40) + "\n" + who,
		"no committer":   tree + "\nmsg",
		"two committers": tree + who + who,
		"bad time":       tree + "committer c <c@x> soon +0000\n",
	} {
		_, err := ParseCommitHeader([]byte(raw))
		require.Error(t, err, name)
	}
	c, err := ParseCommitHeader([]byte(tree + "parent " + strings.Repeat("b", 40) + "\n" + who + "gpgsig -----BEGIN\n committer x <y> 1 +0000\n -----END\n\ncommitter in message <m> 5 +0000\n"))
	require.NoError(t, err)
	require.Equal(t, int64(1700000000), c.When.Unix())
	require.Len(t, c.Parents, 1)
}

// TestParsePackIndexRefusesMalformed: a pack index whose layout is wrong
// is refused before any lookup reads it.
func TestParsePackIndexRefusesMalformed(t *testing.T) {
	dir := t.TempDir()
	gittest.Git(t, dir, "init", "-q")
	for i := range 3 {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "f"), []byte(fmt.Sprint(i)), 0o644))
		gittest.Git(t, dir, "add", "-A")
		gittest.Git(t, dir, "commit", "-q", "-m", fmt.Sprint(i))
	}
	gittest.Git(t, dir, "repack", "-a", "-d", "-q")
	good, err := os.ReadFile(mustGlob(t, filepath.Join(dir, ".git/objects/pack/*.idx")))
	require.NoError(t, err)
	x, err := parsePackIndex(good)
	require.NoError(t, err)
	require.Equal(t, 9, x.n)

	edit := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	for name, b := range map[string][]byte{
		"empty":            nil,
		"version 1":        edit(func(b []byte) []byte { b[7] = 1; return b }),
		"truncated":        good[:len(good)-41],
		"partial 64-bit":   append(append([]byte(nil), good...), 0, 0, 0, 0),
		"fanout decreases": edit(func(b []byte) []byte { b[8+4*200+3]++; return b }),
		"more objects claimed": edit(func(b []byte) []byte {
			for i := 0; i < 256; i++ {
				b[8+4*i] = 0x10 // every bucket holds 2^28 objects
			}
			return b
		}),
	} {
		_, err := parsePackIndex(b)
		require.Error(t, err, name)
	}
}

// TestParseLooseRefusesHeadersGitRefuses holds the loose-object header to
// what git itself writes and reads: one of the four object types, and a
// size in canonical decimal (FuzzParseLoose found "blob 04" read as 4).
func TestParseLooseRefusesHeadersGitRefuses(t *testing.T) {
	zip := func(s string) []byte {
		var z bytes.Buffer
		zw := zlib.NewWriter(&z)
		zw.Write([]byte(s))
		zw.Close()
		return z.Bytes()
	}
	for name, raw := range map[string]string{
		"leading zero":    "blob 04\x00abcd",
		"plus sign":       "blob +4\x00abcd",
		"empty size":      "blob \x00",
		"delta type":      "ofs-delta 4\x00abcd",
		"space in size":   "blob 4 \x00abcd",
		"negative":        "blob -1\x00",
		"no separator":    "blob4\x00abcd",
		"size too long":   "blob 5\x00abcd",
		"hex size":        "blob 0x4\x00abcd",
		"leading zero 00": "blob 00\x00",
	} {
		t.Run(name, func(t *testing.T) {
			_, _, err := parseLoose(zip(raw), 0)
			assert.Error(t, err, "a loose header git would refuse must be refused")
		})
	}
	for _, ok := range []string{"blob 0\x00", "blob 4\x00abcd", "tree 0\x00", "commit 10\x000123456789"} {
		typ, data, err := parseLoose(zip(ok), 0)
		require.NoError(t, err, "%q", ok)
		assert.Equal(t, ok[strings.IndexByte(ok, 0)+1:], string(data))
		assert.Equal(t, ok[:strings.IndexByte(ok, ' ')], typ.String())
	}
}
