package reconciler_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/evidence"
	"signet.dev/signet/internal/testing/evidencetest"
	"signet.dev/signet/reconciler"
	"signet.dev/signet/report"
	"signet.dev/signet/specs"
)

var (
	baseHref = regexp.MustCompile(`<base href="(gens/[0-9a-f]+/)">\n`)
	pageHref = regexp.MustCompile(`href="([^"#:]+\.(?:html|css))"`)
)

// reportReader reads the report served at base as a browser would: the
// entry page, then the generation's manifest and every page the entry
// links to, each checked against the manifest's digest.
type reportReader struct {
	t      *testing.T
	client *http.Client
	base   *url.URL
}

func (rr *reportReader) get(u string) (int, []byte) {
	resp, err := rr.client.Get(u)
	require.NoError(rr.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(rr.t, err)
	return resp.StatusCode, b
}

// open fetches the entry page: the generation it leads into and the
// links it holds.
func (rr *reportReader) open() (gen string, links []string, entry []byte) {
	code, entry := rr.get(rr.base.String())
	require.Equal(rr.t, http.StatusOK, code, "%s", entry)
	m := baseHref.FindSubmatch(entry)
	require.NotNil(rr.t, m, "the entry page leads into one generation: %s", entry)
	for _, l := range pageHref.FindAllSubmatch(entry, -1) {
		links = append(links, string(l[1]))
	}
	require.NotEmpty(rr.t, links)
	return string(m[1]), links, entry
}

// follow fetches the generation's manifest and every link of its entry
// page: each must be the page of that generation, whole (its digest is
// the manifest's), and so must the entry. It returns false, having
// checked nothing more, when the generation is gone (removed two
// reports later), which a reader may see; a page of another generation,
// or a cut one, fails the test.
func (rr *reportReader) follow(gen string, links []string, entry []byte, dir string) bool {
	code, mb := rr.get(rr.base.JoinPath(gen, report.ManifestFile).String())
	if code == http.StatusNotFound {
		if _, err := os.Stat(filepath.Join(dir, gen)); os.IsNotExist(err) {
			return false
		}
	}
	require.Equal(rr.t, http.StatusOK, code, "the manifest of %s: %s", gen, mb)
	var m struct {
		Files map[string]specs.Digest `json:"files"`
	}
	require.NoError(rr.t, json.Unmarshal(mb, &m))
	index := baseHref.ReplaceAll(entry, nil)
	assert.Equal(rr.t, m.Files["index.html"], specs.DigestOf(index), "the entry page is the index of %s", gen)
	for _, l := range links {
		u, err := rr.base.Parse(gen + l)
		require.NoError(rr.t, err)
		code, b := rr.get(u.String())
		if code == http.StatusNotFound {
			if _, err := os.Stat(filepath.Join(dir, gen)); os.IsNotExist(err) {
				return false
			}
		}
		if !assert.Equal(rr.t, http.StatusOK, code, "%s of %s: the previous generation stays for its readers", l, gen) {
			return true
		}
		want, ok := m.Files[l]
		assert.True(rr.t, ok, "%s is a page of %s", l, gen)
		assert.Equal(rr.t, want, specs.DigestOf(b), "%s: a page of generation %s, whole, never one of another", l, gen)
	}
	return true
}

// TestReportGenerationsServed: while the report is rebuilt, a reader of
// the daemon's /report/ (the real handler over real HTTP) sees one
// generation from the entry page to every page it links to, each page
// whole: a reader who opened the entry before a rebuild still reads
// that generation's pages after it; readers running through repeated
// rebuilds never see a page of another generation or a cut one.
func TestReportGenerationsServed(t *testing.T) {
	f, err := evidencetest.Build(t.Context(), t.TempDir(), "run-a", "run-b", "run-c")
	require.NoError(t, err)
	c, err := f.Clone(filepath.Join(t.TempDir(), "evidence.git"))
	require.NoError(t, err)
	tip, err := c.Tip()
	require.NoError(t, err)
	before, err := c.Before("/run-c/" + evidence.AdmissionFile)
	require.NoError(t, err)
	ref := "refs/heads/" + evidencetest.Branch

	dir := filepath.Join(t.TempDir(), "report")
	// Every rebuild is a new generation: the tip alternates between two
	// commits and the TTL the index states grows, so no generation comes
	// back. It fails the test without stopping it (readers may be
	// running).
	builds := 0
	rebuild := func() bool {
		commit := tip
		if builds%2 == 1 {
			commit = before
		}
		builds++
		if _, err := c.Git("update-ref", ref, commit); !assert.NoError(t, err) {
			return false
		}
		res, err := report.Build(t.Context(), report.Options{Repo: c.Dir, Policy: f.Policy, Out: dir, TTL: time.Duration(builds) * time.Hour})
		return assert.NoError(t, err) && assert.Empty(t, res.Audit.Findings) && assert.NotZero(t, res.Written)
	}
	require.True(t, rebuild())

	mux := http.NewServeMux()
	mux.Handle("GET /report/", reconciler.ReportFiles(dir))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	base, err := url.Parse(srv.URL + "/report/")
	require.NoError(t, err)
	rr := &reportReader{t: t, client: srv.Client(), base: base}

	// A reader opens the entry, the report is rebuilt, the reader
	// follows the links: still the generation it opened.
	resp, err := rr.client.Get(base.String())
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, "no-cache", resp.Header.Get("Cache-Control"), "a browser never shows a stale entry")
	gen, links, entry := rr.open()
	require.True(t, rebuild())
	next, _, _ := rr.open()
	require.NotEqual(t, gen, next, "the rebuild switched the generation")
	require.True(t, rr.follow(gen, links, entry, dir), "the generation just replaced is still there")

	// Readers through repeated rebuilds: each reads a number of times
	// while the report is rebuilt until all are done.
	var wg sync.WaitGroup
	var mu sync.Mutex
	whole, left := 0, 4
	for range left {
		wg.Go(func() {
			defer func() {
				mu.Lock()
				left--
				mu.Unlock()
			}()
			for range 12 {
				gen, links, entry := rr.open()
				if rr.follow(gen, links, entry, dir) {
					mu.Lock()
					whole++
					mu.Unlock()
				}
				if t.Failed() {
					return
				}
			}
		})
	}
	for {
		mu.Lock()
		n := left
		mu.Unlock()
		if n == 0 || !rebuild() {
			break
		}
	}
	wg.Wait()
	require.NotZero(t, whole, "the readers read whole generations")
	t.Logf("%d rebuilds, %d whole generations read", builds, whole)
}

// serveReport serves dir with the daemon's /report/ handler over real
// HTTP and returns a GET of a path under it (a raw path, sent as is):
// status, headers and body.
func serveReport(t *testing.T, dir string) func(method, p string) (int, http.Header, string) {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("GET /report/", reconciler.ReportFiles(dir))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return func(method, p string) (int, http.Header, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, srv.URL, nil)
		require.NoError(t, err)
		req.URL.Opaque = p // sent as written: "%2e" stays encoded
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, resp.Header, string(b)
	}
}

// TestReportFilesServesOnlyTheReport: the daemon's /report/ (the real
// handler over real HTTP) serves the entry and the files of a
// generation, and 404 for everything else in the report directory: the
// lock file, any other dot-file (a generation still being written, a
// temporary file, a hidden file in a generation), a file that merely
// shares the directory, and a directory in gens/ that is not a
// generation's.
func TestReportFilesServesOnlyTheReport(t *testing.T) {
	f, err := evidencetest.Build(t.Context(), t.TempDir(), "run-a")
	require.NoError(t, err)
	dir := filepath.Join(t.TempDir(), "report")
	res, err := report.Build(t.Context(), report.Options{Repo: f.Repo, Policy: f.Policy, Out: dir})
	require.NoError(t, err)
	require.Empty(t, res.Audit.Findings)
	gen := report.GenerationsDir + "/" + filepath.Base(res.Dir)

	// What else a report directory may hold: each file's body names it,
	// so a test failure shows which was served.
	plant := func(p string) {
		fp := filepath.Join(dir, filepath.FromSlash(p))
		require.NoError(t, os.MkdirAll(filepath.Dir(fp), 0o755))
		require.NoError(t, os.WriteFile(fp, []byte("planted "+p), 0o644))
	}
	lock, err := os.Stat(filepath.Join(dir, ".lock"))
	require.NoError(t, err, "the report's lock file is in the directory")
	require.True(t, lock.Mode().IsRegular())
	plant(".hidden.html")
	plant("notes.txt")
	plant("gens/.tmp-123/index.html")
	plant(gen + "/.hidden.html")
	plant(gen + "/runs/.tmp-456")
	plant("gens/notageneration/index.html")
	plant("gens/0123456789ABCDEF/index.html")
	require.NoError(t, os.Symlink(gen, filepath.Join(dir, report.CurrentLink+".tmp")))

	get := serveReport(t, dir)
	for _, p := range []string{
		"/report/", "/report/index.html", "/report/" + gen + "/index.html",
		"/report/" + gen + "/" + report.ManifestFile, "/report/" + report.CurrentLink + "/index.html",
	} {
		code, _, body := get(http.MethodGet, p)
		assert.Equal(t, http.StatusOK, code, "%s: a file of the report: %s", p, body)
	}
	for _, p := range []string{
		"/report/.lock",
		"/report/%2elock",
		"/report/.hidden.html",
		"/report/notes.txt",
		"/report/gens/.tmp-123/index.html",
		"/report/gens/%2etmp-123/index.html",
		"/report/" + gen + "/.hidden.html",
		"/report/" + gen + "/runs/.tmp-456",
		"/report/" + report.CurrentLink + "/.hidden.html",
		"/report/" + report.CurrentLink + ".tmp/index.html",
		"/report/gens/notageneration/index.html",
		"/report/gens/0123456789ABCDEF/index.html",
	} {
		for _, method := range []string{http.MethodGet, http.MethodHead} {
			code, _, body := get(method, p)
			assert.Equal(t, http.StatusNotFound, code, "%s %s: not a file of the report, never served: %s", method, p, body)
			assert.NotContains(t, body, "planted")
		}
	}
}

// TestReportFilesBeforeFirstReport: until a report has been switched in
// (no directory yet, one being written, or only a report of the flat
// layout before generations), the daemon's /report/ answers 503 with a
// Retry-After and a plain-text body saying the first report is being
// built, for the entry and any path a report may hold; a path no report
// holds (the lock file) is still 404.
func TestReportFilesBeforeFirstReport(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, dir string)
	}{
		{"no directory", func(*testing.T, string) {}},
		{"empty directory", func(t *testing.T, dir string) { require.NoError(t, os.MkdirAll(dir, 0o755)) }},
		{"first report being written", func(t *testing.T, dir string) {
			require.NoError(t, os.MkdirAll(filepath.Join(dir, report.GenerationsDir, ".tmp-1"), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(dir, ".lock"), nil, 0o644))
			require.NoError(t, os.WriteFile(filepath.Join(dir, report.GenerationsDir, ".tmp-1", "index.html"), []byte("half"), 0o644))
		}},
		{"switched in, entry not yet written", func(t *testing.T, dir string) {
			require.NoError(t, os.MkdirAll(filepath.Join(dir, report.GenerationsDir, "0123456789abcdef"), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(dir, report.GenerationsDir, "0123456789abcdef", "index.html"), []byte("gen"), 0o644))
			require.NoError(t, os.Symlink(report.GenerationsDir+"/0123456789abcdef", filepath.Join(dir, report.CurrentLink)))
		}},
		{"flat report of the earlier layout", func(t *testing.T, dir string) {
			require.NoError(t, os.MkdirAll(dir, 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(dir, "index.html"), []byte("flat"), 0o644))
			require.NoError(t, os.WriteFile(filepath.Join(dir, report.ManifestFile), []byte(`{"files":{"index.html":"x"}}`), 0o644))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "report")
			tc.setup(t, dir)
			get := serveReport(t, dir)
			for _, p := range []string{"/report/", "/report/index.html", "/report/gens/0123456789abcdef/index.html", "/report/current/index.html"} {
				code, h, body := get(http.MethodGet, p)
				assert.Equal(t, http.StatusServiceUnavailable, code, "%s: not ready before the first report: %s", p, body)
				assert.Equal(t, "10", h.Get("Retry-After"), p)
				assert.Equal(t, "text/plain; charset=utf-8", h.Get("Content-Type"), p)
				assert.Equal(t, "no-store", h.Get("Cache-Control"), "%s: never cached past the first report", p)
				assert.Contains(t, body, "the first report is being built", p)
			}
			code, _, _ := get(http.MethodGet, "/report/.lock")
			assert.Equal(t, http.StatusNotFound, code, "the lock file is never served")
		})
	}
}

// TestReportFilesUnreadableDirectory: a report.dir that exists but
// cannot be opened as a directory is 500, not 503: retrying will not
// help, a person must fix it.
func TestReportFilesUnreadableDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "report")
	require.NoError(t, os.WriteFile(dir, []byte("not a directory"), 0o644))
	code, h, body := serveReport(t, dir)(http.MethodGet, "/report/")
	assert.Equal(t, http.StatusInternalServerError, code, body)
	assert.Empty(t, h.Get("Retry-After"))
	assert.NotContains(t, body, "not a directory")
}
