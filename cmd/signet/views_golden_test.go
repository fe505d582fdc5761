package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"signet.dev/signet/internal/testing/evidencetest"
	"signet.dev/signet/internal/testing/testenv"
	"signet.dev/signet/reconciler"
	"signet.dev/signet/specs"
)

// reasonChecks are the checks of profile "reasons": each ends, with the
// real local backend, in one of the reasons of specs.Evaluate's exit
// matrix (docs/design.md §4). The canceled reason and the skipped check
// after it come from the second run, "stopped".
var reasonChecks = []testenv.Check{
	{Name: "pass", Script: `printf '{"run":"%s","check":"%s","nonce":"%s","verdict":"Pass","summary":"8 GPUs healthy","measurements":{"gpus":8,"eccErrors":0}}' "$SIGNET_RUN_ID" "$SIGNET_CHECK_NAME" "$SIGNET_NONCE" > "$SIGNET_RESULT_FILE"; echo "dcgmi diag: all tests PASS"; exit 0`},
	{Name: "fail", Script: `for i in 1 2 3 4 5 6 7 8 9 10 11; do echo "ring $i ok" >&2; done; echo "NVLink 3 degraded" >&2; SUMMARY='busbw 180.2 GB/s below 400 GB/s' result Fail; exit 1`},
	{Name: "inconclusive", Script: `echo "nvidia-smi: not found" >&2; SUMMARY='no GPU visible' result Inconclusive; exit 2`},
	{Name: "no-result", Script: `echo "dcgmi: cannot open /dev/nvidia3" >&2; exit 0`},
	{Name: "malformed", Script: `echo 'not json' > "$SIGNET_RESULT_FILE"; exit 0`},
	{Name: "stale", Script: `NONCE=stale-nonce-of-another-run result Pass; exit 0`},
	{Name: "contradiction", Script: `result Pass; exit 1`},
	{Name: "exit-code", Script: `echo "segfault in the kernel module" >&2; exit 7`},
	{Name: "signal", Script: `kill -KILL $$`},
	{Name: "deadline", Script: `echo "waiting for NCCL" >&2; exec sleep 60`, Deadline: 1},
}

// views is the evidence branch the golden tests of the result views
// read: run "reasons" (cluster alpha, every reason kind but cancel),
// written by `signet run` itself, and run "stopped" (cluster gamma),
// canceled during its first check by an approved cancel, so its second
// check is skipped.
type views struct {
	Repo, Trust string
	// RunText and RunJSON are what `signet run` printed for "reasons".
	RunText, RunJSON string
	// RunCode is `signet run`'s exit status.
	RunCode int
}

// buildViews writes the views branch (about 15 s: the deadline and
// cancel checks wait on the local backend's deadline and grace).
func buildViews(t *testing.T) *views {
	keys := testenv.NewKeys(t)
	repo := testenv.NewRepo(t)
	y, err := os.ReadFile(keys.TrustFile)
	require.NoError(t, err)
	for id, owner := range map[string]string{keys.Reconciler.KeyID(): "reconciler", keys.Approver.KeyID(): "alice", keys.Approver2.KeyID(): "bob"} {
		y = bytes.Replace(y, []byte("id: "+id+"\n"), []byte("id: "+id+"\n    owner: "+owner+"\n"), 1)
	}
	require.NoError(t, os.WriteFile(keys.TrustFile, y, 0o600))

	repo.AddProfile("reasons", "", reasonChecks...)
	repo.AddProfile("long", "", testenv.Check{Name: "wait", Script: "echo started; exec sleep 60", Deadline: 120}, testenv.Check{Name: "after", Script: "result Pass; exit 0"})
	repo.AddRequestFor("reasons", "reasons", []string{"localhost"})
	repo.AddRequestFor("stopped", "long", []string{"localhost"})
	repo.Commit("specs")
	repo.Approve(keys.ApproverFile, "", "CertificationProfile/reasons", "CertificationProfile/long", "CertificationRequest/reasons", "CertificationRequest/stopped")
	v := &views{Repo: repo.Dir, Trust: keys.TrustFile}
	state := filepath.Join(t.TempDir(), "state")

	// `signet run`, as a process: its text, then (the request already
	// ran) its JSON of the same run.
	signetRun := func(args ...string) (string, int) {
		cmd := exec.CommandContext(t.Context(), testenv.Signet(t), append([]string{"run", "--repo", repo.Dir, "--request", "reasons",
			"--trust", keys.TrustFile, "--key", keys.ReconcilerFile, "--cluster", "alpha", "--state-dir", state}, args...)...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return stdout.String(), ee.ExitCode()
		}
		require.NoError(t, err, stderr.String())
		return stdout.String(), 0
	}
	v.RunText, v.RunCode = signetRun()
	var code int
	v.RunJSON, code = signetRun("-o", "json")
	require.Equal(t, v.RunCode, code)

	// The canceled run, through the reconciler in this process: the cancel
	// is approved while its first check runs.
	cfg := &reconciler.Config{
		TypeMeta:    specs.TypeMeta{APIVersion: specs.APIVersion, Kind: reconciler.KindConfig},
		Cluster:     "gamma",
		Spec:        reconciler.SourceConfig{URL: repo.Dir, Branch: "main"},
		Evidence:    reconciler.EvidenceConfig{SourceConfig: reconciler.SourceConfig{URL: repo.Dir, Branch: evidencetest.Branch}},
		TrustPolicy: keys.TrustFile, SigningKey: keys.ReconcilerFile,
		StateDir: filepath.Join(state, "gamma"), Interval: 1,
		Backends: reconciler.BackendsConfig{Local: reconciler.LocalConfig{Enabled: true, Grace: 1, WorkRoot: filepath.Join(testenv.WorldDir(t), "work")}},
	}
	sec, err := reconciler.LoadSecrets(cfg)
	require.NoError(t, err)
	ctx := t.Context()
	r, store, err := reconciler.Build(ctx, cfg, sec, slog.New(slog.NewTextHandler(io.Discard, nil)), nil, reconciler.Options{Only: "stopped", AcceptCurrentTip: true})
	require.NoError(t, err)
	defer store.Close()
	defer func() {
		c, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = r.Close(c)
	}()
	require.NoError(t, r.Recover(ctx))
	r.Start(ctx)
	require.Eventually(t, func() bool { return slices.Contains(repo.Effects(), "stopped/wait") }, 60*time.Second, 50*time.Millisecond, "check wait never started: %+v", r.Status())
	repo.AddRequestFor("stopped", "long", []string{"localhost"}, "cancel: true")
	repo.Commit("cancel stopped")
	repo.Approve(keys.ApproverFile, "cancel", "CertificationRequest/stopped")
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	st, err := r.Wait(wctx, "stopped")
	require.NoError(t, err)
	require.Equal(t, specs.VerdictCanceled, st.Verdict)
	return v
}

// normalizers replace, in the result views, exactly what differs from one
// test run or machine to the next: times (stated, committed, condition
// transition times, the date directories of run paths), durations (check
// times are whole seconds, so a duration line is there or not by chance:
// it is dropped), digests, key ids and approval file names (documents
// hold times, keys are generated per test), commit ids, the run's nonce,
// the node's name and UID (the local family names the node by this
// machine's hostname and machine id), temporary directories, and the
// padding of table columns (it follows the host name's length).
// Everything else (reasons, verdicts, summaries, measurements, log text,
// which lines and fields are printed) is compared byte for byte.
var normalizers = []struct {
	re *regexp.Regexp
	to string
}{
	{regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)`), "TIME"},
	{regexp.MustCompile(`runs/([a-z0-9-]+)/\d{4}/\d\d/\d\d/`), "runs/$1/YYYY/MM/DD/"},
	{regexp.MustCompile(`(?m)^   duration: .*\n`), ""},
	{regexp.MustCompile(`,\n\s*"durationMs": \d+`), ""},
	{regexp.MustCompile(`-[0-9a-f]{16}\.json`), "-PAYLOAD.json"},
	{regexp.MustCompile(`[0-9a-f]{64}`), "HEX64"},
	{regexp.MustCompile(`\b[0-9a-f]{40}\b`), "COMMIT"},
	{regexp.MustCompile(`\b[0-9a-f]{32}\b`), "HEX32"}, // nonce, node UID
	{regexp.MustCompile(`\b[0-9a-f]{12}\b`), "SHORT"},
	{regexp.MustCompile(`(\S) {2,}`), "$1  "},
}

// normalize applies normalizers to s after naming the temporary
// directories DIR and this machine's host name HOST.
func normalize(t *testing.T, s string, dirs ...string) string {
	t.Helper()
	for _, d := range dirs {
		s = strings.ReplaceAll(s, d, "DIR")
	}
	host, err := os.Hostname()
	require.NoError(t, err)
	s = regexp.MustCompile(`\b`+regexp.QuoteMeta(host)+`\b`).ReplaceAllString(s, "HOST")
	for _, n := range normalizers {
		s = n.re.ReplaceAllString(s, n.to)
	}
	return s
}

// TestResultViewsGolden: the text and JSON of signet run, verify, status
// and logs over a branch the real reconciler wrote with every reason kind
// (exit codes in and out of the contract, a missing, malformed, stale and
// contradicting result, a signal, the deadline, a cancel and the check it
// skipped), compared with testdata/views-*.golden after normalize. Run
// with -update to rewrite them. "never started" is the one reason the
// local backend cannot be made to write on demand; TestOutcomesGolden
// holds its text from specs.Evaluate.
func TestResultViewsGolden(t *testing.T) {
	v := buildViews(t)
	assert.Equal(t, exitRunFail, v.RunCode, "signet run exits with the run's verdict, Fail")
	golden(t, "views-run.golden", normalize(t, v.RunText, v.Repo))
	golden(t, "views-run.json.golden", normalize(t, v.RunJSON, v.Repo))
	// The daemon's GET /status answer, as reconciler.Status encodes it,
	// for the CERTIFIED UNTIL column: this host certified in cluster
	// alpha (reconciler.TestStatusCertified covers how a daemon fills it).
	host, err := os.Hostname()
	require.NoError(t, err)
	daemon := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(reconciler.Status{Cluster: "alpha", Conditions: []metav1.Condition{}, Objects: []reconciler.ObjectStatus{}, Runs: []reconciler.RunStatus{},
			Certified: []reconciler.CertifiedNode{{Node: host, Profile: "reasons", Run: "earlier", Until: time.Date(2027, 1, 2, 3, 4, 5, 0, time.UTC)}}})
	}))
	defer daemon.Close()
	for _, tc := range []struct {
		golden string
		args   []string
		code   int
	}{
		{"views-verify-reasons.golden", []string{"verify", "reasons", "--repo", v.Repo, "--trust", v.Trust}, 0},
		{"views-verify-reasons.json.golden", []string{"verify", "reasons", "--repo", v.Repo, "--trust", v.Trust, "-o", "json"}, 0},
		{"views-verify-stopped.golden", []string{"verify", "stopped", "--repo", v.Repo, "--trust", v.Trust}, 0},
		{"views-verify-stopped.json.golden", []string{"verify", "stopped", "--repo", v.Repo, "--trust", v.Trust, "-o", "json"}, 0},
		{"views-status.golden", []string{"status", "--repo", v.Repo}, 0},
		{"views-status.json.golden", []string{"status", "--repo", v.Repo, "-o", "json"}, 0},
		{"views-status-reconciler.golden", []string{"status", "--repo", v.Repo, "--reconciler", daemon.URL}, 0},
		{"views-status-reconciler.json.golden", []string{"status", "--repo", v.Repo, "--reconciler", daemon.URL, "-o", "json"}, 0},
		{"views-logs.golden", []string{"logs", "reasons", "--repo", v.Repo, "--trust", v.Trust, "--stream", "stderr"}, 0},
		{"views-logs.json.golden", []string{"logs", "stopped", "--repo", v.Repo, "--trust", v.Trust, "-o", "json"}, 0},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			out, stderr, code := runSigningCLI(t, tc.args...)
			require.Equal(t, tc.code, code, out+stderr)
			golden(t, tc.golden, normalize(t, out, v.Repo))
		})
	}
}
