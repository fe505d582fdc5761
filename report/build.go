package report

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
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
	// Now, Grace, Workers and Progress are the audit's (audit.Options).
	Now      time.Time
	Grace    time.Duration
	Workers  int
	Progress func(audit.Progress)
}

// Result says what Build did.
type Result struct {
	// Index is the path of the report's entry page (index.html in
	// Options.Out, leading into the generation written).
	Index string
	// Dir is the generation directory that holds the pages.
	Dir string
	// Pages is the number of files of the report; Written those whose
	// bytes changed (or were new), Removed those of an earlier report
	// that this one no longer has.
	Pages, Written, Removed int
	// Changed are the paths written or removed, sorted.
	Changed []string
	// Audit is the audit the report shows (for an incremental report,
	// the audit since the previous one joined with it: Commits,
	// Documents and Runs are the whole branch's).
	Audit *audit.Report
	// Incremental: the report started from the previous one's state
	// (Builder) and rendered Rendered of its Pages; false for a full
	// report, which renders every page.
	Incremental bool
	Rendered    int
	// Took is how long each phase took (wall time).
	Took Phases

	// files is the generation's manifest.
	files map[string]specs.Digest
}

// Build audits the branch and writes its report to opts.Out as a new
// generation (see GenerationsDir): pages whose bytes equal the current
// generation's are linked to them, the others written, and the new one
// switched in whole. An error
// means the branch could not be read or the directory written; findings
// are part of the report, not errors. It is a Builder's first (full)
// report: it audits the whole branch and renders every page.
func Build(ctx context.Context, opts Options) (*Result, error) {
	return (&Builder{once: true}).Build(ctx, opts)
}

// withDefaults checks opts and fills in the defaults.
func (opts *Options) withDefaults() error {
	if opts.Policy == nil {
		return errors.New("report: Options.Policy is required")
	}
	if opts.Out == "" {
		return errors.New("report: Options.Out is required")
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
	return nil
}

// Phases are the wall times of a report's phases: the audit, joining
// and rendering (the model and the pages rendered), and writing the
// generation (a full report's second rendering included when the
// incremental one could not keep a page).
type Phases struct {
	Audit, Render, Write time.Duration
}

// manifest is the content of ManifestFile.
type manifest struct {
	Files map[string]specs.Digest `json:"files"`
}

// kept are the pages of an incremental report that were not rendered
// again (paths: every page of the report; those not rendered are kept):
// they are linked from the current generation, each only when its bytes
// there have the digest files (the manifest of the builder's last
// report, as it computed it) gives it.
type kept struct {
	paths []string
	files map[string]specs.Digest
}

// errKeptChanged: a page to keep is not what the builder wrote (another
// writer switched a generation in, or its bytes changed, or it is
// missing): nothing is kept, the caller renders every page.
var errKeptChanged = errors.New("report: the previous generation is not the one this builder wrote")

// write makes pages the new generation of the report under dir: files
// whose bytes equal the current generation's are hard links to them,
// the others are written, and each page keep names is linked from the
// generation it names after its digest is checked (errKeptChanged
// otherwise); then the generation is renamed in, current
// and the entry are switched (each a rename), and generations older
// than the one replaced are removed.
func write(dir string, pages map[string][]byte, keep *kept) (*Result, error) {
	if err := os.MkdirAll(filepath.Join(dir, GenerationsDir), 0o755); err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	defer unlock()
	gens := filepath.Join(dir, GenerationsDir)
	prevName := currentGeneration(dir)
	var prev string
	var old manifest
	if prevName != "" {
		prev = filepath.Join(gens, prevName)
		if b, err := os.ReadFile(filepath.Join(prev, ManifestFile)); err == nil {
			if err := json.Unmarshal(b, &old); err != nil {
				return nil, fmt.Errorf("report: %s: %w", filepath.Join(prev, ManifestFile), err)
			}
		} else if !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("report: %w", err)
		}
	}
	if keep != nil && prev == "" {
		return nil, fmt.Errorf("%w: there is none", errKeptChanged)
	}
	next := manifest{Files: map[string]specs.Digest{}}
	names := make([]string, 0, len(pages))
	for p, b := range pages {
		names = append(names, p)
		next.Files[p] = specs.DigestOf(b)
	}
	sort.Strings(names)
	var keepPaths []string
	if keep != nil {
		for _, p := range keep.paths {
			if _, ok := pages[p]; ok {
				continue
			}
			d, ok := keep.files[p]
			if !ok {
				return nil, fmt.Errorf("%w: %s is not in its manifest", errKeptChanged, p)
			}
			next.Files[p] = d
			keepPaths = append(keepPaths, p)
		}
	}
	mb, err := json.MarshalIndent(next, "", " ")
	if err != nil {
		return nil, err
	}
	mb = append(mb, '\n')
	name := generationID(mb)
	gen := filepath.Join(gens, name)
	res := &Result{Index: filepath.Join(dir, EntryFile), Dir: gen, Pages: len(next.Files), files: next.Files}

	if name != prevName {
		if _, err := os.Stat(filepath.Join(gen, ManifestFile)); err != nil {
			// Only a complete generation is ever renamed in, so one
			// that exists already holds these pages.
			tmp, err := os.MkdirTemp(gens, ".tmp-")
			if err != nil {
				return nil, fmt.Errorf("report: %w", err)
			}
			defer os.RemoveAll(tmp)
			for _, p := range keepPaths {
				// The rule of an incremental report: a page not rendered
				// again is linked only when its bytes are the ones this
				// builder wrote.
				pp, fp := filepath.Join(prev, filepath.FromSlash(p)), filepath.Join(tmp, filepath.FromSlash(p))
				if cur, err := os.ReadFile(pp); err != nil || specs.DigestOf(cur) != keep.files[p] {
					return nil, fmt.Errorf("%w: %s changed", errKeptChanged, p)
				}
				if err := linkFile(pp, fp); err != nil {
					return nil, fmt.Errorf("report: %w", err)
				}
			}
			for _, p := range names {
				b := pages[p]
				fp := filepath.Join(tmp, filepath.FromSlash(p))
				if prev != "" && old.Files[p] == next.Files[p] {
					pp := filepath.Join(prev, filepath.FromSlash(p))
					if cur, err := os.ReadFile(pp); err == nil && bytes.Equal(cur, b) {
						if err := linkFile(pp, fp); err == nil {
							continue
						}
					}
				}
				if err := writeFile(fp, b); err != nil {
					return nil, err
				}
				res.Written++
				res.Changed = append(res.Changed, p)
			}
			if err := writeFile(filepath.Join(tmp, ManifestFile), mb); err != nil {
				return nil, err
			}
			if err := os.Chmod(tmp, 0o755); err != nil {
				return nil, fmt.Errorf("report: %w", err)
			}
			if err := os.Rename(tmp, gen); err != nil {
				return nil, fmt.Errorf("report: %w", err)
			}
		}
		for p := range old.Files {
			if _, ok := next.Files[p]; !ok {
				res.Removed++
				res.Changed = append(res.Changed, p)
			}
		}
		sort.Strings(res.Changed)
		if err := switchLink(filepath.Join(dir, CurrentLink), GenerationsDir+"/"+name); err != nil {
			return nil, err
		}
	}
	entry := entryPage(pages["index.html"], GenerationsDir+"/"+name+"/")
	if cur, err := os.ReadFile(res.Index); err != nil || !bytes.Equal(cur, entry) {
		if err := writeFile(res.Index, entry); err != nil {
			return nil, err
		}
	}
	if name != prevName {
		if err := prune(gens, name, prevName); err != nil {
			return nil, err
		}
	}
	if err := removeFlat(dir); err != nil {
		return nil, err
	}
	return res, nil
}

// entryPage is the index of generation gen ("gens/<id>/") as the
// directory's own index.html: a <base> makes its links lead into gen.
func entryPage(index []byte, gen string) []byte {
	const head = "<head>\n"
	i := bytes.Index(index, []byte(head))
	if i < 0 {
		return index
	}
	i += len(head)
	out := append([]byte(nil), index[:i]...)
	out = append(out, `<base href="`+gen+`">`+"\n"...)
	return append(out, index[i:]...)
}

// switchLink points the symbolic link at to target atomically: a new
// link under a temporary name, renamed over the old one.
func switchLink(at, target string) error {
	tmp := at + ".tmp"
	_ = os.Remove(tmp)
	if err := os.Symlink(target, tmp); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if err := os.Rename(tmp, at); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return nil
}

// prune removes every generation but keep and prev, and what a report
// that stopped half-way left (the lock is held, so none is running).
func prune(gens, keep, prev string) error {
	es, err := os.ReadDir(gens)
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	for _, e := range es {
		if n := e.Name(); n != keep && n != prev {
			if err := os.RemoveAll(filepath.Join(gens, n)); err != nil {
				return fmt.Errorf("report: %w", err)
			}
		}
	}
	return nil
}

// removeFlat removes a report of the layout before generations (its
// files and manifest straight in dir): only what its manifest lists.
func removeFlat(dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	var old manifest
	if err := json.Unmarshal(b, &old); err != nil {
		return fmt.Errorf("report: %s: %w", filepath.Join(dir, ManifestFile), err)
	}
	for p := range old.Files {
		if p == EntryFile || !fs.ValidPath(p) || strings.HasPrefix(p, GenerationsDir+"/") {
			continue // the entry now; not a path this package wrote
		}
		if err := os.Remove(filepath.Join(dir, filepath.FromSlash(p))); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("report: %w", err)
		}
	}
	if err := os.Remove(filepath.Join(dir, ManifestFile)); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return nil
}

// lockDir holds an exclusive lock on dir's lock file until the returned
// function is called; another report writing there is an error.
func lockDir(dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("report: %s: another report is being written there: %w", dir, err)
	}
	return func() { f.Close() }, nil
}

// linkFile makes fp a hard link to the unchanged page from, creating
// its directory.
func linkFile(from, fp string) error {
	if err := os.MkdirAll(filepath.Dir(fp), 0o755); err != nil {
		return err
	}
	return os.Link(from, fp)
}

// writeFile writes a new file fp (in a generation not yet renamed in).
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
