package reconciler

import (
	"context"
	"errors"
	"io/fs"
	"net/http"
	"os"
	"strings"

	"signet.dev/signet/report"
)

// startReports keeps the report of config field report.dir, when set:
// after each pass (askReport) that finds the evidence branch's tip moved
// since the last report written, it rebuilds the report there with
// the code of `signet report` (a report.Builder kept for the daemon's
// life, so each report after the first audits only the commits since
// the last one and renders only the pages they change), and the trust
// policy read anew. One build at a time, on its own goroutine, so a long audit never
// holds up admissions; requests during a build coalesce into one more.
// A failed build is logged and retried after the next pass.
func (r *Reconciler) startReports(ctx context.Context) {
	if r.cfg.Report.Dir == "" {
		return
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		last := ""
		for {
			select {
			case <-ctx.Done():
				return
			case <-r.runCtx.Done():
				return
			case <-r.reportReq:
			}
			tip := r.store.Tip()
			if tip == "" || tip == last {
				continue
			}
			if err := r.writeReport(ctx); err != nil {
				if ctx.Err() == nil {
					r.log.Error("report not rebuilt", "dir", r.cfg.Report.Dir, "error", err)
				}
				continue
			}
			last = tip
		}
	}()
}

// askReport asks the report goroutine to look at the tip; never blocks.
func (r *Reconciler) askReport() {
	select {
	case r.reportReq <- struct{}{}:
	default:
	}
}

// writeReport audits the evidence branch and writes its report to
// report.dir as a new generation, switched in whole (report.Builder:
// from the last report when it can, else in full).
func (r *Reconciler) writeReport(ctx context.Context) error {
	policy, err := r.loadPolicy()
	if err != nil {
		return err
	}
	res, err := r.reports.Build(ctx, report.Options{Repo: absURL(r.cfg.Evidence.URL), Auth: r.evidenceAuth, Branch: r.cfg.Evidence.Branch,
		Policy: policy, Out: r.cfg.Report.Dir})
	if err != nil {
		return err
	}
	r.log.Info("report written", "dir", r.cfg.Report.Dir, "files", res.Pages, "written", res.Written, "incremental", res.Incremental, "rendered", res.Rendered, "removed", res.Removed, "findings", len(res.Audit.Findings))
	return nil
}

// reportRetryAfter is the Retry-After, in seconds, of /report/ before
// the first report is written.
const reportRetryAfter = "10"

// reportFiles serves the report in dir read-only at /report/ (the entry
// index at /report/, whose <base> leads into the generation it belongs
// to, gens/<id>/, so a reader's pages are all of one generation). It
// serves only what report.ServedPath allows, the entry and the files of
// a generation, never the lock file, another dot-file or anything else
// in dir (404); only regular files, opened through an os.Root of dir, so
// no path, "..", or symbolic link reaches outside it; a directory is
// 404, never listed. Until the first report is switched in
// (report.Written) it answers 503 with a Retry-After: the report exists
// but is not ready.
func reportFiles(dir string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		name := strings.TrimPrefix(req.URL.Path, "/report/")
		if name == "" {
			name = report.EntryFile
		}
		if !report.ServedPath(name) {
			http.NotFound(w, req)
			return
		}
		root, err := os.OpenRoot(dir)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			http.Error(w, "the report directory cannot be read", http.StatusInternalServerError)
			return
		}
		if err == nil {
			defer root.Close()
		}
		if err != nil || !report.Written(root.FS()) {
			w.Header().Set("Retry-After", reportRetryAfter)
			w.Header().Set("Cache-Control", "no-store")
			http.Error(w, "the first report is being built; retry in "+reportRetryAfter+" s", http.StatusServiceUnavailable)
			return
		}
		f, err := root.Open(name)
		if err != nil {
			http.NotFound(w, req)
			return
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil || !st.Mode().IsRegular() {
			http.NotFound(w, req)
			return
		}
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if strings.HasPrefix(name, report.GenerationsDir+"/") {
			// A generation never changes once switched in.
			w.Header().Set("Cache-Control", "public, max-age=86400, immutable")
		} else {
			// The entry leads into the current generation: never
			// reuse it without asking.
			w.Header().Set("Cache-Control", "no-cache")
		}
		http.ServeContent(w, req, name, st.ModTime(), f)
	})
}
