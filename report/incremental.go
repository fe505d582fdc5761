package report

import (
	"context"
	"errors"
	"maps"
	"sort"
	"sync"
	"time"

	"signet.dev/signet/evidence/audit"
	"signet.dev/signet/specs"
)

// Builder writes report after report of one branch into one directory
// (the daemon keeps one), each after the first incremental: it keeps in
// memory what its last clean report computed (the audit's end state,
// the verified documents of every run, the model's node lists and the
// generation's manifest) and starts the next one from it. Nothing of
// that is written out or read back: it is trusted because this process
// computed it, so no auditor key is needed. An incremental report
//   - audits only the commits after the last report's tip
//     (audit.Options.Resume) and joins what that audit verified with the
//     runs it kept;
//   - renders the index, the archive pages from the first that lists a
//     run read again (and the last one before, whose link to a new page
//     changes), and the run, node and profile pages of those runs;
//   - links every other page from the current generation, each only
//     after its bytes there have the digest the manifest of its own last
//     report gave them.
//
// It fails closed: when the options or the trust policy changed, the
// audit since refuses the kept state (the branch was rewritten), finds
// anything (a finding may withhold runs whose pages it would keep), or a
// page to keep is not what it wrote (another writer, changed bytes), the
// report is built in full, as Build does. Its bytes are those of a full
// report of the same branch.
//
// A Builder builds one report at a time (Build holds a lock); the zero
// value is ready to use.
type Builder struct {
	mu   sync.Mutex
	last *lastReport
	// once: the builder of Build, which keeps nothing.
	once bool
}

// lastReport is what a Builder keeps of its last clean report.
type lastReport struct {
	// key is the options the report was built with.
	key buildKey
	// resume is the audit's end state; rep the audit joined with every
	// earlier one since the last full report (as a whole-branch audit
	// would report it); docs the verified documents of every run, by
	// run directory.
	resume *audit.Resume
	rep    *audit.Report
	docs   map[string]*audit.RunDocuments
	// chrono are the run directories oldest first (the archive pages'
	// order); nodes and profiles each run directory's pages.
	chrono   []string
	nodes    map[string][]nodeKey
	profiles map[string]string
	// files is the manifest of the generation written.
	files map[string]specs.Digest
}

// buildKey is what must not change between two reports for the second
// to start from the first.
type buildKey struct {
	repo, branch, out string
	policy            specs.Digest
	pageSize          int
	ttl, expiring     time.Duration
	grace             time.Duration
}

func keyOf(opts *Options) buildKey {
	return buildKey{repo: opts.Repo, branch: opts.Branch, out: opts.Out, policy: opts.Policy.Digest(), pageSize: opts.PageSize,
		ttl: opts.TTL, expiring: opts.Expiring, grace: opts.Grace}
}

// selection names the pages an incremental report renders again (the
// index and the style sheet always).
type selection struct {
	runs     map[string]bool
	nodes    map[nodeKey]bool
	profiles map[string]bool
	// archivesFrom is the first archive page rendered again.
	archivesFrom int
}

// Build writes the report of the branch opts names to opts.Out, from
// the last report this Builder wrote when it can (see Builder), else in
// full. Errors are Build's.
func (b *Builder) Build(ctx context.Context, opts Options) (*Result, error) {
	if err := opts.withDefaults(); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	last := b.last
	b.last = nil // kept again only after a clean report
	if last != nil && last.key == keyOf(&opts) {
		res, err := b.incremental(ctx, opts, last)
		if err == nil || !errors.Is(err, errFull) {
			return res, err
		}
	}
	return b.full(ctx, opts)
}

// errFull: the incremental report cannot start from the last one; the
// caller builds in full.
var errFull = errors.New("report: build in full")

// full audits the whole branch and renders every page.
func (b *Builder) full(ctx context.Context, opts Options) (*Result, error) {
	col := &collector{runs: map[string]*audit.RunDocuments{}}
	ao := opts.auditOptions(col, nil)
	ao.KeepResume = !b.once
	t0 := time.Now()
	rep, err := audit.Branch(ctx, ao)
	if err != nil {
		return nil, err
	}
	return b.finish(opts, rep, col.runs, nil, time.Since(t0))
}

// incremental audits the commits after last's tip and renders the pages
// that changed; errFull when it cannot.
func (b *Builder) incremental(ctx context.Context, opts Options, last *lastReport) (*Result, error) {
	col := &collector{runs: map[string]*audit.RunDocuments{}}
	t0 := time.Now()
	rep, err := audit.Branch(ctx, opts.auditOptions(col, last.resume))
	took := time.Since(t0)
	if errors.Is(err, audit.ErrCheckpoint) {
		return nil, errFull // rewritten, or another policy
	} else if err != nil {
		return nil, err
	}
	if !rep.Clean() {
		// A finding may withhold runs (every run, for a branch finding)
		// whose pages would be kept: render them all from the whole
		// branch's audit.
		return nil, errFull
	}
	// Join the audit since with the last one, as a whole-branch audit
	// reports it: every run, every commit and document counted.
	joined := *rep
	joined.Commits += last.rep.Commits
	joined.Documents += last.rep.Documents
	read := map[string]bool{}
	for _, r := range rep.Runs {
		if col.runs[r.Dir] == nil {
			return nil, errFull // never a kept document for a run read again
		}
		read[r.Dir] = true
	}
	joined.Runs = make([]audit.RunReport, 0, len(last.rep.Runs)+len(rep.Runs))
	for _, r := range last.rep.Runs {
		if !read[r.Dir] {
			joined.Runs = append(joined.Runs, r)
		}
	}
	joined.Runs = append(joined.Runs, rep.Runs...)
	sort.SliceStable(joined.Runs, func(i, j int) bool {
		if !joined.Runs[i].AdmittedAt.Equal(joined.Runs[j].AdmittedAt) {
			return joined.Runs[i].AdmittedAt.Before(joined.Runs[j].AdmittedAt)
		}
		return joined.Runs[i].Dir < joined.Runs[j].Dir
	})
	docs := maps.Clone(last.docs)
	maps.Copy(docs, col.runs)
	return b.finish(opts, &joined, docs, &changed{last: last, read: read}, took)
}

// changed is what an incremental report renders again: the runs its
// audit read (read, by directory) against the last report.
type changed struct {
	last *lastReport
	read map[string]bool
}

// finish renders the report of rep and docs (only the pages ch makes
// stale when ch is set) and writes it; it keeps the state for the next
// report when rep is clean.
func (b *Builder) finish(opts Options, rep *audit.Report, docs map[string]*audit.RunDocuments, ch *changed, audited time.Duration) (*Result, error) {
	t0 := time.Now()
	var rendered time.Duration
	m := newModel(rep, docs, opts.Policy, opts.TTL, opts.Expiring)
	nodes := m.nodes()
	st := &lastReport{key: keyOf(&opts), resume: rep.Resume, rep: rep, docs: docs, nodes: map[string][]nodeKey{}, profiles: map[string]string{}}
	for k, rs := range nodes {
		for _, nr := range rs {
			st.nodes[nr.Run.Dir] = append(st.nodes[nr.Run.Dir], k)
		}
	}
	for i := len(m.Runs) - 1; i >= 0; i-- {
		r := m.Runs[i]
		st.chrono = append(st.chrono, r.Dir)
		st.profiles[r.Dir] = r.Profile
	}
	var res *Result
	var err error
	if ch != nil {
		only := ch.selection(st, opts.PageSize)
		var pages map[string][]byte
		var all []string
		if pages, all, err = m.somePages(opts.PageSize, nodes, only); err != nil {
			return nil, err
		}
		rendered = time.Since(t0)
		res, err = write(opts.Out, pages, &kept{paths: all, files: ch.last.files})
		if err == nil {
			res.Incremental, res.Rendered = true, len(pages)
		}
	}
	if ch == nil || errors.Is(err, errKeptChanged) {
		var pages map[string][]byte
		if pages, err = m.pages(opts.PageSize); err != nil {
			return nil, err
		}
		if ch == nil {
			rendered = time.Since(t0)
		}
		res, err = write(opts.Out, pages, nil)
		if err == nil {
			res.Rendered = len(pages)
		}
	}
	if err != nil {
		return nil, err
	}
	res.Audit = rep
	res.Took = Phases{Audit: audited, Render: rendered, Write: time.Since(t0) - rendered}
	if rep.Clean() && rep.Resume != nil {
		st.files = res.files
		b.last = st
	}
	return res, nil
}

// selection: the pages of the runs read again, of their nodes and
// profiles (in the last report and in this one, st), and the archive
// pages from the first whose list changed, and the last report's last
// one (its link to a newer page).
func (ch *changed) selection(st *lastReport, pageSize int) *selection {
	s := &selection{runs: ch.read, nodes: map[nodeKey]bool{}, profiles: map[string]bool{}}
	for dir := range ch.read {
		for _, rep := range []*lastReport{ch.last, st} {
			for _, k := range rep.nodes[dir] {
				s.nodes[k] = true
			}
			if p, ok := rep.profiles[dir]; ok {
				s.profiles[p] = true
			}
		}
	}
	first := len(st.chrono)
	for i, dir := range st.chrono {
		if ch.read[dir] || i >= len(ch.last.chrono) || ch.last.chrono[i] != dir {
			first = i
			break
		}
	}
	s.archivesFrom = first/pageSize + 1
	if lastPage := (len(ch.last.chrono) + pageSize - 1) / pageSize; lastPage > 0 {
		s.archivesFrom = min(s.archivesFrom, lastPage)
	}
	return s
}

// auditOptions are the audit's options for a report, starting from
// resume when set; the audit keeps its end state for the next report.
func (opts *Options) auditOptions(col *collector, resume *audit.Resume) audit.Options {
	return audit.Options{Repo: opts.Repo, Auth: opts.Auth, Branch: opts.Branch, Policy: opts.Policy,
		Now: opts.Now, Grace: opts.Grace, Workers: opts.Workers, Progress: opts.Progress, Observe: col.observe, Resume: resume, KeepResume: true}
}
