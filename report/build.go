package report

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"signet.dev/signet/evidence"
	"signet.dev/signet/evidence/audit"
	"signet.dev/signet/signing"
	"signet.dev/signet/specs"
)

// ManifestFile lists, in the output directory, every file the report
// wrote and its digest; a later report removes only files it lists.
const ManifestFile = "manifest.json"

// Defaults of Options.
const (
	DefaultPageSize = 50
	DefaultTTL      = 30 * 24 * time.Hour
	DefaultExpiring = 7 * 24 * time.Hour
)

// Options say what to report and where.
type Options struct {
	// Repo, Auth and Branch name the evidence branch as for audit.Branch.
	Repo   string
	Auth   evidence.Auth
	Branch string
	// Policy is the trust policy. Required.
	Policy *signing.TrustPolicy
	// Out is the output directory, created when missing.
	Out string
	// PageSize is the number of runs per index page (DefaultPageSize
	// when zero).
	PageSize int
	// TTL is how long a Pass certifies a node (DefaultTTL when zero,
	// none when negative); Expiring is the window, before its end, in
	// which it counts as expiring soon (DefaultExpiring when zero).
	TTL, Expiring time.Duration
	// Now, Grace and Workers are the audit's (audit.Options).
	Now     time.Time
	Grace   time.Duration
	Workers int
}

// Result says what Build did.
type Result struct {
	// Index is the path of the report's first page.
	Index string
	// Pages is the number of files of the report; Written those whose
	// bytes changed (or were new), Removed those of an earlier report
	// that this one no longer has.
	Pages, Written, Removed int
	// Changed are the paths written or removed, sorted.
	Changed []string
	// Audit is the audit the report shows.
	Audit *audit.Report
}

// Build audits the branch and writes its report to opts.Out: only files
// whose bytes differ from what is there, then the manifest. An error
// means the branch could not be read or the directory written; findings
// are part of the report, not errors.
func Build(ctx context.Context, opts Options) (*Result, error) {
	if opts.Policy == nil {
		return nil, errors.New("report: Options.Policy is required")
	}
	if opts.Out == "" {
		return nil, errors.New("report: Options.Out is required")
	}
	if opts.PageSize <= 0 {
		opts.PageSize = DefaultPageSize
	}
	if opts.TTL == 0 {
		opts.TTL = DefaultTTL
	}
	if opts.Expiring == 0 {
		opts.Expiring = DefaultExpiring
	}
	col := &collector{runs: map[string]*audit.RunDocuments{}}
	rep, err := audit.Branch(ctx, audit.Options{Repo: opts.Repo, Auth: opts.Auth, Branch: opts.Branch, Policy: opts.Policy,
		Now: opts.Now, Grace: opts.Grace, Workers: opts.Workers, Observe: col.observe})
	if err != nil {
		return nil, err
	}
	m := newModel(rep, col.runs, opts.Policy, opts.TTL, opts.Expiring)
	pages, err := m.pages(opts.PageSize)
	if err != nil {
		return nil, err
	}
	res, err := write(opts.Out, pages)
	if err != nil {
		return nil, err
	}
	res.Audit = rep
	return res, nil
}

// manifest is the content of ManifestFile.
type manifest struct {
	Files map[string]specs.Digest `json:"files"`
}

// write puts pages under dir, writing a file only when its bytes differ,
// removing the files the previous manifest lists that pages lacks, and
// then the new manifest.
func write(dir string, pages map[string][]byte) (*Result, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	var old manifest
	if b, err := os.ReadFile(filepath.Join(dir, ManifestFile)); err == nil {
		if err := json.Unmarshal(b, &old); err != nil {
			return nil, fmt.Errorf("report: %s: %w", filepath.Join(dir, ManifestFile), err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("report: %w", err)
	}
	res := &Result{Index: filepath.Join(dir, "index.html"), Pages: len(pages)}
	next := manifest{Files: map[string]specs.Digest{}}
	names := make([]string, 0, len(pages))
	for p := range pages {
		names = append(names, p)
	}
	sort.Strings(names)
	for _, p := range names {
		b := pages[p]
		d := specs.DigestOf(b)
		next.Files[p] = d
		fp := filepath.Join(dir, filepath.FromSlash(p))
		if old.Files[p] == d {
			if cur, err := os.ReadFile(fp); err == nil && bytes.Equal(cur, b) {
				continue
			}
		}
		if err := writeFile(fp, b); err != nil {
			return nil, err
		}
		res.Written++
		res.Changed = append(res.Changed, p)
	}
	var gone []string
	for p := range old.Files {
		if _, ok := pages[p]; !ok {
			gone = append(gone, p)
		}
	}
	sort.Strings(gone)
	for _, p := range gone {
		if strings.Contains(p, "..") || filepath.IsAbs(p) {
			continue // not a path this package writes
		}
		if err := os.Remove(filepath.Join(dir, filepath.FromSlash(p))); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("report: %w", err)
		}
		res.Removed++
		res.Changed = append(res.Changed, p)
	}
	sort.Strings(res.Changed)
	mb, err := json.MarshalIndent(next, "", " ")
	if err != nil {
		return nil, err
	}
	if err := writeFile(filepath.Join(dir, ManifestFile), append(mb, '\n')); err != nil {
		return nil, err
	}
	return res, nil
}

// writeFile replaces fp atomically (a temporary file renamed over it).
func writeFile(fp string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(fp), 0o755); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(fp), ".tmp-*")
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("report: %w", err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return fmt.Errorf("report: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if err := os.Rename(tmp.Name(), fp); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return nil
}
