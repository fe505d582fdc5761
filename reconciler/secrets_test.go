package reconciler_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/evidence"
	"signet.dev/signet/internal/testing/gittest"
	"signet.dev/signet/internal/testing/syncbuf"
	"signet.dev/signet/internal/testing/testenv"
	"signet.dev/signet/reconciler"
	"signet.dev/signet/specs"
)

// secret returns a fresh secret with a recognizable prefix, of characters
// that no escaping changes.
func secret(t *testing.T, prefix string) string {
	t.Helper()
	b := make([]byte, 16)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return prefix + hex.EncodeToString(b)
}

// forms are the ways a secret could leak: as is, URL-escaped, and base64
// (alone, and as the basic-auth pair an HTTP client would send).
func forms(s string) []string {
	return []string{
		s, url.QueryEscape(s),
		base64.StdEncoding.EncodeToString([]byte(s)),
		base64.StdEncoding.EncodeToString([]byte("x-access-token:" + s)),
		base64.StdEncoding.EncodeToString([]byte(":" + s)),
	}
}

// hygiene is a daemon's world: a spec repository behind a token on a real
// Git HTTP server, an encrypted reconciler key, webhook secrets.
type hygiene struct {
	e                              *env
	srv                            *gittest.Server
	bareDir, specURL               string
	token, passphrase, gh, gl, tr  string
	tokenFile, keyFile, phraseFile string
	ghFile, glFile, trFile         string
}

// hygieneAddrs are a daemon's listeners: main (status, trigger), hooks
// and metrics.
type hygieneAddrs struct{ main, hooks, metrics string }

func newHygiene(t *testing.T) *hygiene {
	t.Helper()
	h := &hygiene{e: newEnv(t),
		token: secret(t, "tok"), passphrase: secret(t, "pass"), gh: secret(t, "ghs"), gl: secret(t, "gls"), tr: secret(t, "trg")}
	// The check prints its whole environment into the evidence logs: no
	// secret may reach it.
	h.e.repo.AddProfile("hyg", "", testenv.Check{Name: "env", Script: "env; result Pass; exit 0"})
	h.e.repo.AddRequest("h1", "hyg")
	h.e.repo.Commit("hyg")
	h.e.repo.Approve(h.e.keys.ApproverFile, "", "CertificationProfile/hyg", "CertificationRequest/h1")

	h.srv = gittest.NewHTTPServer(t, gittest.WithAuth(gittest.Auth{Token: h.token}))
	h.specURL, h.bareDir = h.srv.NewRepo("spec")
	withToken := strings.Replace(h.specURL, "http://", "http://x-access-token:"+h.token+"@", 1)
	gittest.Git(t, h.e.repo.Dir, "push", "-q", withToken, "main")

	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, data, 0o600))
		return p
	}
	pem, err := h.e.keys.Reconciler.MarshalPEM([]byte(h.passphrase))
	require.NoError(t, err)
	require.NotContains(t, string(pem), h.passphrase)
	h.keyFile = write("reconciler.enc.key", pem)
	h.phraseFile = write("passphrase", []byte(h.passphrase+"\n"))
	h.tokenFile = write("token", []byte(h.token+"\n"))
	h.ghFile = write("github", []byte(h.gh+"\n"))
	h.glFile = write("gitlab", []byte(h.gl+"\n"))
	h.trFile = write("trigger", []byte(h.tr+"\n"))
	return h
}

// config writes a daemon configuration that reads the spec repository and
// writes evidence with the token in tokenFile, and returns its path and
// listen addresses.
func (h *hygiene) config(t *testing.T, tokenFile string) (file string, addr hygieneAddrs) {
	return h.configURL(t, h.specURL, tokenFile)
}

// configURL is config with the spec URL given (it may carry credentials)
// and no tokenFile line when tokenFile is empty.
func (h *hygiene) configURL(t *testing.T, specURL, tokenFile string) (file string, addr hygieneAddrs) {
	t.Helper()
	free := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		defer ln.Close()
		return ln.Addr().String()
	}
	addr = hygieneAddrs{main: free(), hooks: free(), metrics: free()}
	tokenLine := ""
	if tokenFile != "" {
		tokenLine = "  tokenFile: " + tokenFile + "\n"
	}
	cfg := fmt.Sprintf(`apiVersion: %s
kind: %s
cluster: %s
spec:
  url: %s
  branch: main
%strustPolicy: %s
signingKey: %s
passphraseFile: %s
stateDir: %s
interval: 1s
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
`, specs.APIVersion, reconciler.KindConfig, cluster, specURL, tokenLine, h.e.keys.TrustFile, h.keyFile, h.phraseFile,
		filepath.Join(t.TempDir(), "state"), addr.main, addr.metrics, h.trFile, addr.hooks, h.ghFile, h.glFile)
	file = filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(file, []byte(cfg), 0o600))
	return file, addr
}

func (h *hygiene) secrets() map[string]string {
	return map[string]string{"git token": h.token, "key passphrase": h.passphrase, "github webhook secret": h.gh, "gitlab webhook token": h.gl, "trigger token": h.tr}
}

// assertNoSecret fails for every form of every secret found in text.
func assertNoSecret(t *testing.T, where, text string, secrets map[string]string) {
	t.Helper()
	for name, s := range secrets {
		for _, f := range forms(s) {
			assert.NotContains(t, text, f, "%s holds the %s", where, name)
		}
	}
}

// TestSecretHygiene runs the daemon (the built signet binary) through a
// complete reconcile with a Git token, an encrypted key and webhook
// secrets set, sends valid and invalid webhooks, and then searches every
// log line, every error, /metrics, /status, the state directory and every
// object of the repository (evidence branch included: blobs, trees,
// commits and their messages) for each secret: zero hits. A wrong token
// makes the daemon fail without printing either token.
func TestSecretHygiene(t *testing.T) {
	for _, inURL := range []bool{false, true} {
		name := "token file"
		if inURL {
			name = "credentials in the URL"
		}
		t.Run(name, func(t *testing.T) { secretHygiene(t, inURL) })
	}
}

func secretHygiene(t *testing.T, inURL bool) {
	h := newHygiene(t)
	cfgFile, addr := h.config(t, h.tokenFile)
	if inURL {
		// The token as the password of basic auth in spec.url, the form
		// people paste from their Git host.
		cfgFile, addr = h.configURL(t, strings.Replace(h.specURL, "http://", "http://x-access-token:"+h.token+"@", 1), "")
	}
	bin := testenv.Signet(t)

	var stdout, stderr syncbuf.Buffer
	cmd := exec.Command(bin, "reconcile", "--config", cfgFile)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})

	get := func(p string) (int, string) {
		base := "http://" + addr.main
		if p == "/metrics" {
			base = "http://" + addr.metrics
		}
		resp, err := http.Get(base + p)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	var status reconciler.Status
	require.Eventually(t, func() bool {
		code, body := get("/status")
		if code != http.StatusOK || json.Unmarshal([]byte(body), &status) != nil {
			return false
		}
		for _, r := range status.Runs {
			if r.ID == "h1" && r.Phase == evidence.PhaseDone {
				return true
			}
		}
		return false
	}, 3*time.Minute, 200*time.Millisecond, "run h1 never finished; daemon stderr:\n%s", &stderr)
	for _, r := range status.Runs {
		if r.ID == "h1" {
			assert.Equal(t, specs.VerdictPass, r.Verdict)
		}
	}

	post := func(p string, hdr map[string]string) (int, string) {
		body := []byte(`{"ref":"refs/heads/main"}`)
		base := "http://" + addr.hooks
		if p == "/reconcile" {
			base = "http://" + addr.main
		}
		req, err := http.NewRequest(http.MethodPost, base+p, bytes.NewReader(body))
		require.NoError(t, err)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	mac := hmac.New(sha256.New, []byte(h.gh))
	mac.Write([]byte(`{"ref":"refs/heads/main"}`))
	var answers []string
	for _, tc := range []struct {
		path string
		hdr  map[string]string
		want int
	}{
		{"/hooks/github", map[string]string{"X-GitHub-Event": "push", "X-Hub-Signature-256": "sha256=" + hex.EncodeToString(mac.Sum(nil))}, http.StatusAccepted},
		{"/hooks/github", map[string]string{"X-GitHub-Event": "push", "X-Hub-Signature-256": "sha256=" + strings.Repeat("0", 64)}, http.StatusUnauthorized},
		{"/hooks/gitlab", map[string]string{"X-Gitlab-Event": "Push Hook", "X-Gitlab-Token": h.gl}, http.StatusAccepted},
		{"/hooks/gitlab", map[string]string{"X-Gitlab-Event": "Push Hook", "X-Gitlab-Token": "not-" + h.gl[:8]}, http.StatusUnauthorized},
		{"/reconcile", map[string]string{"Authorization": "Bearer " + h.tr}, http.StatusAccepted},
		{"/reconcile", map[string]string{"Authorization": "Bearer not-" + h.tr[:8]}, http.StatusUnauthorized},
	} {
		code, body := post(tc.path, tc.hdr)
		assert.Equal(t, tc.want, code, "%s %v: %s", tc.path, tc.hdr, body)
		answers = append(answers, body)
	}
	// Let the triggered passes run (and log) before looking.
	time.Sleep(2 * time.Second)
	code, metrics := get("/metrics")
	require.Equal(t, http.StatusOK, code)
	code, statusBody := get("/status")
	require.Equal(t, http.StatusOK, code)

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-exited:
		exited <- err
		require.NoError(t, err, "daemon stderr:\n%s", &stderr)
	case <-time.After(time.Minute):
		t.Fatal("the daemon did not stop on SIGTERM")
	}

	logs := stderr.String()
	require.Contains(t, logs, `"msg":"receipt written"`, "the daemon logs JSON lines")
	require.Contains(t, logs, "webhook refused", "the invalid webhooks are logged")
	sec := h.secrets()
	for i, line := range strings.Split(logs, "\n") {
		assertNoSecret(t, fmt.Sprintf("log line %d", i+1), line, sec)
	}
	assertNoSecret(t, "stdout", stdout.String(), sec)
	assertNoSecret(t, "/metrics", metrics, sec)
	assertNoSecret(t, "/status", statusBody, sec)
	assertNoSecret(t, "webhook answers", strings.Join(answers, "\n"), sec)
	h.assertRepoClean(t, sec)
	skip := []string{}
	if inURL {
		skip = append(skip, cfgFile) // holds the token by the user's choice
	}
	h.assertDirClean(t, filepath.Dir(filepath.Dir(cfgFile)), sec, skip...)

	// The evidence logs hold the check's environment: prove it is there,
	// so that the search above looked at something.
	ev := testenv.NewEvidence(t, h.bareDir, "signet/evidence", h.e.keys.Reconciler.Public())
	run := ev.RunDir(cluster, "h1")
	require.NotEmpty(t, run)
	found := false
	for _, f := range ev.Under(run + "/logs") {
		found = found || strings.Contains(string(ev.Read(f)), "SIGNET_RUN_ID=h1")
	}
	assert.True(t, found, "the check's environment is in its evidence log")
}

// TestSecretHygieneWrongToken: a remote that refuses the token makes the
// daemon fail, and neither the wrong token nor the right one is printed.
func TestSecretHygieneWrongToken(t *testing.T) {
	h := newHygiene(t)
	wrong := secret(t, "wrong")
	wrongFile := filepath.Join(t.TempDir(), "wrong-token")
	require.NoError(t, os.WriteFile(wrongFile, []byte(wrong), 0o600))
	cfgFile, _ := h.config(t, wrongFile)

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, testenv.Signet(t), "reconcile", "--config", cfgFile).CombinedOutput()
	require.Error(t, err, "the daemon must not start against a remote that refuses its token:\n%s", out)
	assert.Contains(t, string(out), "refused the credentials")
	sec := h.secrets()
	sec["wrong token"] = wrong
	assertNoSecret(t, "output", string(out), sec)
	assert.Positive(t, h.srv.Denied())

	// The spec source's own error, in process.
	src, err := reconciler.OpenGitSource(filepath.Join(t.TempDir(), "spec.git"), h.specURL, "main", reconciler.SourceAuth{Token: wrong})
	require.NoError(t, err)
	_, err = src.Revision(t.Context())
	require.Error(t, err)
	assertNoSecret(t, "spec source error", err.Error(), sec)
	src, err = reconciler.OpenGitSource(filepath.Join(t.TempDir(), "spec.git"), h.specURL, "main", reconciler.SourceAuth{Username: "x-access-token", Token: wrong})
	require.NoError(t, err)
	_, err = src.Revision(t.Context())
	require.Error(t, err)
	assertNoSecret(t, "spec source error (basic auth)", err.Error(), sec)
}

// assertRepoClean reads every object of the server's repository (all
// refs, the evidence branch included) with stock git and searches it.
func (h *hygiene) assertRepoClean(t *testing.T, sec map[string]string) {
	t.Helper()
	objs := gittest.Git(t, h.bareDir, "rev-list", "--objects", "--all")
	var ids []string
	for _, line := range strings.Split(objs, "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			ids = append(ids, f[0])
		}
	}
	require.NotEmpty(t, ids)
	cmd := gittest.Cmd(t, h.bareDir, "cat-file", "--batch")
	cmd.Stdin = strings.NewReader(strings.Join(ids, "\n") + "\n")
	out, err := cmd.Output()
	require.NoError(t, err)
	require.Contains(t, string(out), "signet: "+cluster+"/h1 admitted", "commit messages are part of the search")
	assertNoSecret(t, fmt.Sprintf("the repository's %d objects", len(ids)), string(out), sec)
	assertNoSecret(t, "the evidence branch's log", gittest.Git(t, h.bareDir, "log", "--format=%H %an %ae %B", "signet/evidence"), sec)
}

// assertDirClean searches every file under dir (the config, the state
// directory with its mirrors and remembered tips) except the files that
// hold the secrets on purpose (and also).
func (h *hygiene) assertDirClean(t *testing.T, dir string, sec map[string]string, also ...string) {
	t.Helper()
	skip := map[string]bool{h.tokenFile: true, h.phraseFile: true, h.ghFile: true, h.glFile: true, h.trFile: true}
	for _, f := range also {
		skip[f] = true
	}
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || skip[p] {
			return nil
		}
		b, err := os.ReadFile(p)
		if err == nil {
			assertNoSecret(t, p, string(b), sec)
		}
		return nil
	})
}

// TestGitSourceURLCredentials: credentials in a spec URL authenticate but
// are never written into the mirror's config, and a mirror opened again
// with another URL follows the new one.
func TestGitSourceURLCredentials(t *testing.T) {
	tok := secret(t, "tok")
	srv := gittest.NewHTTPServer(t, gittest.WithAuth(gittest.Auth{Token: tok}))
	withToken := func(u string) string { return strings.Replace(u, "http://", "http://x-access-token:"+tok+"@", 1) }
	work := t.TempDir()
	gittest.Git(t, work, "init", "-q", "-b", "main")
	var revs []string
	var urls []string
	for _, name := range []string{"one", "two"} {
		u, _ := srv.NewRepo(name)
		gittest.Git(t, work, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-q", "--allow-empty", "-m", name)
		gittest.Git(t, work, "push", "-q", withToken(u), "main")
		revs = append(revs, gittest.Git(t, work, "rev-parse", "HEAD"))
		urls = append(urls, u)
	}
	mirror := filepath.Join(t.TempDir(), "spec.git")
	for i, u := range urls {
		src, err := reconciler.OpenGitSource(mirror, withToken(u), "main", reconciler.SourceAuth{})
		require.NoError(t, err)
		rev, err := src.Revision(t.Context())
		require.NoError(t, err)
		assert.Equal(t, revs[i], rev, "the mirror follows %s", u)
		_, err = src.Checkout(t.Context(), rev)
		require.NoError(t, err)
		cfg, err := os.ReadFile(filepath.Join(mirror, "config"))
		require.NoError(t, err)
		assert.NotContains(t, string(cfg), tok)
		assert.Contains(t, string(cfg), u)
	}
}
