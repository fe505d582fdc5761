package gitobj

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGoGitReadsWhileConsolidating reads a repository through go-git, as
// the evidence store reads its mirror, while packs are added and
// consolidated as the store does: the merge without the readers' lock,
// the removal of the merged packs under it. Each read first drops
// go-git's pack index (as a flush or a swap does), so that it lists the
// pack directory again. No read may fail: a pack renamed into place
// before its index is one go-git lists and cannot open ("packfile not
// found"), and a temporary file renamed away while go-git lists the pack
// directory makes it see no packs at all ("object not found").
func TestGoGitReadsWhileConsolidating(t *testing.T) {
	repo, d := bareRepo(t)
	sign := testSign(t)
	_, first, err := commitPack(t, repo, d, sign, plumbing.ZeroHash, map[string]string{"runs/0/a.json": "0"})
	require.NoError(t, err)

	st := filesystem.NewStorageWithOptions(osfs.New(repo), cache.NewObjectLRUDefault(),
		filesystem.Options{KeepDescriptors: true})
	t.Cleanup(func() { st.Close() })
	var mu sync.Mutex // the store's lock: go-git's storage is not safe for concurrent use
	swap := func(remove func() error) error {
		mu.Lock()
		defer mu.Unlock()
		if err := st.Close(); err != nil {
			return err
		}
		st.Reindex()
		return remove()
	}

	var (
		done   atomic.Bool // the writer has finished
		stop   atomic.Bool // the reader has failed
		merges atomic.Int64
		wg     sync.WaitGroup
	)
	wg.Go(func() {
		defer done.Store(true)
		parent := first
		deadline := time.Now().Add(3 * time.Second)
		for i := 1; time.Now().Before(deadline) && merges.Load() < 150 && !stop.Load(); i++ {
			b := NewBuilder(d)
			c, err := b.Commit(parent, changesOf(map[string]string{fmt.Sprintf("runs/%d/a.json", i): fmt.Sprint(i)}), "gitobj test\n", testWho, sign)
			if err == nil {
				_, err = d.AddPack(b.Objects(), b.Hashes())
			}
			if err == nil {
				before := len(d.packList())
				err = d.Consolidate(1<<18, swap)
				if len(d.packList()) < before {
					merges.Add(1)
				}
			}
			if !assert.NoError(t, err) {
				return
			}
			parent = c
		}
	})
	reads := 0
	var failed error
	for !done.Load() && failed == nil {
		mu.Lock()
		st.Reindex()
		_, failed = st.EncodedObject(plumbing.CommitObject, first)
		mu.Unlock()
		reads++
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("%d reads during %d consolidations", reads, merges.Load())
	require.NoError(t, failed, "a read through go-git while packs are consolidated")
	require.Positive(t, merges.Load(), "the test must consolidate packs while it reads")
}
