package reconciler_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"signet.dev/signet/evidence"
	"signet.dev/signet/internal/testing/evidencetest"
	"signet.dev/signet/internal/testing/gittest"
	"signet.dev/signet/internal/testing/proctest"
	"signet.dev/signet/internal/testing/testenv"
	"signet.dev/signet/reconciler"
	"signet.dev/signet/specs"
)

// startupChildEnv holds the JSON startupJob a TestStartupChild child runs.
const startupChildEnv = "SIGNET_TEST_STARTUP_CHILD"

// startupJob is what the start-up child does: a reconciler over a clone
// of an evidence branch, its spec repository and state directory.
type startupJob struct {
	Config *reconciler.Config `json:"config"`
	Out    string             `json:"out"`
	// Cgroup is a cgroup directory the child joins first (its
	// cgroup.procs), when SIGNET_BENCH_STARTUP_CGROUP names one: only
	// the restart, whose fetch brings nothing (the first start's file://
	// fetch runs the remote's git upload-pack as its child, which would
	// share the cgroup).
	Cgroup string `json:"cgroup,omitempty"`
}

// startupFigures is what the child measured.
type startupFigures struct {
	StartupSeconds float64 `json:"startupSeconds"` // Build and Recover
	PassSeconds    float64 `json:"passSeconds"`    // one no-op pass
	HeapBytes      uint64  `json:"heapBytes"`      // live heap after the pass, after a GC
	PeakRSSBytes   uint64  `json:"peakRSSBytes"`   // VmHWM of the child
	// PeakAnonBytes and PeakFileBytes split the resident size, sampled
	// every 100 ms: the process's own memory, and mapped pack pages.
	PeakAnonBytes uint64 `json:"peakAnonBytes"`
	PeakFileBytes uint64 `json:"peakFileBytes"`
	// Recovered: how many runs Recover took from the record of finished
	// runs, and how many it read from the branch.
	Recovered reconciler.RecoveryCounts `json:"recovered"`
}

// BenchmarkStartup is a reconciler's start-up (Build, Recover) and one
// no-op pass over an evidence branch that already holds N finished runs
// of its own cluster (evidencetest's synthetic branch: 12 signed
// documents per run, generated once and cached under the temporary
// directory), in a child process of its own so that its peak RSS is its
// own. SIGNET_BENCH_STARTUP_RUNS sets N (default 200; issue 19's goal is
// ≤ 256 MiB at 10^5). Reports startup-s, pass-s, heap-MiB (live, after
// the pass), peak-RSS-MiB and heap-KiB/run (live heap over N) of a start
// with an empty state directory, and restart-startup-s, restart-heap-MiB
// and restart-peak-RSS-MiB of a second child on the state the first
// left (restart-read-runs: the runs it read from the branch, not from
// the record of finished runs the first wrote); peak-anon-MiB and peak-file-MiB (and restart-…) split the
// resident set into the process's own memory and mapped pack pages.
// SIGNET_BENCH_STARTUP_HEAP and SIGNET_BENCH_STARTUP_CPU name files for
// the heap (after the pass) and CPU profiles of the last child.
// SIGNET_BENCH_STARTUP_CGROUP names a cgroup directory, its memory limit
// set beforehand, that the restart joins: a restart the limit does not
// hold is killed, and the benchmark fails. SIGNET_BENCH_STARTUP_FIRST_CGROUP
// is the same for the first start (a new pod). With either, the evidence
// remote is served over loopback smart HTTP from the benchmark's process.
func BenchmarkStartup(b *testing.B) {
	runs := benchEnvInt(b, "SIGNET_BENCH_STARTUP_RUNS", 200)
	s, err := evidencetest.SynthesizeCached(b.Context(), runs, 4)
	require.NoError(b, err)
	cache := filepath.Dir(s.Remote)
	var fig, restart startupFigures
	for b.Loop() {
		b.StopTimer()
		dir := b.TempDir()
		remote := filepath.Join(dir, "evidence.git")
		url := remote
		if os.Getenv("SIGNET_BENCH_STARTUP_FIRST_CGROUP")+os.Getenv("SIGNET_BENCH_STARTUP_CGROUP") != "" {
			// Served over loopback smart HTTP by this process, so that
			// the Git server's memory (its pack-objects: 5.1 GB serving
			// 10^5 runs) is not charged to the child's cgroup, as it is
			// not in a pod; a path remote's upload-pack would be the
			// child's own child.
			srv := gittest.NewHTTPServer(b)
			remote = filepath.Join(srv.Root(), "evidence.git")
			url = srv.URL() + "/evidence.git"
		}
		gittest.Git(b, "", "clone", "-q", "--bare", s.Remote, remote)
		tip := gittest.Git(b, remote, "rev-parse", evidence.DefaultBranch)
		// The synthetic runs' cluster: the one directory under ids/.
		cluster := gittest.Git(b, remote, "ls-tree", "--name-only", evidence.DefaultBranch+":ids")
		require.NotContains(b, cluster, "\n", "the synthetic branch holds runs of more than one cluster")
		spec := testenv.NewRepo(b)
		cfg := &reconciler.Config{
			TypeMeta:    specs.TypeMeta{APIVersion: specs.APIVersion, Kind: reconciler.KindConfig},
			Cluster:     cluster,
			Spec:        reconciler.SourceConfig{URL: spec.Dir, Branch: "main"},
			Evidence:    reconciler.EvidenceConfig{SourceConfig: reconciler.SourceConfig{URL: url}, PinnedTip: tip},
			TrustPolicy: filepath.Join(cache, "trust.yaml"),
			SigningKey:  filepath.Join(cache, "reconciler.pem"),
			StateDir:    filepath.Join(dir, "state"),
			Interval:    1,
			Backends:    reconciler.BackendsConfig{Local: reconciler.LocalConfig{Enabled: true, Grace: 1, WorkRoot: filepath.Join(dir, "work")}},
		}
		// The first child starts with an empty state directory (a new
		// pod: it fetches the whole branch); the second restarts on the
		// state the first left (a container restart).
		for i, into := range []*startupFigures{&fig, &restart} {
			out := filepath.Join(dir, fmt.Sprintf("figures-%d.json", i))
			sj := startupJob{Config: cfg, Out: out}
			if i == 1 {
				sj.Cgroup = os.Getenv("SIGNET_BENCH_STARTUP_CGROUP")
			} else {
				sj.Cgroup = os.Getenv("SIGNET_BENCH_STARTUP_FIRST_CGROUP")
			}
			if sj.Cgroup != "" {
				// The page cache the first child filled is charged to
				// its cgroup: dropped, the restart's reads are charged
				// to the limited one, as in a new pod's.
				unix.Sync()
				require.NoError(b, os.WriteFile("/proc/sys/vm/drop_caches", []byte("1"), 0o644), "dropping the page cache before the restart in a cgroup")
			}
			job, err := json.Marshal(sj)
			require.NoError(b, err)
			// No test timeout: at 10^5 runs the first fetch alone takes
			// minutes.
			cmd := exec.CommandContext(b.Context(), os.Args[0], "-test.run", "^TestStartupChild$", "-test.timeout", "0")
			cmd.Env = append(os.Environ(), startupChildEnv+"="+string(job))
			if i == 0 {
				b.StartTimer()
			}
			log, err := cmd.CombinedOutput()
			if i == 0 {
				b.StopTimer()
			}
			require.NoError(b, err, "start-up child:\n%s", log)
			raw, err := os.ReadFile(out)
			require.NoError(b, err, "start-up child:\n%s", log)
			require.NoError(b, json.Unmarshal(raw, into))
		}
		b.StartTimer()
	}
	const mib = 1 << 20
	b.ReportMetric(float64(s.Runs), "runs")
	b.ReportMetric(fig.StartupSeconds, "startup-s")
	b.ReportMetric(fig.PassSeconds, "pass-s")
	b.ReportMetric(float64(fig.HeapBytes)/mib, "heap-MiB")
	b.ReportMetric(float64(fig.PeakRSSBytes)/mib, "peak-RSS-MiB")
	b.ReportMetric(float64(fig.HeapBytes)/1024/float64(s.Runs), "heap-KiB/run")
	require.Equal(b, s.Runs, fig.Recovered.Read, "the first start reads every run")
	require.Equal(b, s.Runs, restart.Recovered.Recorded+restart.Recovered.Read, "the restart found every run")
	b.ReportMetric(restart.StartupSeconds, "restart-startup-s")
	b.ReportMetric(float64(restart.Recovered.Read), "restart-read-runs")
	b.ReportMetric(float64(restart.HeapBytes)/mib, "restart-heap-MiB")
	b.ReportMetric(float64(restart.PeakRSSBytes)/mib, "restart-peak-RSS-MiB")
	b.ReportMetric(float64(fig.PeakAnonBytes)/mib, "peak-anon-MiB")
	b.ReportMetric(float64(fig.PeakFileBytes)/mib, "peak-file-MiB")
	b.ReportMetric(float64(restart.PeakAnonBytes)/mib, "restart-peak-anon-MiB")
	b.ReportMetric(float64(restart.PeakFileBytes)/mib, "restart-peak-file-MiB")
}

// TestStartupChild is BenchmarkStartup's child; without its job it does
// nothing.
func TestStartupChild(t *testing.T) {
	raw := os.Getenv(startupChildEnv)
	if raw == "" {
		return // only BenchmarkStartup's child runs it
	}
	var job startupJob
	require.NoError(t, json.Unmarshal([]byte(raw), &job))
	if p := os.Getenv("SIGNET_BENCH_STARTUP_CPU"); p != "" {
		f, err := os.Create(p)
		require.NoError(t, err)
		require.NoError(t, pprof.StartCPUProfile(f))
		defer func() { pprof.StopCPUProfile(); _ = f.Close() }()
	}
	if job.Cgroup != "" {
		// Its memory limit is the bound under test: a start-up that
		// passes it is killed (the kernel's OOM killer), and fails.
		require.NoError(t, os.WriteFile(filepath.Join(job.Cgroup, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0o644))
	}
	sampler := proctest.StartSampler(100 * time.Millisecond)
	start := time.Now()
	sec, err := reconciler.LoadSecrets(job.Config)
	require.NoError(t, err)
	r, store, err := reconciler.Build(t.Context(), job.Config, sec, slog.New(slog.DiscardHandler), nil, reconciler.Options{})
	require.NoError(t, err)
	require.NoError(t, r.Recover(t.Context()))
	startup := time.Since(start)
	start = time.Now()
	res, err := r.ReconcileOnce(t.Context())
	require.NoError(t, err)
	require.Empty(t, res.Admitted, "the pass admitted a request")
	pass := time.Since(start)
	runtime.GC()
	if p := os.Getenv("SIGNET_BENCH_STARTUP_HEAP"); p != "" {
		f, err := os.Create(p)
		require.NoError(t, err)
		require.NoError(t, pprof.WriteHeapProfile(f))
		require.NoError(t, f.Close())
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	peak, err := proctest.PeakRSS()
	require.NoError(t, err)
	split, err := sampler.Stop()
	require.NoError(t, err)
	fig := startupFigures{StartupSeconds: startup.Seconds(), PassSeconds: pass.Seconds(), HeapBytes: ms.HeapAlloc, PeakRSSBytes: peak,
		PeakAnonBytes: split.Anon, PeakFileBytes: split.File, Recovered: r.Recovered()}
	b, err := json.Marshal(fig)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(job.Out, b, 0o644))
	runtime.KeepAlive(r)
	_ = store.Close()
}
