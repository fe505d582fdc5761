package audit_test

import (
	"context"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"testing"

	"signet.dev/signet/evidence/audit"
	"signet.dev/signet/internal/gitobj"
	"signet.dev/signet/internal/testing/evidencetest"
)

func TestZZHeap(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("ZZ_RUNS"))
	s, err := evidencetest.SynthesizeCached(context.Background(), n, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer gitobj.MaxBaseBytes.Store(gitobj.MaxBaseBytes.Swap(0))
	defer audit.SetAfterWalk(func() {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		t.Logf("live %d B, %.0f B/run", ms.HeapAlloc, float64(ms.HeapAlloc)/float64(n))
		f, _ := os.Create(os.Getenv("ZZ_PROF"))
		pprof.WriteHeapProfile(f)
		f.Close()
	})()
	rep, err := audit.Branch(context.Background(), audit.Options{Repo: s.Remote, Policy: s.Policy})
	if err != nil || len(rep.Findings) > 0 {
		t.Fatal(err, rep.Findings)
	}
}
