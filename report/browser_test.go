package report_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/evidence"
	"signet.dev/signet/evidence/audit"
	"signet.dev/signet/internal/testing/evidencetest"
	"signet.dev/signet/report"
)

// browser is a headless Chromium (Debian's package) driven by chromedp,
// with every console error, exception and network request recorded.
type browser struct {
	ctx context.Context
	t   *testing.T

	mu       sync.Mutex
	errors   []string
	requests []string
}

// chromium returns the Chromium binary; make browser-tools installs it.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatalf("chromium not found on PATH: run make browser-tools (Debian's chromium package)")
	return ""
}

// newBrowser starts Chromium with the flags this machine needs (root, no
// sandbox, no background networking), a fresh profile and a temporary
// directory of the test's own.
func newBrowser(t *testing.T) *browser {
	t.Helper()
	// Chromium makes its singleton socket directory (org.chromium.Chromium.*)
	// under TMPDIR and leaves it when it is killed: a directory of the
	// test's own, short (a socket path is at most 107 bytes; t.TempDir's
	// carry the subtest's name), removed after the browser is gone.
	tmp, mkErr := os.MkdirTemp("", "signet-chromium-")
	require.NoError(t, mkErr)
	t.Cleanup(func() { _ = os.RemoveAll(tmp) })
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium(t)),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true), chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
		chromedp.Env("TMPDIR=" + tmp),
	}
	actx, cancelA := chromedp.NewExecAllocator(t.Context(), opts...)
	ctx, cancelC := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelC(); cancelA() })
	b := &browser{ctx: ctx, t: t}
	require.NoError(t, chromedp.Listen(ctx, func(ev any) {
		b.mu.Lock()
		defer b.mu.Unlock()
		switch ev := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeWarning {
				var args []string
				for _, a := range ev.Args {
					args = append(args, string(a.Value))
				}
				b.errors = append(b.errors, fmt.Sprintf("console.%s: %s", ev.Type, strings.Join(args, " ")))
			}
		case *runtime.EventExceptionThrown:
			b.errors = append(b.errors, "exception: "+ev.ExceptionDetails.Text)
		case *cdplog.EventEntryAdded:
			if ev.Entry.Level == cdplog.EntryLevelError {
				b.errors = append(b.errors, fmt.Sprintf("log %s: %s %s", ev.Entry.Source, ev.Entry.Text, ev.Entry.URL))
			}
		case *network.EventRequestWillBeSent:
			b.requests = append(b.requests, ev.Request.URL)
		case *network.EventLoadingFailed:
			b.errors = append(b.errors, "loading failed: "+ev.ErrorText)
		}
	}))
	_, err := chromedp.Call(ctx, runtime.Enable, cdp.Empty{})
	require.NoError(t, err)
	return b
}

func (b *browser) run(actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	require.NoError(b.t, chromedp.Do(ctx, actions...))
}

// value runs a that returns a value.
func value[T any](b *browser, a chromedp.Action[T]) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	require.NoError(b.t, err)
	return v
}

func (b *browser) text(sel string) string {
	b.t.Helper()
	return value(b, chromedp.Text(chromedp.CSS(sel)))
}

func (b *browser) count(sel string) int {
	b.t.Helper()
	return len(value(b, chromedp.Nodes(chromedp.CSSAll(sel), chromedp.AtLeast(0))))
}

func (b *browser) location() string {
	b.t.Helper()
	return value(b, chromedp.Location())
}

// follow clicks the link whose href ends with suffix and waits for sel.
func (b *browser) follow(suffix, sel string) {
	b.t.Helper()
	b.run(chromedp.Click(chromedp.CSS(fmt.Sprintf(`a[href$=%q]`, suffix)), chromedp.NodeVisible), chromedp.WaitReady(chromedp.CSS(sel)))
	require.True(b.t, strings.HasSuffix(b.location(), suffix), "at %s, want …%s", b.location(), suffix)
}

// screenshot writes full-page PNGs of the current page at a desktop and a
// narrow width under dir.
func (b *browser) screenshot(dir, name string) {
	b.t.Helper()
	for _, w := range []struct {
		tag  string
		w, h int64
	}{{"desktop", 1280, 900}, {"narrow", 390, 844}} {
		// A viewport as tall as the page, so that all of it is painted
		// when captured.
		b.run(chromedp.EmulateViewport(w.w, w.h))
		h := value(b, chromedp.Evaluate[int64](`document.documentElement.scrollHeight`))
		b.run(chromedp.EmulateViewport(w.w, max(w.h, h)), chromedp.Sleep(100*time.Millisecond))
		png := value(b, chromedp.CaptureScreenshot())
		require.NoError(b.t, os.WriteFile(filepath.Join(dir, name+"-"+w.tag+".png"), png, 0o644))
		// No page is wider than the narrow screen: tables scroll inside
		// their own box.
		if w.tag == "narrow" {
			width := value(b, chromedp.Evaluate[int64](`document.documentElement.scrollWidth`))
			assert.LessOrEqual(b.t, width, w.w, "%s is wider than a %d px screen", name, w.w)
		}
	}
	b.run(chromedp.EmulateViewport(1280, 900))
}

// check asserts no console error and no request outside dir so far.
func (b *browser) check(dir string) {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	assert.Empty(b.t, b.errors, "console errors")
	root := (&url.URL{Scheme: "file", Path: dir + "/"}).String()
	require.NotEmpty(b.t, b.requests)
	for _, r := range b.requests {
		assert.True(b.t, strings.HasPrefix(r, root), "request outside the report directory: %s", r)
	}
}

func fileURL(p string) string { return (&url.URL{Scheme: "file", Path: p}).String() }

// shots is where the screenshots go: the test's temporary directory, or
// $SIGNET_REPORT_SCREENSHOTS to keep them.
func shots(t *testing.T) string {
	if d := os.Getenv("SIGNET_REPORT_SCREENSHOTS"); d != "" {
		require.NoError(t, os.MkdirAll(d, 0o755))
		return d
	}
	return t.TempDir()
}

// TestReportInBrowser builds a report of an evidence branch written by
// the real reconciler (Pass, Fail then released, Inconclusive, Error,
// Canceled) and reads it in headless Chromium: the index, a run page's
// matrix (cells opened, reasons and summaries read from the DOM), a node
// page and a profile page, reached by following links; no console error
// and no request outside the report directory; screenshots at desktop and
// narrow widths. Then a tampered copy of the branch: the report shows the
// audit's findings, never the tampered verdict.
func TestReportInBrowser(t *testing.T) {
	chromium(t)
	br := buildBranch(t)
	out := filepath.Join(t.TempDir(), "site")
	res, err := report.Build(t.Context(), report.Options{Repo: br.Repo, Policy: br.Trust, Out: out})
	require.NoError(t, err)
	require.Empty(t, res.Audit.Findings)
	pics := shots(t)

	t.Run("index, run, node and profile pages", func(t *testing.T) {
		b := newBrowser(t)
		b.run(chromedp.Navigate(fileURL(res.Index)), chromedp.WaitReady(chromedp.CSS("#runs")))
		assert.Contains(t, b.text("#audit-status"), "Audit clean")
		assert.Equal(t, 7, b.count("#runs tbody tr"))
		for run, verdict := range map[string]string{"pass-1": "Pass", "fail-1": "Fail", "inconc-1": "Inconclusive", "error-1": "Error", "cancel-1": "Canceled", "smoke-1": "Pass"} {
			row := b.text(fmt.Sprintf(`#runs tr:has(a[href$="/%s.html"])`, run))
			assert.Contains(t, row, verdict, "run %s", run)
		}
		assert.Contains(t, b.text("#summary"), "gpu-burn")
		b.screenshot(pics, "index")

		b.follow("runs/alpha/fail-1.html", "#matrix")
		assert.Contains(t, b.text("h1"), "Fail")
		nccl := fmt.Sprintf(`#matrix tr[data-node=%q] td[data-check="nccl"]`, br.Host)
		diag := fmt.Sprintf(`#matrix tr[data-node=%q] td[data-check="diag"]`, br.Host)
		assert.Equal(t, "Fail", strings.TrimSpace(b.text(nccl+" summary")))
		assert.Equal(t, "Pass", strings.TrimSpace(b.text(diag+" summary")))
		// Closed, a cell shows its verdict only; opened, the rest.
		assert.NotContains(t, b.text(nccl), "busbw")
		b.run(chromedp.Click(chromedp.CSS(nccl + " summary")))
		cell := b.text(nccl)
		assert.Contains(t, cell, "exit code 1 with a valid Fail result")
		assert.Contains(t, cell, "busbw 180.2 GB/s below 400 GB/s")
		assert.Contains(t, cell, "busbwGBps")
		assert.Contains(t, cell, "NVLink 3 degraded", "the stderr tail")
		assert.Contains(t, cell, "cosign verify-blob-attestation")
		assert.Contains(t, cell, "verify-commit")
		b.run(chromedp.Click(chromedp.CSS(diag + " summary")))
		assert.Contains(t, b.text(diag), "8 GPUs healthy")
		facts := b.text("dl.facts")
		assert.Contains(t, facts, "alice", "the admission's approver by owner name")
		assert.Contains(t, facts, "bob", "the release's approver by owner name")
		assert.Contains(t, facts, "release.json")
		assert.Contains(t, b.text("#verify-h + p + pre"), "sha256sum evidence.json")
		b.screenshot(pics, "run")
		// Dark mode: the page follows prefers-color-scheme.
		_, err := chromedp.Call(b.ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "dark"}}})
		require.NoError(t, err)
		bg := value(b, chromedp.Evaluate[string](`getComputedStyle(document.body).backgroundColor`))
		assert.Equal(t, "rgb(13, 17, 23)", bg, "dark background")
		b.screenshot(pics, "run-dark")
		_, err = chromedp.Call(b.ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{})
		require.NoError(t, err)

		b.follow("nodes/alpha/"+br.Host+".html", "#history")
		assert.Equal(t, 4, b.count("#history tbody tr"), "pass-1, pass-2, fail-1, inconc-1")
		hist := b.text("#history")
		for _, v := range []string{"Pass", "Fail", "Inconclusive", "released", "retained"} {
			assert.Contains(t, hist, v)
		}
		b.screenshot(pics, "node")

		b.follow("runs/alpha/inconc-1.html", "#matrix")
		b.run(chromedp.Click(chromedp.CSS(`#matrix td[data-check="diag"] summary`)))
		assert.Contains(t, b.text(`#matrix td[data-check="diag"]`), "no GPU visible")
		b.follow("profiles/gpu-burn.html", "#checks")
		assert.GreaterOrEqual(t, b.count("svg rect.bar"), 1)
		assert.Contains(t, b.text("#checks"), "nccl")
		b.screenshot(pics, "profile")

		for _, c := range []struct{ page, check, verdict, reason string }{
			{"runs/beta/error-1.html", "diag", "Error", "exit code 0 with no result"},
			{"runs/gamma/cancel-1.html", "nccl", "Canceled", "canceled: sent SIGTERM"},
		} {
			b.run(chromedp.Navigate(fileURL(filepath.Join(res.Dir, c.page))), chromedp.WaitReady(chromedp.CSS("#matrix")))
			sel := fmt.Sprintf(`#matrix td[data-check=%q]`, c.check)
			assert.Equal(t, c.verdict, strings.TrimSpace(b.text(sel+" summary")), c.page)
			b.run(chromedp.Click(chromedp.CSS(sel + " summary")))
			assert.Contains(t, b.text(sel), c.reason, c.page)
		}
		b.check(out)
	})

	t.Run("a tampered branch shows the findings, not the tampered verdict", func(t *testing.T) {
		fx := &evidencetest.Fixture{Repo: br.Repo, SSHKeyFile: br.SSHKey}
		c, err := fx.Clone(filepath.Join(t.TempDir(), "evidence.git"))
		require.NoError(t, err)
		p, err := c.Find("/fail-1/" + evidence.EvidenceFile)
		require.NoError(t, err)
		raw, err := c.Read("refs/heads/"+evidencetest.Branch, p)
		require.NoError(t, err)
		// Whoever holds the reconciler's key rewrites the run as passed.
		forged, err := evidencetest.Resign(raw, br.Keys.Reconciler, func(pred map[string]any) {
			pred["verdict"] = "Pass"
			for _, n := range pred["nodes"].([]any) {
				n.(map[string]any)["verdict"] = "Pass"
			}
		})
		require.NoError(t, err)
		at, err := c.Landed(p)
		require.NoError(t, err)
		_, err = c.Rewrite(at, map[string][]byte{p: forged})
		require.NoError(t, err)

		tout := filepath.Join(t.TempDir(), "site")
		tres, err := report.Build(t.Context(), report.Options{Repo: c.Dir, Policy: br.Trust, Out: tout})
		require.NoError(t, err)
		// The forged run evidence is not the summary of its checks; the
		// rewrite also moved the commits later receipts name.
		var rules []string
		for _, f := range tres.Audit.Findings {
			if f.Run == "fail-1" {
				rules = append(rules, f.Rule)
			}
		}
		require.Contains(t, rules, audit.RuleRunSummary)

		b := newBrowser(t)
		b.run(chromedp.Navigate(fileURL(tres.Index)), chromedp.WaitReady(chromedp.CSS("#runs")))
		assert.Contains(t, b.text("#audit-status"), "finding")
		assert.Contains(t, b.text("table.findings"), audit.RuleRunSummary)
		row := b.text(`#runs tr:has(a[href$="/fail-1.html"])`)
		assert.Contains(t, row, "withheld")
		assert.NotContains(t, row, "Pass")
		// The node's latest runs are withheld: an older Pass does not
		// make it certified.
		nodeRow := b.text(`#nodes tbody tr:first-child`)
		assert.Contains(t, nodeRow, "unproven")
		assert.NotContains(t, nodeRow, "certified")
		b.screenshot(pics, "tampered-index")
		b.follow("runs/alpha/fail-1.html", "#withheld")
		assert.Equal(t, 0, b.count("#matrix"), "no matrix from a document the audit refused")
		assert.NotContains(t, b.text("h1"), "Pass")
		assert.Contains(t, b.text("table.findings"), audit.RuleRunSummary)
		// The other runs are untouched and still shown.
		b.run(chromedp.Navigate(fileURL(filepath.Join(tres.Dir, "runs/alpha/pass-1.html"))), chromedp.WaitReady(chromedp.CSS("#matrix")))
		assert.Contains(t, b.text("h1"), "Pass")
		b.check(tout)
		var m struct{ Files map[string]string }
		mb, err := os.ReadFile(filepath.Join(tres.Dir, report.ManifestFile))
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(mb, &m))
		assert.Contains(t, m.Files, "runs/alpha/fail-1.html")
	})
}
