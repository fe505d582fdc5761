package audit_test

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"signet.dev/signet/evidence/audit"
	"signet.dev/signet/internal/testing/evidencetest"
	"signet.dev/signet/signing"
)

// BenchmarkAuditHeap measures how the audit's peak heap grows with the
// branch: the peak of live heap objects while auditing branches of 25
// and 100 runs of two checks (8 signed documents each), with the
// collector at GOGC=1 so that the heap holds little garbage, sampled
// every 100 µs. Runs are checked and compacted 8 at a time (instead of
// 256), so that both sizes show the long-branch regime, where what stays
// per document is its compact record. Reported: peak growth per signed document
// (peak-B/doc) between the two sizes. The bound (1 GiB at 10^5
// runs of about 20 documents) allows about 500 bytes per document.
func BenchmarkAuditHeap(b *testing.B) {
	ctx := b.Context()
	key, err := signing.GenerateKey(signing.AlgorithmECDSAP256)
	require.NoError(b, err)
	approver, err := signing.GenerateKey(signing.AlgorithmECDSAP256)
	require.NoError(b, err)
	defer audit.SetClosedRunBatch(8)()
	peak := func(s *evidencetest.Synthetic) uint64 {
		defer debug.SetGCPercent(debug.SetGCPercent(1))
		runtime.GC()
		sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		metrics.Read(sample)
		base := sample[0].Value.Uint64()
		var (
			max  uint64
			wg   sync.WaitGroup
			stop = make(chan struct{})
		)
		wg.Go(func() {
			s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
			for {
				select {
				case <-stop:
					return
				case <-time.After(100 * time.Microsecond):
				}
				metrics.Read(s)
				if v := s[0].Value.Uint64(); v > max {
					max = v
				}
			}
		})
		rep, err := audit.Branch(ctx, audit.Options{Repo: s.Remote, Policy: s.Policy})
		close(stop)
		wg.Wait()
		require.NoError(b, err)
		require.Empty(b, rep.Findings)
		return max - min(max, base)
	}
	small, err := evidencetest.Synthesize(ctx, b.TempDir(), 25, 2, key, approver)
	require.NoError(b, err)
	large, err := evidencetest.Synthesize(ctx, b.TempDir(), 100, 2, key, approver)
	require.NoError(b, err)
	var perDoc float64
	for b.Loop() {
		ps, pl := peak(small), peak(large)
		perDoc = float64(pl-min(pl, ps)) / float64(large.Documents-small.Documents)
		b.Logf("peak heap %d B at %d documents, %d B at %d: %.0f B per document", ps, small.Documents, pl, large.Documents, perDoc)
	}
	b.ReportMetric(perDoc, "peak-B/doc")
}
