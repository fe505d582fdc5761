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
