package reconciler_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"signet.dev/signet/evidence"
	"signet.dev/signet/internal/testing/evidencetest"
	"signet.dev/signet/internal/testing/gittest"
	"signet.dev/signet/internal/testing/testenv"
	"signet.dev/signet/reconciler"
	"signet.dev/signet/reconciler/local"
	"signet.dev/signet/specs"
)

// trivialCheck is the check the overhead benchmarks run: it leaves its
// side effect and a valid Pass result.
const trivialCheck = "result Pass; exit 0"

// newBenchEnv is newEnv for a benchmark.
func newBenchEnv(b *testing.B) *env {
	b.Helper()
	host, err := os.Hostname()
	require.NoError(b, err)
	return &env{keys: testenv.NewKeys(b), repo: testenv.NewRepo(b), state: filepath.Join(b.TempDir(), "state"), host: host, work: filepath.Join(testenv.WorldDir(b), "work")}
}

func buildBench(b *testing.B, e *env, cfg *reconciler.Config) *reconciler.Reconciler {
	b.Helper()
	return buildBenchWith(b, e, cfg, reconciler.Options{})
}

func buildBenchWith(b *testing.B, _ *env, cfg *reconciler.Config, o reconciler.Options) *reconciler.Reconciler {
	b.Helper()
	sec, err := reconciler.LoadSecrets(cfg)
	require.NoError(b, err)
	r, store, err := reconciler.Build(b.Context(), cfg, sec, slog.New(slog.DiscardHandler), nil, o)
	require.NoError(b, err)
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = r.Close(ctx)
		_ = store.Close()
	})
	require.NoError(b, r.Recover(b.Context()))
	return r
}

// forkExec runs the script file once as a bare fork/exec with DESIGN §4's
// environment and waits for it.
func forkExec(b *testing.B, script, resultFile string) {
	cmd := exec.Command(script)
	cmd.Env = []string{
		"PATH=" + local.SafePATH, specs.EnvRunID + "=bench", specs.EnvCheckName + "=trivial", specs.EnvCheckIndex + "=0",
		specs.EnvNonce + "=0123456789abcdef", specs.EnvParticipantIndex + "=0", specs.EnvParticipants + "=1",
		specs.EnvGPUCount + "=0", specs.EnvResultFile + "=" + resultFile,
	}
	if err := cmd.Run(); err != nil {
		b.Fatal(err)
	}
}

func writeTrivialScript(b *testing.B) (script, result string) {
	b.Helper()
	dir := b.TempDir()
	side := testenv.WorldDir(b)
	script = filepath.Join(dir, "trivial.sh")
	require.NoError(b, os.WriteFile(script, []byte(testenv.Script(side, trivialCheck)), 0o755))
	return script, filepath.Join(dir, "result.json")
}

// BenchmarkForkExec is the floor of BenchmarkLocalCheckOverhead: the same
// trivial script, forked and waited for, with nothing else.
func BenchmarkForkExec(b *testing.B) {
	script, result := writeTrivialScript(b)
	for b.Loop() {
		forkExec(b, script, result)
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/exec")
}

// BenchmarkLocalCheckOverhead is the per-check cost of trivial local
// checks through the reconciler: each op is one run of checksPerRun
// trivial checks, and ms/check is the time between two consecutive checks'
// ends, which covers one check's whole orchestration: its intent appended
// and pushed, the process run by the local backend (own process group,
// temporary directory, unprivileged user as root, bounded output), the
// result judged, check evidence and logs appended and pushed. It also
// reports a bare fork/exec and local.Run (process handling alone) of the
// same script, the ratio to fork/exec and the share of the per-check time
// that is not process handling (the durable evidence appends).
func BenchmarkLocalCheckOverhead(b *testing.B) {
	const checksPerRun = 10
	e := newBenchEnv(b)
	checks := make([]testenv.Check, checksPerRun)
	for i := range checks {
		checks[i] = testenv.Check{Name: "c" + strconv.Itoa(i), Script: trivialCheck}
	}
	e.repo.AddProfile("bench", "", checks...)
	cfg := e.config()
	if v := os.Getenv("SIGNET_BENCH_LOCAL_RUNS"); v != "" {
		// The evidence branch already holds N runs (evidencetest's
		// synthetic branch, of another cluster and key: clusters share
		// one branch), fetched into the remote before the reconciler
		// starts.
		n, err := strconv.Atoi(v)
		require.NoError(b, err, "SIGNET_BENCH_LOCAL_RUNS")
		s, err := evidencetest.SynthesizeCached(b.Context(), n, 4)
		require.NoError(b, err)
		gittest.Git(b, e.repo.Dir, "fetch", "-q", s.Remote, evidence.DefaultBranch+":"+evidence.DefaultBranch)
		cfg.Evidence.PinnedTip = gittest.Git(b, e.repo.Dir, "rev-parse", evidence.DefaultBranch)
		b.ReportMetric(float64(s.Runs), "runs-before")
	}
	objects := []string{profileRef + "bench"}
	for i := range b.N {
		name := fmt.Sprintf("bench-%06d", i)
		e.repo.AddRequest(name, "bench")
		objects = append(objects, requestRef+name)
	}
	e.repo.Commit("bench")
	e.repo.Approve(e.keys.ApproverFile, "", objects...)

	var (
		mu        sync.Mutex
		last      = map[string]time.Time{}
		intervals []time.Duration
	)
	observe := func(ev reconciler.Event) {
		if !ev.Done {
			return
		}
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		if t, ok := last[ev.Run]; ok {
			intervals = append(intervals, now.Sub(t))
		}
		last[ev.Run] = now
	}
	r := buildBenchWith(b, e, cfg, reconciler.Options{Observer: observe})
	heapBefore := liveHeap()

	b.ResetTimer()
	for i := range b.N {
		res, err := r.ReconcileOnce(b.Context())
		require.NoError(b, err)
		name := fmt.Sprintf("bench-%06d", i)
		require.Equal(b, []string{name}, res.Admitted)
		st, err := r.Wait(b.Context(), name)
		require.NoError(b, err)
		require.Equal(b, specs.VerdictPass, st.Verdict)
	}
	b.StopTimer()
	// What the reconciler keeps of each finished run: compact, not the
	// run in full (issue 19).
	heapPerRun := (float64(liveHeap()) - float64(heapBefore)) / 1024 / float64(b.N)
	if p := os.Getenv("SIGNET_BENCH_HEAP_PROFILE"); p != "" {
		// What is live with the reconciler still open (go test's
		// -memprofile is written after it closed).
		f, err := os.Create(p)
		require.NoError(b, err)
		require.NoError(b, pprof.WriteHeapProfile(f))
		require.NoError(b, f.Close())
	}
	runtime.KeepAlive(r)
	mu.Lock()
	var sum time.Duration
	for _, d := range intervals {
		sum += d
	}
	perCheck := float64(sum.Microseconds()) / 1000 / float64(len(intervals))
	mu.Unlock()

	// The floors, measured here so that the ratio is of one machine state.
	const floorRuns = 20
	script, result := writeTrivialScript(b)
	start := time.Now()
	for range floorRuns {
		forkExec(b, script, result)
	}
	fork := float64(time.Since(start).Microseconds()) / 1000 / floorRuns
	pool, err := local.NewUIDPool(67584, 67599)
	require.NoError(b, err)
	body, err := os.ReadFile(script)
	require.NoError(b, err)
	start = time.Now()
	cgroup, _ := local.FindCgroupParent()
	require.NoError(b, local.EnsureWorkRoot(e.work, true))
	for i := range floorRuns {
		uid, err := pool.Acquire()
		require.NoError(b, err)
		rep, err := local.Run(b.Context(), local.Request{
			Script: body, ScriptName: "trivial.sh", User: &local.User{UID: uid, GID: uid}, Cgroup: cgroup, WorkRoot: e.work, Deadline: time.Now().Add(time.Minute),
			Env: map[string]string{
				specs.EnvRunID: "bench", specs.EnvCheckName: "trivial", specs.EnvCheckIndex: strconv.Itoa(i),
				specs.EnvNonce: "0123456789abcdef", specs.EnvParticipantIndex: "0", specs.EnvParticipants: "1", specs.EnvGPUCount: "0",
			},
		})
		require.NoError(b, err)
		require.True(b, rep.Termination.Exited)
		pool.Release(uid)
	}
	localRun := float64(time.Since(start).Microseconds()) / 1000 / floorRuns

	b.ReportMetric(perCheck, "ms/check")
	b.ReportMetric(fork, "forkexec-ms")
	b.ReportMetric(localRun, "localrun-ms")
	b.ReportMetric(perCheck/fork, "x-forkexec")
	b.ReportMetric((perCheck-localRun)/perCheck*100, "%-evidence")
	b.ReportMetric(heapPerRun, "heap-KiB/run")
}

// liveHeap is the live heap after a collection.
func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// noopEnv serves a spec repository (one approved, finished request) from
// the real smart-HTTP server and returns a reconciler reading it over
// HTTP, after its first (non no-op) pass, and the remote's URL.
func noopEnv(b *testing.B) (*reconciler.Reconciler, string) {
	b.Helper()
	e := newBenchEnv(b)
	e.repo.AddProfile("noop", "", testenv.Check{Name: "ok", Script: trivialCheck})
	e.repo.Commit("noop")
	e.repo.Approve(e.keys.ApproverFile, "", profileRef+"noop")
	srv := gittest.NewHTTPServer(b)
	url, bare := srv.NewRepo("spec")
	gittest.Git(b, e.repo.Dir, "push", "-q", bare, "main")
	cfg := e.config()
	cfg.Spec.URL = url
	r := buildBench(b, e, cfg)
	res, err := r.ReconcileOnce(b.Context())
	require.NoError(b, err)
	require.False(b, res.Noop)
	return r, url
}

func lsRemote(b *testing.B, url string) {
	cmd := gittest.Cmd(b, "", "ls-remote", url, "refs/heads/main")
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("git ls-remote: %v\n%s", err, out)
	}
}

// BenchmarkNoopReconcile is a reconcile with nothing changed against a
// spec remote served over smart HTTP: read the trust policy, ask the
// remote for the branch tip, compare. It reports the ratio to stock
// `git ls-remote` against the same URL (goal ≤ 1.0).
func BenchmarkNoopReconcile(b *testing.B) {
	r, url := noopEnv(b)
	for b.Loop() {
		res, err := r.ReconcileOnce(b.Context())
		if err != nil || !res.Noop {
			b.Fatalf("not a no-op: %+v %v", res, err)
		}
	}
	noop := float64(b.Elapsed().Microseconds()) / 1000 / float64(b.N)
	const floorRuns = 20
	start := time.Now()
	for range floorRuns {
		lsRemote(b, url)
	}
	ls := float64(time.Since(start).Microseconds()) / 1000 / floorRuns
	b.ReportMetric(noop, "ms/reconcile")
	b.ReportMetric(ls, "ls-remote-ms")
	b.ReportMetric(noop/ls, "x-ls-remote")
}

// BenchmarkGitLsRemote is stock `git ls-remote` against the same kind of
// remote as BenchmarkNoopReconcile.
func BenchmarkGitLsRemote(b *testing.B) {
	_, url := noopEnv(b)
	for b.Loop() {
		lsRemote(b, url)
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/ls-remote")
}
