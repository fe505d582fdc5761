package gitobj

import (
	"bytes"
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/internal/testing/gittest"
)

// gitPackOf has stock git pack every object of the repository at dir
// (`git pack-objects`, deltas with a window of 50; OFS_DELTA when ofs,
// REF_DELTA otherwise) and returns the pack and the index git wrote.
func gitPackOf(t *testing.T, dir string, ofs bool) (pack, idx []byte) {
	t.Helper()
	objs := gittest.Git(t, dir, "rev-list", "--objects", "--all")
	args := []string{"pack-objects", "-q", "--window=50", "--depth=20"}
	if ofs {
		args = append(args, "--delta-base-offset")
	}
	prefix := filepath.Join(t.TempDir(), "p")
	name, err := gittest.Run(t, dir, []byte(objs+"\n"), append(args, prefix)...)
	require.NoError(t, err)
	pack, err = os.ReadFile(prefix + "-" + name + ".pack")
	require.NoError(t, err)
	idx, err = os.ReadFile(prefix + "-" + name + ".idx")
	require.NoError(t, err)
	return pack, idx
}

// indexPack streams pack through a PackIndexer into a new pack
// directory, in pieces as a fetch would, and returns the directory.
func indexPack(t *testing.T, pack []byte) (string, error) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "objects", "pack")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	x, err := NewPackIndexer(dir)
	require.NoError(t, err)
	for rest := pack; len(rest) > 0; {
		n := min(len(rest), 1000)
		_, err := x.Write(rest[:n])
		require.NoError(t, err)
		rest = rest[n:]
	}
	return dir, x.Close()
}

// requireNothingWritten fails unless dir (a pack directory) and its
// parent hold nothing but dir itself.
func requireNothingWritten(t *testing.T, dir string) {
	t.Helper()
	packs, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, packs, "a refused pack must install nothing")
	parent, err := os.ReadDir(filepath.Dir(dir))
	require.NoError(t, err)
	require.Len(t, parent, 1, "a refused pack must leave no temporary file")
}

// TestPackIndexerMatchesGitIndexPack indexes packs stock git wrote, with
// OFS_DELTA and with REF_DELTA deltas, and requires the index git wrote
// for the same pack byte for byte, the pack installed under its name,
// and git verify-pack and a Dir reading every object from it.
func TestPackIndexerMatchesGitIndexPack(t *testing.T) {
	repo := gitPacks(t, "50")
	for _, ofs := range []bool{true, false} {
		name := map[bool]string{true: "OFS_DELTA", false: "REF_DELTA"}[ofs]
		t.Run(name, func(t *testing.T) {
			pack, wantIdx := gitPackOf(t, repo, ofs)
			verify := gittest.Git(t, "", "verify-pack", "-v", writeTemp(t, "p.pack", pack, "p.idx", wantIdx))
			require.Contains(t, verify, "chain length", "git's pack must hold deltas for this test to mean anything")
			// Small batches make the index take several ranges of names.
			defer func(n int) { indexBatch = n }(indexBatch)
			indexBatch = 16

			dir, err := indexPack(t, pack)
			require.NoError(t, err)
			sum := sha1.Sum(pack[:len(pack)-20])
			base := filepath.Join(dir, "pack-"+hex.EncodeToString(sum[:]))
			gotPack, err := os.ReadFile(base + ".pack")
			require.NoError(t, err)
			require.Equal(t, pack, gotPack)
			gotIdx, err := os.ReadFile(base + ".idx")
			require.NoError(t, err)
			require.Equal(t, wantIdx, gotIdx, "the index must be the one git index-pack writes")
			gittest.Git(t, "", "verify-pack", base+".idx")

			d, err := OpenDir(filepath.Dir(filepath.Dir(dir)))
			require.NoError(t, err)
			defer d.Close()
			for _, line := range allObjects(t, repo) {
				_, err := d.Object(plumbing.AnyObject, plumbing.NewHash(strings.Fields(line)[0]), 0)
				require.NoError(t, err, line)
			}
			left, err := os.ReadDir(filepath.Dir(dir))
			require.NoError(t, err)
			require.Len(t, left, 1, "no temporary file may be left")
		})
	}
}

// TestPackIndexerRefusesBadPacks: a pack whose trailer does not match,
// a truncated one, one with bytes after its objects, one announcing more
// objects than it holds, one whose object is corrupt, one holding an
// object twice (their trailers recomputed), and a thin pack (deltas against
// objects it lacks) are refused with an error saying why, and nothing is
// installed.
func TestPackIndexerRefusesBadPacks(t *testing.T) {
	repo := gitPacks(t, "50")
	pack, _ := gitPackOf(t, repo, true)
	resum := func(b []byte) []byte {
		sum := sha1.Sum(b[:len(b)-20])
		copy(b[len(b)-20:], sum[:])
		return b
	}
	corrupt := bytes.Clone(pack)
	corrupt[12+10] ^= 0x40 // inside the first object's zlib stream
	extra := append(bytes.Clone(pack[:len(pack)-20]), make([]byte, 21)...)
	fewer := bytes.Clone(pack)
	binary.BigEndian.PutUint32(fewer[8:], binary.BigEndian.Uint32(pack[8:])+1)

	// The first object again, before the trailer.
	p := &mappedPack{data: pack}
	e, err := p.entryHeader(12)
	require.NoError(t, err)
	_, first, err := inflateEntry(p, 12, e)
	require.NoError(t, err)
	twice := append(bytes.Clone(pack[:len(pack)-20]), pack[12:first]...)
	binary.BigEndian.PutUint32(twice[8:], binary.BigEndian.Uint32(pack[8:])+1)
	twice = resum(append(twice, make([]byte, 20)...))

	cmd := gittest.Cmd(t, repo, "pack-objects", "-q", "--thin", "--stdout", "--revs", "--delta-base-offset")
	cmd.Stdin = strings.NewReader("HEAD\n^HEAD~1\n")
	thin, err := cmd.Output()
	require.NoError(t, err)

	for _, c := range []struct {
		name, want string
		pack       []byte
	}{
		{"trailer", "pack checksum mismatch", append(bytes.Clone(pack[:len(pack)-1]), pack[len(pack)-1]^1)},
		{"truncated", "pack checksum mismatch", pack[:len(pack)/2]},
		{"corrupt object", "object at offset 12", resum(corrupt)},
		{"bytes after the objects", "bytes after its", resum(extra)},
		{"more objects announced", "pack ends after", resum(fewer)},
		{"object twice", "twice", twice},
		{"thin", "is not in the pack", thin},
		{"not a pack", "not a pack", []byte("this is not a pack at all, not even close")},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir, err := indexPack(t, c.pack)
			require.ErrorContains(t, err, c.want)
			requireNothingWritten(t, dir)
		})
	}
}

// writeTemp writes name=data pairs into a new directory and returns the
// path of the first.
func writeTemp(t *testing.T, nameData ...any) string {
	dir := t.TempDir()
	for i := 0; i < len(nameData); i += 2 {
		require.NoError(t, os.WriteFile(filepath.Join(dir, nameData[i].(string)), nameData[i+1].([]byte), 0o644))
	}
	return filepath.Join(dir, nameData[0].(string))
}
