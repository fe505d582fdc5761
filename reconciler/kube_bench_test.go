package reconciler_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"signet.dev/signet/evidence"
	"signet.dev/signet/internal/testing/kubetest"
	"signet.dev/signet/internal/testing/testenv"
	"signet.dev/signet/reconciler"
	"signet.dev/signet/reconciler/kube"
	"signet.dev/signet/specs"
)

// BenchmarkPodCheckOverhead is the cost of one pod check from the creation
// of its backend to its durable check evidence: b.N one-participant runs
// of the trivial check, one after the other on one simulated node, each
// timed from the reconciler's Started event (the intent is durable, the
// ConfigMap and pod are about to be created) to its Recorded event (the
// check evidence is pushed). It reports:
//
//   - ms/check: Started → Recorded, the mean over the runs;
//   - workload-ms: the simulated workload's own run time, measured the way
//     the test agent runs a check container: a bare `signet exec` of the
//     same script bytes as a local process in its own process group;
//   - overhead-ms: ms/check − workload-ms;
//   - the split of ms/check: pod-ms (Started → the pod seen terminal by a
//     watch: API creates, the real scheduler, the agent's init container
//     copying signet in, the workload, the status writes), poll-ms (→ the
//     backend's report: the wait for its next list of the pods, every
//     kube.DefaultPollInterval, and the reads that complete the report) and
//     evidence-ms (→ Recorded: judging, one evidence append and push);
//   - intent-ms: the append before Started (the check's intent), outside
//     ms/check, and install-ms: a bare `signet install`, the agent's init
//     container, part of pod-ms.
func BenchmarkPodCheckOverhead(b *testing.B) {
	w := startKubeWorld(b)
	e := newBenchEnv(b)
	const node = "overhead-0"
	w.kube.CreateNode(b.Context(), kubetest.NodeOptions{Name: node, GPUs: 8})
	e.repo.AddProfileFor("pod1", 1, "", gpuCheck("trivial", "pod", trivialCheck, 120))
	objects := []string{profileRef + "pod1"}
	for i := range b.N {
		name := fmt.Sprintf("pod-%06d", i)
		e.repo.AddRequestFor(name, "pod1", []string{node})
		objects = append(objects, requestRef+name)
	}
	e.repo.Commit("bench")
	e.repo.Approve(e.keys.ApproverFile, "", objects...)

	var (
		mu               sync.Mutex
		started, recordd = map[string]time.Time{}, map[string]time.Time{}
	)
	observe := func(ev reconciler.Event) {
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		switch {
		case ev.Started:
			started[ev.Run] = now
		case ev.Recorded:
			recordd[ev.Run] = now
		}
	}
	terminal := watchPodsTerminal(b, w)
	r := buildBenchWith(b, e, e.kubeConfig(w), reconciler.Options{Observer: observe})

	b.ResetTimer()
	for i := range b.N {
		res, err := r.ReconcileOnce(b.Context())
		require.NoError(b, err)
		name := fmt.Sprintf("pod-%06d", i)
		require.Equal(b, []string{name}, res.Admitted)
		st, err := r.Wait(b.Context(), name)
		require.NoError(b, err)
		require.Equal(b, specs.VerdictPass, st.Verdict)
	}
	b.StopTimer()

	ev := testenv.NewEvidence(b, e.repo.Dir, evidence.DefaultBranch, e.keys.Reconciler.Public())
	ended := terminal()
	var check, pod, poll, evid, intent time.Duration
	mu.Lock()
	for i := range b.N {
		name := fmt.Sprintf("pod-%06d", i)
		docs := readChecks(b, ev, name)
		ce, in := docs.checks["trivial"], docs.intents["trivial"]
		s, rec, term := started[name], recordd[name], ended[name]
		require.False(b, s.IsZero() || rec.IsZero() || term.IsZero(), "run %s: started %v, recorded %v, pod ended %v", name, s, rec, term)
		check += rec.Sub(s)
		pod += term.Sub(s)
		poll += ce.EndedAt.Sub(term)
		evid += rec.Sub(ce.EndedAt)
		intent += s.Sub(in.CreatedAt)
	}
	mu.Unlock()
	mean := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(b.N) }

	// The floors, measured here so that they are of the same machine state.
	workload, install := bareSignetExec(b, e)
	b.ReportMetric(mean(check), "ms/check")
	b.ReportMetric(workload, "workload-ms")
	b.ReportMetric(mean(check)-workload, "overhead-ms")
	b.ReportMetric(mean(pod), "pod-ms")
	b.ReportMetric(mean(poll), "poll-ms")
	b.ReportMetric(mean(evid), "evidence-ms")
	b.ReportMetric(mean(intent), "intent-ms")
	b.ReportMetric(install, "install-ms")
}

// watchPodsTerminal records, from now on, when each run's first pod of
// signet's is seen Succeeded or Failed (through an informer, which
// survives the API server's watch cache still warming up); the returned
// function reads the times by run.
func watchPodsTerminal(b *testing.B, w *kubeWorld) func() map[string]time.Time {
	b.Helper()
	var mu sync.Mutex
	seen := map[string]time.Time{}
	note := func(obj any) {
		now := time.Now()
		p, ok := obj.(*corev1.Pod)
		if !ok || (p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed) {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if run := p.Labels[kube.RunLabel]; seen[run].IsZero() {
			seen[run] = now
		}
	}
	factory := informers.NewSharedInformerFactoryWithOptions(w.kube.Client, 0, informers.WithNamespace(checksNamespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = kube.ManagedByLabel + "=" + kube.ManagedBy }))
	inf := factory.Core().V1().Pods().Informer()
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: note, UpdateFunc: func(_, obj any) { note(obj) }})
	require.NoError(b, err)
	stop := make(chan struct{})
	b.Cleanup(func() { close(stop) })
	factory.Start(stop)
	require.True(b, cache.WaitForCacheSync(b.Context().Done(), inf.HasSynced), "pod informer did not sync")
	return func() map[string]time.Time {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(seen)
	}
}

// readChecks reads the check intents and evidence of run.
func readChecks(b *testing.B, ev *testenv.Evidence, run string) *runDocs {
	b.Helper()
	dir := ev.RunDir(cluster, run)
	require.NotEmpty(b, dir, "run %s is not on the evidence branch", run)
	return readCheckDocs(ev, dir)
}

// bareSignetExec returns the mean milliseconds of `signet exec` running
// the trivial check's script bytes (as the repository holds them) with
// DESIGN §4's environment as a local process in its own process group, as
// the test agent runs a check container, and of `signet install`, the
// check pod's init container.
func bareSignetExec(b *testing.B, e *env) (execMs, installMs float64) {
	b.Helper()
	const runs = 20
	bin := testenv.Signet(b)
	dir := b.TempDir()
	body := []byte(testenv.Script(e.repo.Side, trivialCheck))
	script := filepath.Join(dir, "trivial.sh")
	require.NoError(b, os.WriteFile(script, body, 0o644))
	term := filepath.Join(dir, "termination-log")
	run := func(args ...string) {
		cmd := exec.Command(bin, args...)
		cmd.Env = []string{
			"PATH=" + os.Getenv("PATH"), specs.EnvRunID + "=bench", specs.EnvCheckName + "=trivial", specs.EnvCheckIndex + "=0",
			specs.EnvNonce + "=0123456789abcdef", specs.EnvParticipantIndex + "=0", specs.EnvParticipants + "=1", specs.EnvGPUCount + "=1",
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		out, err := cmd.CombinedOutput()
		require.NoError(b, err, "signet %s: %s", args[0], out)
	}
	start := time.Now()
	for range runs {
		run("exec", "--script", script, "--digest", string(specs.DigestOf(body)), "--termination-log", term, "--work-dir", dir)
	}
	execMs = float64(time.Since(start).Microseconds()) / 1000 / runs
	msg, err := os.ReadFile(term)
	require.NoError(b, err)
	require.Contains(b, string(msg), "Pass", "the bare run must produce the same result")
	start = time.Now()
	for i := range runs {
		run("install", filepath.Join(dir, "signet-"+strconv.Itoa(i)))
	}
	installMs = float64(time.Since(start).Microseconds()) / 1000 / runs
	return execMs, installMs
}

// The scale of BenchmarkConcurrentRuns100x8, the issue's: concurrentRuns
// runs of nodesPerRun nodes each. SIGNET_BENCH_RUNS=n runs n instead (a
// quick try).
const (
	concurrentRuns = 100
	nodesPerRun    = 8
)

// BenchmarkConcurrentRuns100x8 admits concurrentRuns requests of
// nodesPerRun simulated nodes each (one pod check per run, one pod per
// node, the trivial check) in one pass of a `signet reconcile` daemon and
// waits until every run is Done. The reconciler is its own process, so
// that its figures are its own and not the test's (which plays the
// kubelets and the harness): peak-rss-MiB is its VmHWM at the end,
// kube-requests its signet_kube_requests_total (from its start, recovery
// included). It reports wall-s (trigger → every run Done), runs/s,
// admit-s (trigger → every run admitted) and admitted-1st-pass (the runs
// admitted by the time the first pass after the trigger ended: all of
// them when every request was admitted in one pass). A pass admits up to
// admission.concurrency requests at once (the daemon's default).
//
// SIGNET_BENCH_BASELINE=FILE, a signet binary of another build (the one
// before concurrent admission, say), first runs the same workload on the
// same control plane and nodes with that binary as the daemon, its own
// spec repository and evidence branch, and reports its figures as
// old-runs/s, old-wall-s, old-admit-s, old-kube-requests/run and
// old-peak-rss-MiB, and speedup (runs/s over old-runs/s): the side by side
// measurement of issue 19, in one run. SIGNET_BENCH_CONCURRENCY=n sets
// admission.concurrency of this build's daemon (unset: the default), and
// SIGNET_BENCH_KUBE_QPS=n its kubernetes.apiQPS (unset: the default; on
// enough cores runs/s is that rate over the requests a run makes).
func BenchmarkConcurrentRuns100x8(b *testing.B) {
	runs := benchEnvInt(b, "SIGNET_BENCH_RUNS", concurrentRuns)
	w := startKubeWorld(b)
	nodes := createNodes(b, w, "cr", runs*nodesPerRun)
	var old *concurrentFigures
	if bin := os.Getenv("SIGNET_BENCH_BASELINE"); bin != "" {
		b.StopTimer()
		old = concurrentRunsWith(b, w, bin, nodes, runs, 1, "old", 0, 0)
		b.StartTimer()
	}
	// 0: the daemon's defaults.
	concurrency := benchEnvInt(b, "SIGNET_BENCH_CONCURRENCY", 0)
	qps := benchEnvInt(b, "SIGNET_BENCH_KUBE_QPS", 0)
	b.ResetTimer()
	cur := concurrentRunsWith(b, w, testenv.Signet(b), nodes, runs, b.N, "cr", concurrency, qps)
	b.StopTimer()
	cur.report(b, "", runs)
	if old != nil {
		old.report(b, "old-", runs)
		b.ReportMetric(cur.runsPerSec()/old.runsPerSec(), "speedup")
	}
}

// benchEnvInt is the integer in the environment variable name, def when
// it is unset.
func benchEnvInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	require.NoError(b, err, name)
	return n
}

// concurrentFigures are what one daemon measured in
// BenchmarkConcurrentRuns100x8.
type concurrentFigures struct {
	ops         int
	runs        int // per op
	wall, admit time.Duration
	byFirst     float64
	byVerb      map[string]float64
	peak        int64
}

func (f *concurrentFigures) runsPerSec() float64 {
	return float64(f.runs*f.ops) / f.wall.Seconds()
}

func (f *concurrentFigures) report(b *testing.B, prefix string, runs int) {
	var requests float64
	for _, n := range f.byVerb {
		requests += n
	}
	total := float64(runs * f.ops)
	b.Logf("%sdaemon, %d runs × %d nodes: kube requests by verb/code: %v", prefix, runs, nodesPerRun, f.byVerb)
	b.ReportMetric(f.wall.Seconds()/float64(f.ops), prefix+"wall-s")
	b.ReportMetric(f.runsPerSec(), prefix+"runs/s")
	b.ReportMetric(f.admit.Seconds()/float64(f.ops), prefix+"admit-s")
	b.ReportMetric(f.byFirst/float64(f.ops), prefix+"admitted-1st-pass")
	b.ReportMetric(float64(f.peak)/(1<<20), prefix+"peak-rss-MiB")
	b.ReportMetric(requests, prefix+"kube-requests")
	b.ReportMetric(requests/total, prefix+"kube-requests/run")
}

// concurrentRunsWith runs ops rounds of runs requests (named
// prefix-OP-NNN) over nodes with bin as the daemon, its own spec
// repository and evidence branch, and returns what it measured; the
// daemon is stopped before it returns. concurrency and qps set its
// admission.concurrency and kubernetes.apiQPS (0: the default, and a
// config an older build reads).
func concurrentRunsWith(b *testing.B, w *kubeWorld, bin string, nodes []string, runs, ops int, prefix string, concurrency, qps int) *concurrentFigures {
	e := newBenchEnv(b)
	e.repo.AddProfileFor("wide", nodesPerRun, "", gpuCheck("trivial", "pod", trivialCheck, 900))
	e.repo.Commit("profile")
	e.repo.Approve(e.keys.ApproverFile, "", profileRef+"wide")

	cfg := e.kubeConfig(w)
	cfg.Interval = 3600 // only the benchmark's triggers make passes
	cfg.Admission.Concurrency = concurrency
	cfg.Kubernetes.APIQPS = qps
	cfg.Listen, cfg.MetricsListen = freeListen(b), freeListen(b)
	cfg.TriggerTokenFile = filepath.Join(b.TempDir(), "trigger-token")
	require.NoError(b, os.WriteFile(cfg.TriggerTokenFile, []byte("bench-trigger\n"), 0o600))
	d := startReconcileDaemonWith(b, bin, cfg)
	defer d.stop()

	f := &concurrentFigures{ops: ops, runs: runs}
	for op := range ops {
		var names, objects []string
		for i := range runs {
			name := fmt.Sprintf("%s-%d-%03d", prefix, op, i)
			e.repo.AddRequestFor(name, "wide", nodes[i*nodesPerRun:(i+1)*nodesPerRun])
			names, objects = append(names, name), append(objects, requestRef+name)
		}
		e.repo.Commit(fmt.Sprintf("requests %d", op))
		e.repo.Approve(e.keys.ApproverFile, "", objects...)
		before := d.metric("signet_reconcile_duration_seconds_count")
		passedBefore := d.passedRuns()

		start := time.Now()
		d.trigger()
		admitted, firstPass := false, false
		// seen: the runs /status has listed. /status lists the runs in
		// flight and only the last 64 finished ones (recentRuns), so a
		// run it listed and lists no more was retired, which only a Done
		// run is; waiting for all runs to show Done at once never ends
		// past 64 runs.
		seen := map[string]bool{}
		for {
			// The pass count first, so that the runs read after it
			// include every run that pass admitted.
			count := d.metric("signet_reconcile_duration_seconds_count")
			st := d.status()
			phase := map[string]evidence.Phase{}
			for _, r := range st.Runs {
				phase[r.ID] = r.Phase
			}
			n, done := 0, true
			for _, name := range names {
				if phase[name] != "" {
					seen[name] = true
				}
				if seen[name] {
					n++
				}
				done = done && (phase[name] == evidence.PhaseDone || seen[name] && phase[name] == "")
			}
			if n == runs && !admitted {
				admitted = true
				f.admit += time.Since(start)
			}
			if count > before && !firstPass {
				firstPass = true
				f.byFirst += float64(n)
			}
			if done && firstPass {
				break
			}
			require.NoError(b, d.alive(), "the reconciler exited")
			time.Sleep(200 * time.Millisecond)
		}
		f.wall += time.Since(start)
		for _, r := range d.status().Runs {
			if strings.HasPrefix(r.ID, fmt.Sprintf("%s-%d-", prefix, op)) {
				require.Equal(b, specs.VerdictPass, r.Verdict, "run %s", r.ID)
			}
		}
		// The runs /status no longer lists passed too.
		require.Equal(b, float64(runs), d.passedRuns()-passedBefore, "runs that reached their run evidence with verdict Pass")
	}
	f.byVerb = d.kubeRequests()
	f.peak = d.peakRSS()
	return f
}

// createNodes creates n GPU nodes named prefix-0000 …, eight at a time.
func createNodes(b *testing.B, w *kubeWorld, prefix string, n int) []string {
	b.Helper()
	names := make([]string, n)
	work := make(chan int)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				w.kube.CreateNode(b.Context(), kubetest.NodeOptions{Name: names[i], GPUs: 8})
			}
		}()
	}
	for i := range n {
		names[i] = fmt.Sprintf("%s-%04d", prefix, i)
		work <- i
	}
	close(work)
	wg.Wait()
	require.False(b, b.Failed(), "creating nodes failed")
	return names
}

func freeListen(b *testing.B) string {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(b, err)
	defer ln.Close()
	return ln.Addr().String()
}

// reconcileDaemon is `signet reconcile --config FILE` as a process of its
// own.
type reconcileDaemon struct {
	b    *testing.B
	cmd  *exec.Cmd
	addr string
	// metrics is the metrics listener; token the trigger's bearer token.
	metrics, token string
	done           chan struct{}
	err            error
	// stop ends the daemon (TERM, then KILL after 30 s); it may be
	// called more than once.
	stop func()
}

// startReconcileDaemonWith writes cfg to a file, starts the signet binary
// bin as the daemon on it and waits until it is ready; it is stopped when
// the benchmark ends at the latest, its log shown when the benchmark
// failed.
func startReconcileDaemonWith(b *testing.B, bin string, cfg *reconciler.Config) *reconcileDaemon {
	b.Helper()
	dir := b.TempDir()
	raw, err := json.Marshal(cfg)
	require.NoError(b, err)
	file := filepath.Join(dir, "config.yaml")
	require.NoError(b, os.WriteFile(file, raw, 0o600))
	_, err = reconciler.LoadConfig(file)
	require.NoError(b, err, "the daemon's config")
	logFile, err := os.Create(filepath.Join(dir, "daemon.log"))
	require.NoError(b, err)
	token, err := os.ReadFile(cfg.TriggerTokenFile)
	require.NoError(b, err)
	d := &reconcileDaemon{b: b, addr: cfg.Listen, metrics: cfg.MetricsListen, token: strings.TrimSpace(string(token)), done: make(chan struct{})}
	d.cmd = exec.Command(bin, "reconcile", "--config", file)
	d.cmd.Stdout, d.cmd.Stderr = logFile, logFile
	require.NoError(b, d.cmd.Start())
	go func() {
		d.err = d.cmd.Wait()
		close(d.done)
	}()
	d.stop = sync.OnceFunc(func() {
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.done:
		case <-time.After(30 * time.Second):
			_ = d.cmd.Process.Kill()
			<-d.done
		}
	})
	b.Cleanup(func() {
		d.stop()
		logFile.Close()
		if b.Failed() {
			b.Logf("daemon log (tail):\n%s", tailOf(logFile.Name(), 40))
		}
		if keep := os.Getenv("SIGNET_BENCH_KEEP_LOGS"); keep != "" {
			// A copy of the daemon's log, for a look at where its time went.
			raw, err := os.ReadFile(logFile.Name())
			if err == nil {
				err = os.WriteFile(filepath.Join(keep, fmt.Sprintf("daemon-%d.log", d.cmd.Process.Pid)), raw, 0o644)
			}
			if err != nil {
				b.Logf("keeping the daemon log: %v", err)
			}
		}
	})
	require.Eventually(b, func() bool { return d.get("/readyz") == http.StatusOK }, 120*time.Second, 100*time.Millisecond, "daemon never ready:\n%s", tailOf(logFile.Name(), 40))
	return d
}

func tailOf(file string, n int) string {
	raw, _ := os.ReadFile(file)
	lines := strings.Split(strings.TrimRight(string(raw), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func (d *reconcileDaemon) alive() error {
	select {
	case <-d.done:
		return fmt.Errorf("exited: %v", d.err)
	default:
		return nil
	}
}

func (d *reconcileDaemon) get(p string) int {
	resp, err := http.Get("http://" + d.addr + p)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func (d *reconcileDaemon) body(p string) []byte {
	d.b.Helper()
	addr := d.addr
	if p == "/metrics" {
		addr = d.metrics
	}
	resp, err := http.Get("http://" + addr + p)
	require.NoError(d.b, err)
	defer resp.Body.Close()
	require.Equal(d.b, http.StatusOK, resp.StatusCode, p)
	raw, err := io.ReadAll(resp.Body)
	require.NoError(d.b, err)
	return raw
}

func (d *reconcileDaemon) trigger() {
	d.b.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+d.addr+"/reconcile", nil)
	require.NoError(d.b, err)
	req.Header.Set("Authorization", "Bearer "+d.token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(d.b, err)
	resp.Body.Close()
	require.Equal(d.b, http.StatusAccepted, resp.StatusCode)
}

func (d *reconcileDaemon) status() reconciler.Status {
	d.b.Helper()
	var st reconciler.Status
	require.NoError(d.b, json.Unmarshal(d.body("/status"), &st))
	return st
}

// samples returns the /metrics samples whose series starts with prefix,
// by series ("name{labels}").
func (d *reconcileDaemon) samples(prefix string) map[string]float64 {
	d.b.Helper()
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(d.body("/metrics")))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		require.NoError(d.b, err, line)
		out[line[:i]] = v
	}
	return out
}

// metric is the value of the unlabelled series name, 0 when absent.
func (d *reconcileDaemon) metric(name string) float64 {
	return d.samples(name + " ")[name]
}

// passedRuns is signet_runs_total{verdict="Pass"}: the runs whose run
// evidence says Pass (a metric of every build, before and after issue 19).
func (d *reconcileDaemon) passedRuns() float64 {
	return d.samples("signet_runs_total{")[`signet_runs_total{verdict="Pass"}`]
}

// kubeRequests is signet_kube_requests_total by series.
func (d *reconcileDaemon) kubeRequests() map[string]float64 {
	m := d.samples("signet_kube_requests_total{")
	require.NotEmpty(d.b, m, "the daemon exports no signet_kube_requests_total")
	out := make(map[string]float64, len(m))
	for k, v := range m {
		out[strings.TrimPrefix(k, "signet_kube_requests_total")] = v
	}
	return out
}

// peakRSS is the daemon's peak resident set (VmHWM) in bytes.
func (d *reconcileDaemon) peakRSS() int64 {
	d.b.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", d.cmd.Process.Pid))
	require.NoError(d.b, err)
	for line := range strings.SplitSeq(string(raw), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmHWM:" && f[2] == "kB" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			require.NoError(d.b, err)
			return kb << 10
		}
	}
	require.Fail(d.b, "no VmHWM in /proc/PID/status")
	return 0
}
