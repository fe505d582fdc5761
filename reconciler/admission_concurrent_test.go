package reconciler_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/evidence"
	"signet.dev/signet/internal/crash"
	"signet.dev/signet/reconciler"
	"signet.dev/signet/reconciler/backend"
	"signet.dev/signet/specs"
)

// ledgerConfig is the env's config for runs of the ledger family (the pod
// check kind) admitted concurrency at a time.
func (e *env) ledgerConfig(concurrency int) *reconciler.Config {
	cfg := e.config()
	cfg.Ceiling = reconciler.Ceiling{Registries: []string{"images.invalid"}, MaxGPUs: 8}
	cfg.Admission.Concurrency = concurrency
	return cfg
}

// buildLedger is build with the ledger family l added.
func (e *env) buildLedger(cfg *reconciler.Config, l *ledger) *reconciler.Reconciler {
	e.t.Helper()
	sec, err := reconciler.LoadSecrets(cfg)
	require.NoError(e.t, err)
	log := slog.New(slog.NewTextHandler(testWriter{e.t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	r, store, err := reconciler.Build(e.t.Context(), cfg, sec, log, nil, reconciler.Options{Now: e.now, Families: []*backend.Family{l.family()}})
	require.NoError(e.t, err)
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = r.Close(ctx)
		_ = store.Close()
	})
	require.NoError(e.t, r.Recover(e.t.Context()))
	return r
}

// pairRequests adds the profile "pair" (two participants, one pod check)
// and a request of it for each group of nodes, named prefix-0, prefix-1 …,
// commits and approves them; it returns the names.
func (e *env) pairRequests(prefix string, groups ...[]string) []string {
	e.t.Helper()
	e.repo.AddProfileFor("pair", 2, "", gpuCheck("probe", "pod", "result Pass; exit 0", 60))
	objects := []string{profileRef + "pair"}
	var names []string
	for i, g := range groups {
		name := fmt.Sprintf("%s-%d", prefix, i)
		e.repo.AddRequestFor(name, "pair", g)
		names, objects = append(names, name), append(objects, requestRef+name)
	}
	e.repo.Commit("pairs")
	e.repo.Approve(e.keys.ApproverFile, "", objects...)
	return names
}

// disjointPairs returns n groups of two nodes, no node in two groups.
func disjointPairs(n int) [][]string {
	out := make([][]string, n)
	for i := range out {
		out[i] = []string{fmt.Sprintf("n%02d", 2*i), fmt.Sprintf("n%02d", 2*i+1)}
	}
	return out
}

// TestConcurrentAdmission: a pass admits independent requests in parallel,
// never more at once than admission.concurrency (1: one after another),
// and lists them in spec order; requests that want a node in common are
// never both admitted: the one earlier in the spec runs, the others wait
// (NodesBusy) and are admitted by a later pass once it has finished.
func TestConcurrentAdmission(t *testing.T) {
	for _, bound := range []int{1, 3} {
		t.Run(fmt.Sprintf("Bound%d", bound), func(t *testing.T) {
			e := newEnv(t)
			names := e.pairRequests("ind", disjointPairs(7)...)
			l := newLedger(filepath.Join(t.TempDir(), "ledger"))
			l.snapFor = 150 * time.Millisecond
			r := e.buildLedger(e.ledgerConfig(bound), l)
			res, err := r.ReconcileOnce(t.Context())
			require.NoError(t, err)
			assert.Equal(t, names, res.Admitted, "every independent request admitted in one pass, listed in spec order")
			assert.Equal(t, bound, l.maxInFlight(), "admissions at once, with admission.concurrency %d", bound)
			for _, n := range res.Admitted {
				assert.Equal(t, specs.VerdictPass, e.wait(r, n).Verdict, "run %s", n)
			}
			double, err := l.doubleBooked()
			require.NoError(t, err)
			assert.Empty(t, double)
		})
	}

	// Requests that stop at a gate settle their conditions concurrently,
	// each its own.
	t.Run("Stalled", func(t *testing.T) {
		e := newEnv(t)
		e.repo.AddProfileFor("pair", 2, "", gpuCheck("probe", "pod", "result Pass; exit 0", 60))
		var names []string
		for i, g := range disjointPairs(8) {
			name := fmt.Sprintf("st-%d", i)
			e.repo.AddRequestFor(name, "pair", g)
			names = append(names, name)
		}
		e.repo.Commit("unapproved requests")
		e.repo.Approve(e.keys.ApproverFile, "", profileRef+"pair")
		r := e.buildLedger(e.ledgerConfig(8), newLedger(filepath.Join(t.TempDir(), "ledger")))
		res, err := r.ReconcileOnce(t.Context())
		require.NoError(t, err)
		assert.Empty(t, res.Admitted)
		for _, n := range names {
			reason, msg := readyReason(object(t, r, specs.KindRequest, n))
			assert.Equal(t, "NotApproved", reason, "request %s: %s", n, msg)
		}
	})

	t.Run("Overlapping", func(t *testing.T) {
		e := newEnv(t)
		groups := [][]string{{"x1", "x2"}, {"x2", "x3"}, {"x3", "x4"}, {"x1", "x4"}, {"x5", "x6"}}
		names := e.pairRequests("ov", groups...)
		l := newLedger(filepath.Join(t.TempDir(), "ledger"))
		l.snapFor = 100 * time.Millisecond
		l.runFor = 300 * time.Millisecond
		// The first request is the slowest to choose its nodes: the
		// ones after it must still wait for its claim.
		l.slowSelect, l.selectFor = "ov-0", 500*time.Millisecond
		r := e.buildLedger(e.ledgerConfig(4), l)

		group := map[string][]string{}
		for i, n := range names {
			group[n] = groups[i]
		}
		done := map[string]bool{}
		for pass := 0; len(done) < len(names); pass++ {
			require.Less(t, pass, 10, "every request admitted within 10 passes; admitted %v", done)
			res, err := r.ReconcileOnce(t.Context())
			require.NoError(t, err)
			// The runs admitted together must be disjoint: no node in
			// two of them.
			for i, a := range res.Admitted {
				for _, b := range res.Admitted[i+1:] {
					for _, node := range group[a] {
						assert.NotContains(t, group[b], node, "requests %s and %s share node %s and were admitted in the same pass: node %s reserved by two runs", a, b, node, node)
					}
				}
			}
			// Who gets a node two requests want is decided in spec order,
			// as when they were admitted one after another.
			switch pass {
			case 0:
				assert.Equal(t, []string{"ov-0", "ov-2", "ov-4"}, res.Admitted, "the first pass admits, in spec order, each request whose nodes no earlier one took")
			case 1:
				assert.Equal(t, []string{"ov-1", "ov-3"}, res.Admitted, "the second pass admits the requests that waited")
			}
			for _, n := range names {
				if done[n] || slices.Contains(res.Admitted, n) {
					continue
				}
				reason, msg := readyReason(object(t, r, specs.KindRequest, n))
				assert.Equal(t, "NodesBusy", reason, "request %s: %s", n, msg)
			}
			for _, n := range res.Admitted {
				require.False(t, done[n], "request %s admitted twice", n)
				done[n] = true
				assert.Equal(t, specs.VerdictPass, e.wait(r, n).Verdict, "run %s", n)
			}
		}
		double, err := l.doubleBooked()
		require.NoError(t, err)
		assert.Empty(t, double)
		left, err := l.reserved()
		require.NoError(t, err)
		assert.Empty(t, left, "every reservation released")
		e.audit()
	})
}

// TestConcurrentAdmissionCrash kills a pass that admits eight requests
// four at a time (one of them sharing a node with another) at every crash
// point of concurrent admission (crash.AdmissionPoints, at the first hit):
// some requests are admitted, some reserved without an admission record,
// some not started. A reconciler restarted on the same state and branch
// repairs the reservations no admission records, admits the rest and
// finishes every run: each request admitted exactly once (one admission
// record, one receipt), no admitted run lost, no check run twice, no node
// ever reserved by two runs, nothing left reserved, a clean audit.
func TestConcurrentAdmissionCrash(t *testing.T) {
	for _, point := range crash.AdmissionPoints {
		t.Run(point, func(t *testing.T) {
			// At the first hit: the evidence store writes the admission
			// records waiting for it together (group commit), so by the
			// third hit the first four had all landed at once; at the
			// first, the other three are mostly reserved and queued
			// behind it. Mostly: the first admission record can be
			// durable before the next group reserves (measured: two
			// attempts in five). Such a crash is one of the others'
			// "not started" cases, so the crash is made again, on a new
			// branch and ledger, until it comes amid admissions.
			var (
				e      *env
				names  []string
				cfg    *reconciler.Config
				before []string
				l      *ledger
			)
			for attempt := 1; ; attempt++ {
				e = newEnv(t)
				groups := append(disjointPairs(7), []string{"n00", "n99"})
				names = e.pairRequests("cc", groups...)
				dir := filepath.Join(t.TempDir(), "ledger")
				cfg = e.ledgerConfig(4)
				err, out := e.runPassProcess(cfg, crash.EnvVar+"="+point+":1", ledgerEnv+"="+dir)
				var ee *exec.ExitError
				require.ErrorAs(t, err, &ee, "the pass was not killed at %s:\n%s", point, out)
				ws, ok := ee.Sys().(syscall.WaitStatus)
				require.True(t, ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL, "the pass was not killed at %s (%v):\n%s", point, ee, out)
				// Killed while it pushed the next group of records in
				// process, the pass leaves git's ref lock, as a killed
				// git push does. Nothing removes it but the operator,
				// once no writer runs (the push error says so): the
				// test does, as they would.
				lock := filepath.Join(e.repo.Dir, ".git", "refs", "heads", evidence.DefaultBranch+".lock")
				if err := os.Remove(lock); err == nil {
					t.Logf("attempt %d: the crash left %s; removed", attempt, lock)
				} else {
					require.ErrorIs(t, err, os.ErrNotExist)
				}

				ev := e.evidence()
				before = nil
				for _, n := range names {
					if ev.RunDir(cluster, n) != "" {
						before = append(before, n)
					}
				}
				require.GreaterOrEqual(t, len(before), 1, "admitted before the crash")
				require.Less(t, len(before), len(names), "the crash left requests not admitted")
				l = newLedger(dir)
				left, err := l.reserved()
				require.NoError(t, err)
				orphans := 0
				for _, res := range left {
					if !slices.Contains(before, res.Run) {
						orphans++
					}
				}
				t.Logf("attempt %d: at the crash: %d of %d admitted (%v), %d node reservations without an admission record", attempt, len(before), len(names), before, orphans)
				if orphans > 0 {
					break
				}
				require.Less(t, attempt, 10, "the crash never came amid admissions (some groups reserved, their admission records not written)")
			}

			r := e.buildLedger(cfg, l)
			finished := map[string]bool{}
			for pass := 0; len(finished) < len(names); pass++ {
				require.Less(t, pass, 10, "every request finished within 10 passes; finished %v", finished)
				_, err := r.ReconcileOnce(t.Context())
				require.NoError(t, err)
				for _, n := range names {
					if st := runStatus(r, n); st != nil && !finished[n] {
						assert.NotEmpty(t, e.wait(r, n).Verdict, "run %s", n)
						finished[n] = true
					}
				}
			}

			ev := e.evidence()
			files := ev.Files()
			for _, n := range names {
				dir := ev.RunDir(cluster, n)
				require.NotEmpty(t, dir, "run %s is on the branch", n)
				assert.Equal(t, 1, countSuffix(files, "/"+n+"/"+evidence.AdmissionFile), "admissions of %s", n)
				assert.Contains(t, files, path.Join(dir, evidence.ReceiptFile), "run %s finished", n)
			}
			assert.Equal(t, len(names), countSuffix(files, "/"+evidence.AdmissionFile), "admission records")
			assert.Equal(t, len(names), countSuffix(files, "/"+evidence.ReceiptFile), "receipts")
			ran, err := l.runsExecuted()
			require.NoError(t, err)
			for k, c := range ran {
				assert.Equal(t, 1, c, "check %s run more than once", k)
			}
			double, err := l.doubleBooked()
			require.NoError(t, err)
			assert.Empty(t, double)
			// A run whose check the crash interrupted ends Error and
			// retains its nodes until an approved release; every other
			// reservation is released.
			left, err := l.reserved()
			require.NoError(t, err)
			for _, res := range left {
				st := runStatus(r, res.Run)
				require.NotNil(t, st, "node %s is reserved by %s, which is no run", res.Node.Name, res.Run)
				assert.NotEqual(t, specs.VerdictPass, st.Verdict, "node %s is still reserved by %s, which passed", res.Node.Name, res.Run)
			}
			e.audit()
		})
	}
}

// runStatus is run's status, nil when r does not know it.
func runStatus(r *reconciler.Reconciler, run string) *reconciler.RunStatus {
	for _, st := range r.Status().Runs {
		if st.ID == run {
			return &st
		}
	}
	return nil
}
