package evidence

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/internal/testing/proctest"
)

// TestStoreMapsPacksForRandomReads: the mirror's packs and indexes, the
// ones a store maps at Open and after a later fetch, are mapped for random
// reads (VmFlags "rr": a page fault reads one page, not a
// read-around window). A reconciler's first start on a 10^5-run branch
// under a 256 MiB memory limit read 145 GB from disk in three minutes of
// recovery without it (issue 19).
func TestStoreMapsPacksForRandomReads(t *testing.T) {
	signer, _ := testSigner(t)
	remote := bareRemote(t)
	writer := openStore(t, testOptions(t, remote, signer))
	_, err := writer.Append(t.Context(), "m", runFiles("c", "r1", 2, 10))
	require.NoError(t, err)
	opts := testOptions(t, remote, signer)
	s := openStore(t, opts)
	randomReads := func(mapped bool) {
		t.Helper()
		packs, err := filepath.Glob(filepath.Join(opts.StateDir, mirrorDir, "objects", "pack", "pack-*.*"))
		require.NoError(t, err)
		n := 0
		for _, p := range packs {
			if filepath.Ext(p) != ".pack" && filepath.Ext(p) != ".idx" {
				continue
			}
			m, err := proctest.Mapped(p)
			require.NoError(t, err)
			if m.Count == 0 {
				continue // replaced by a consolidation, not mapped
			}
			n++
			assert.Contains(t, m.Flags, "rr", "%s is not mapped for random reads", p)
		}
		if mapped {
			require.Positive(t, n, "no pack of the mirror is mapped: the test proves nothing")
		}
	}
	randomReads(true)
	_, err = writer.Append(t.Context(), "m", runFiles("c", "r2", 2, 10))
	require.NoError(t, err)
	require.NoError(t, s.Refresh(t.Context()))
	_, err = s.Read(t.Context(), IndexPath("c", "r2"))
	require.NoError(t, err)
	// A background consolidation may have replaced the packs by one not
	// mapped yet: every pack mapped now is for random reads (a pack
	// mapped later is gitobj's TestAdviseRandomMapsPacksForRandomReads).
	randomReads(false)
}
