package main

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/evidence"
	"signet.dev/signet/internal/testing/syncbuf"
	"signet.dev/signet/internal/testing/testenv"
	"signet.dev/signet/reconciler"
	"signet.dev/signet/specs"
)

// daemon is one `signet reconcile --config FILE` subprocess.
type daemon struct {
	t    *testing.T
	cmd  *exec.Cmd
	addr string
	// hooks and metrics are the webhook and metrics listeners, when set.
	hooks, metrics string
	out            *syncbuf.Buffer
	done           chan error
}

func startDaemon(t *testing.T, config, addr string) *daemon {
	t.Helper()
	d := &daemon{t: t, addr: addr, out: &syncbuf.Buffer{}, done: make(chan error, 1)}
	d.cmd = exec.Command(testenv.Signet(t), "reconcile", "--config", config)
	d.cmd.Stdout, d.cmd.Stderr = d.out, d.out
	require.NoError(t, d.cmd.Start())
	go func() { d.done <- d.cmd.Wait() }()
	t.Cleanup(func() {
		if d.cmd.ProcessState == nil {
			_ = d.cmd.Process.Kill()
			<-d.done
		}
		if t.Failed() {
			t.Logf("daemon output:\n%s", d.out.String())
		}
	})
	require.Eventually(t, func() bool { return d.get("/readyz") == http.StatusOK }, 60*time.Second, 50*time.Millisecond, "daemon never ready:\n%s", d.out.String())
	return d
}

func (d *daemon) get(p string) int {
	resp, err := http.Get("http://" + d.addr + p)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func (d *daemon) body(p string) string {
	d.t.Helper()
	addr := d.addr
	if p == "/metrics" {
		addr = d.metrics
	}
	resp, err := http.Get("http://" + addr + p)
	require.NoError(d.t, err)
	defer resp.Body.Close()
	require.Equal(d.t, http.StatusOK, resp.StatusCode, p)
	b, err := io.ReadAll(resp.Body)
	require.NoError(d.t, err)
	return string(b)
}

func (d *daemon) status() reconciler.Status {
	d.t.Helper()
	var st reconciler.Status
	require.NoError(d.t, json.Unmarshal([]byte(d.body("/status")), &st))
	return st
}

// runDone reports whether /status shows run id in phase Done.
func (d *daemon) runDone(id string) bool {
	for _, r := range d.status().Runs {
		if r.ID == id && r.Phase == evidence.PhaseDone {
			return true
		}
	}
	return false
}

func (d *daemon) admitted(id string) bool {
	for _, r := range d.status().Runs {
		if r.ID == id {
			return true
		}
	}
	return false
}

func (d *daemon) post(p string, header map[string]string, body []byte) int {
	d.t.Helper()
	addr := d.addr
	if strings.HasPrefix(p, "/hooks/") {
		addr = d.hooks
	}
	req, err := http.NewRequestWithContext(d.t.Context(), http.MethodPost, "http://"+addr+p, bytes.NewReader(body))
	require.NoError(d.t, err)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(d.t, err)
	resp.Body.Close()
	return resp.StatusCode
}

func (d *daemon) terminate() error {
	d.t.Helper()
	require.NoError(d.t, d.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-d.done:
		return err
	case <-time.After(60 * time.Second):
		require.Fail(d.t, "daemon did not stop on SIGTERM")
		return nil
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().String()
}

// TestReconcileDaemon runs `signet reconcile --config FILE` as a process:
// health, readiness, metrics and status; GitHub and GitLab webhooks
// (valid ones trigger a reconcile, invalid ones are refused and trigger
// nothing); `signet reconcile --now` with --config and with --addr and
// --token-file; SIGTERM stops it with exit 0
// mid-check, and a restart finishes that run (the interrupted check is
// recorded, never re-run).
func TestReconcileDaemon(t *testing.T) {
	keys := testenv.NewKeys(t)
	repo := testenv.NewRepo(t)
	repo.AddProfile("quick", "", testenv.Check{Name: "quick", Script: "result Pass; exit 0"})
	repo.AddProfile("slow", "", testenv.Check{Name: "slow", Script: "sleep 5; result Pass; exit 0"})
	approve := func(req, profile string) {
		repo.AddRequest(req, profile)
		repo.Commit(req)
		repo.Approve(keys.ApproverFile, "", "CertificationProfile/quick", "CertificationProfile/slow", "CertificationRequest/"+req)
	}
	approve("first", "quick")

	dir := t.TempDir()
	secret := filepath.Join(dir, "github-secret")
	require.NoError(t, os.WriteFile(secret, []byte("gh-hook-secret\n"), 0o600))
	glToken := filepath.Join(dir, "gitlab-token")
	require.NoError(t, os.WriteFile(glToken, []byte("gl-hook-token\n"), 0o600))
	triggerToken := filepath.Join(dir, "trigger-token")
	require.NoError(t, os.WriteFile(triggerToken, []byte("trigger-token\n"), 0o600))
	addr, hooks, metrics := freeAddr(t), freeAddr(t), freeAddr(t)
	config := filepath.Join(dir, "config.yaml")
	require.NoError(t, os.WriteFile(config, fmt.Appendf(nil, `apiVersion: signet.dev/v1alpha1
kind: ReconcilerConfig
cluster: daemon
spec:
  url: %s
  branch: main
trustPolicy: %s
signingKey: %s
stateDir: %s
interval: 3600s
listen: %s
metricsListen: %s
triggerTokenFile: %s
webhook:
  listen: %s
  githubSecretFile: %s
  gitlabTokenFile: %s
backends:
  local:
    enabled: true
    grace: 1s
    workRoot: %s
`, repo.Dir, keys.TrustFile, keys.ReconcilerFile, filepath.Join(dir, "state"), addr, metrics, triggerToken, hooks, secret, glToken, filepath.Join(testenv.WorldDir(t), "work")), 0o600))

	d := startDaemon(t, config, addr)
	d.hooks, d.metrics = hooks, metrics
	assert.Equal(t, http.StatusOK, d.get("/healthz"))
	require.Eventually(t, func() bool { return d.runDone("first") }, 60*time.Second, 100*time.Millisecond, "the first request never finished")

	t.Run("metrics", func(t *testing.T) {
		m := d.body("/metrics")
		for _, name := range []string{"signet_runs_total", "signet_checks_total", "signet_reconcile_duration_seconds", "signet_reconcile_errors_total"} {
			assert.Contains(t, m, name)
		}
		assert.Contains(t, m, `signet_runs_total{verdict="Pass"} 1`)
		assert.Contains(t, m, `signet_checks_total{outcome="Pass"} 1`)
	})
	t.Run("status", func(t *testing.T) {
		st := d.status()
		assert.Equal(t, "daemon", st.Cluster)
		require.NotEmpty(t, st.Conditions)
		assert.Equal(t, "Ready", st.Conditions[0].Type)
		var found bool
		for _, o := range st.Objects {
			if o.Kind == specs.KindRequest && o.Name == "first" {
				found = true
				require.NotEmpty(t, o.Conditions)
				assert.Equal(t, "first", o.Run)
			}
		}
		assert.True(t, found, "request first is in /status")
	})

	// Let the pass that follows a finished run happen; from now on only
	// triggers make passes (the poll interval is an hour).
	time.Sleep(500 * time.Millisecond)

	githubBody := []byte(`{"ref":"refs/heads/main"}`)
	mac := hmac.New(sha256.New, []byte("gh-hook-secret"))
	mac.Write(githubBody)
	goodSig := "sha256=" + hex.EncodeToString(mac.Sum(nil))

	t.Run("invalid webhooks are refused and trigger nothing", func(t *testing.T) {
		approve("second", "quick")
		assert.Equal(t, http.StatusUnauthorized, d.post("/hooks/github", map[string]string{"X-GitHub-Event": "push", "X-Hub-Signature-256": "sha256=" + strings.Repeat("0", 64)}, githubBody))
		assert.Equal(t, http.StatusUnauthorized, d.post("/hooks/github", map[string]string{"X-GitHub-Event": "push"}, githubBody))
		assert.Equal(t, http.StatusUnauthorized, d.post("/hooks/github", map[string]string{"X-GitHub-Event": "push", "X-Hub-Signature-256": goodSig}, append(githubBody, ' ')))
		assert.Equal(t, http.StatusUnauthorized, d.post("/hooks/gitlab", map[string]string{"X-Gitlab-Event": "Push Hook", "X-Gitlab-Token": "wrong"}, []byte(`{}`)))
		time.Sleep(1500 * time.Millisecond)
		assert.False(t, d.admitted("second"), "a refused webhook triggered a reconcile")
	})
	t.Run("github webhook", func(t *testing.T) {
		assert.Equal(t, http.StatusAccepted, d.post("/hooks/github", map[string]string{"X-GitHub-Event": "push", "X-Hub-Signature-256": goodSig}, githubBody))
		require.Eventually(t, func() bool { return d.runDone("second") }, 60*time.Second, 100*time.Millisecond)
	})
	t.Run("gitlab webhook", func(t *testing.T) {
		time.Sleep(500 * time.Millisecond)
		approve("third", "quick")
		assert.Equal(t, http.StatusAccepted, d.post("/hooks/gitlab", map[string]string{"X-Gitlab-Event": "Push Hook", "X-Gitlab-Token": "gl-hook-token"}, []byte(`{}`)))
		require.Eventually(t, func() bool { return d.runDone("third") }, 60*time.Second, 100*time.Millisecond)
	})
	t.Run("reconcile --now", func(t *testing.T) {
		time.Sleep(500 * time.Millisecond)
		approve("fourth", "quick")
		time.Sleep(1000 * time.Millisecond)
		require.False(t, d.admitted("fourth"))
		out, err := exec.CommandContext(t.Context(), testenv.Signet(t), "reconcile", "--now", "--config", config).CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.Eventually(t, func() bool { return d.runDone("fourth") }, 60*time.Second, 100*time.Millisecond)
	})

	t.Run("SIGTERM mid-check, restart finishes the run", func(t *testing.T) {
		approve("fifth", "slow")
		out, err := exec.CommandContext(t.Context(), testenv.Signet(t), "reconcile", "--now", "--addr", addr, "--token-file", triggerToken).CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.Eventually(t, func() bool { return contains(repo.Effects(), "fifth/slow") }, 60*time.Second, 50*time.Millisecond, "the slow check never started")
		stopped := time.Now()
		require.NoError(t, d.terminate(), "SIGTERM must stop the daemon with exit 0:\n%s", d.out.String())
		assert.Less(t, time.Since(stopped), 30*time.Second)

		ev := testenv.NewEvidence(t, repo.Dir, evidence.DefaultBranch, keys.Reconciler.Public())
		runDir := ev.RunDir("daemon", "fifth")
		require.NotEmpty(t, runDir)
		files := ev.Files()
		require.NotContains(t, files, path.Join(runDir, evidence.ReceiptFile), "the run was stopped unfinished")

		d2 := startDaemon(t, config, addr)
		require.Eventually(t, func() bool { return d2.runDone("fifth") }, 60*time.Second, 100*time.Millisecond, "the restarted daemon never finished the run")
		var ce evidence.CheckEvidence
		ev.Document(evidence.CheckPath(runDir, 0, "slow"), evidence.PredicateCheck, &ce)
		assert.Equal(t, specs.VerdictError, ce.Verdict)
		assert.Contains(t, ce.Reason, "interrupted")
		var rc evidence.Receipt
		ev.Document(path.Join(runDir, evidence.ReceiptFile), evidence.PredicateReceipt, &rc)
		assert.Equal(t, int64(5), rc.Sequence)
		n := 0
		for _, e := range repo.Effects() {
			if e == "fifth/slow" {
				n++
			}
		}
		assert.Equal(t, 1, n, "the interrupted check was run again")
		require.NoError(t, d2.terminate())
	})
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// TestFinding7NowSendsTriggerToken: `signet reconcile --now` sends the
// trigger's bearer token (from --token-file, or the config's
// triggerTokenFile), and without one refuses before connecting.
func TestFinding7NowSendsTriggerToken(t *testing.T) {
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		got = append(got, req.Method+" "+req.URL.Path+" "+req.Header.Get("Authorization"))
		mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "trigger-token")
	require.NoError(t, os.WriteFile(tokenFile, []byte("the-trigger-token\n"), 0o600))
	config := filepath.Join(dir, "config.yaml")
	require.NoError(t, os.WriteFile(config, fmt.Appendf(nil, `apiVersion: signet.dev/v1alpha1
kind: ReconcilerConfig
cluster: c
spec: {url: /nowhere}
trustPolicy: /t
signingKey: /k
stateDir: /s
listen: %s
triggerTokenFile: %s
backends: {local: {enabled: false}}
`, addr, tokenFile), 0o600))

	out, err := exec.CommandContext(t.Context(), testenv.Signet(t), "reconcile", "--now", "--addr", addr).CombinedOutput()
	require.Error(t, err, "--now without a token: %s", out)
	assert.Contains(t, string(out), "--now needs the trigger token")
	mu.Lock()
	assert.Empty(t, got, "--now without a token sent a request")
	mu.Unlock()

	for _, args := range [][]string{{"--addr", addr, "--token-file", tokenFile}, {"--config", config}} {
		out, err := exec.CommandContext(t.Context(), testenv.Signet(t), append([]string{"reconcile", "--now"}, args...)...).CombinedOutput()
		require.NoError(t, err, "%v: %s", args, out)
	}
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"POST /reconcile Bearer the-trigger-token", "POST /reconcile Bearer the-trigger-token"}, got)
}

// TestWaitFindsItsOwnPass: `reconcile --wait` for pass 3 prints pass 3
// even when passes 4 and 5 ended before it looked (a pass that admits a
// run wakes another at once, and the run's end a third): the daemon's
// recent passes hold it. A daemon that lists no recent passes answers with
// its last pass once it is numbered 3 or more; none while it is not.
func TestWaitFindsItsOwnPass(t *testing.T) {
	st := &reconciler.Status{
		LastPass: &reconciler.PassStatus{Number: 5, Noop: true},
		Passes:   []reconciler.PassStatus{{Number: 2}, {Number: 3, Admitted: []string{"b-waits"}}, {Number: 4}, {Number: 5, Noop: true}},
	}
	got := passOf(st, 3)
	require.NotNil(t, got)
	assert.Equal(t, int64(3), got.Number, "--wait printed another pass than its own")
	assert.Equal(t, []string{"b-waits"}, got.Admitted)
	assert.Nil(t, passOf(st, 6), "a pass that has not ended")

	old := &reconciler.Status{LastPass: &reconciler.PassStatus{Number: 5}}
	assert.Equal(t, int64(5), passOf(old, 3).Number)
	assert.Nil(t, passOf(&reconciler.Status{LastPass: &reconciler.PassStatus{Number: 2}}, 3))
	assert.Nil(t, passOf(&reconciler.Status{}, 3))
}
