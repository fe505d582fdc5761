package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/internal/testing/testenv"
	"signet.dev/signet/report"
)

// TestReconcileDaemonReport: with report.dir, the real daemon writes the
// report of its evidence branch and serves it read-only at /report/ on
// its status listener, rebuilt after a later run; it serves no file
// outside the directory (by "..", encoded or not, or by a symbolic link
// in it) nor its lock file, lists no directory, and takes no write.
func TestReconcileDaemonReport(t *testing.T) {
	keys := testenv.NewKeys(t)
	repo := testenv.NewRepo(t)
	repo.AddProfile("quick", "", testenv.Check{Name: "quick", Script: "SUMMARY='node answers' result Pass; exit 0"})
	approve := func(req string) {
		repo.AddRequest(req, "quick")
		repo.Commit(req)
		repo.Approve(keys.ApproverFile, "", "CertificationProfile/quick", "CertificationRequest/"+req)
	}
	approve("first")

	dir := t.TempDir()
	const secret = "a file beside the report, never served"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "secret.txt"), []byte(secret), 0o600))
	reportDir := filepath.Join(dir, "report")
	addr := freeAddr(t)
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
interval: 1s
listen: %s
report:
  dir: %s
backends:
  local:
    enabled: true
    grace: 1s
    workRoot: %s
`, repo.Dir, keys.TrustFile, keys.ReconcilerFile, filepath.Join(dir, "state"), addr, reportDir, filepath.Join(testenv.WorldDir(t), "work")), 0o600))

	d := startDaemon(t, config, addr)
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(method, p string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, "http://"+addr+p, strings.NewReader("overwritten"))
		require.NoError(t, err)
		resp, err := client.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		// A body cut short still shows what was sent: the status decides.
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	indexHas := func(run string) bool {
		code, body := get(http.MethodGet, "/report/")
		return code == http.StatusOK && strings.Contains(body, run)
	}
	// Wait for the run's end: the daemon rewrites the report after each
	// pass that moved the branch, and the comparison of index.html below
	// ("no request wrote the report") holds only once it has stopped.
	require.Eventually(t, func() bool { return indexHas(">first<") && indexHas("<td>Done</td>") }, 90*time.Second, 200*time.Millisecond, "the report never showed run first done")

	// Every file the current generation's manifest lists is served as
	// written. The daemon may write a newer report meanwhile (each pass
	// that moved the branch): read one generation throughout.
	target, err := os.Readlink(filepath.Join(reportDir, report.CurrentLink))
	require.NoError(t, err)
	target = filepath.ToSlash(target)
	_, body := get(http.MethodGet, "/report/"+target+"/"+report.ManifestFile)
	var m struct {
		Files map[string]string `json:"files"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &m), body)
	require.NotEmpty(t, m.Files)
	subdir := ""
	for p := range m.Files {
		want, err := os.ReadFile(filepath.Join(reportDir, filepath.FromSlash(target), filepath.FromSlash(p)))
		require.NoError(t, err)
		code, got := get(http.MethodGet, "/report/"+target+"/"+p)
		assert.Equal(t, http.StatusOK, code, p)
		assert.Equal(t, string(want), got, p)
		if i := strings.LastIndex(p, "/"); i > 0 {
			subdir = report.CurrentLink + "/" + p[:i+1]
		}
	}
	require.NotEmpty(t, subdir, "the report has pages in a subdirectory")

	// Nothing outside the directory, no listing, no write: symbolic
	// links planted in the current generation, where the handler does
	// open files, never lead out of the directory.
	gen := filepath.Join(reportDir, report.CurrentLink)
	require.NoError(t, os.Symlink(filepath.Join(dir, "secret.txt"), filepath.Join(gen, "leak.txt")))
	require.NoError(t, os.Symlink(dir, filepath.Join(gen, "up")))
	index, err := os.ReadFile(filepath.Join(reportDir, "index.html"))
	require.NoError(t, err)
	for _, tc := range []struct{ method, path string }{
		{http.MethodGet, "/report/../secret.txt"},
		{http.MethodGet, "/report/%2e%2e/secret.txt"},
		{http.MethodGet, "/report/..%2fsecret.txt"},
		{http.MethodGet, "/report/%2e%2e%2fsecret.txt"},
		{http.MethodGet, "/report/" + report.CurrentLink + "/leak.txt"},
		{http.MethodGet, "/report/" + report.CurrentLink + "/up/secret.txt"},
		{http.MethodGet, "/report/.lock"},
		{http.MethodHead, "/report/.lock"},
		{http.MethodGet, "/report/" + subdir},
		{http.MethodGet, "/report/" + strings.TrimSuffix(subdir, "/")},
		{http.MethodPut, "/report/index.html"},
		{http.MethodPost, "/report/index.html"},
		{http.MethodDelete, "/report/index.html"},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			code, body := get(tc.method, tc.path)
			assert.NotEqual(t, http.StatusOK, code)
			if strings.HasSuffix(tc.path, "/.lock") {
				assert.Equal(t, http.StatusNotFound, code, "the report's lock file is never served")
			}
			assert.NotContains(t, body, secret)
			assert.NotContains(t, body, "<pre>", "no directory listing (net/http's is a <pre> of links)")
		})
	}
	after, err := os.ReadFile(filepath.Join(reportDir, "index.html"))
	require.NoError(t, err)
	assert.Equal(t, string(index), string(after), "no request wrote the report")
	_, err = os.Stat(filepath.Join(reportDir, "index.html"))
	require.NoError(t, err)
	conn, err := net.Dial("tcp", addr) // a raw request line, not cleaned by a client
	require.NoError(t, err)
	fmt.Fprintf(conn, "GET /report/../secret.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	raw, _ := io.ReadAll(conn)
	conn.Close()
	assert.NotContains(t, string(raw), secret)

	// A later run moves the tip: the daemon rebuilds the report.
	approve("second")
	require.Eventually(t, func() bool { return indexHas(">second<") }, 90*time.Second, 200*time.Millisecond, "the report was not rebuilt after run second")
	require.NoError(t, d.terminate())
}
