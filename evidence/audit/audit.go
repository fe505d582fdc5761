package audit

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"

	"signet.dev/signet/evidence"
	"signet.dev/signet/internal/pagetable"
	"signet.dev/signet/signing"
	"signet.dev/signet/specs"
)

// withDefaults fills the options Branch and Verify share: the default
// branch, the current time and DefaultGrace.
func withDefaults(branch *string, now *time.Time, grace *time.Duration) {
	if *branch == "" {
		*branch = evidence.DefaultBranch
	}
	if now.IsZero() {
		*now = time.Now()
	}
	if *grace == 0 {
		*grace = DefaultGrace
	}
}

// DefaultGrace is how long after its run deadline an admitted run may go
// without a receipt before the audit flags it, when Options.Grace is
// zero: enough for a reconciler restart to finish it.
const DefaultGrace = 15 * time.Minute

// DefaultMemoryLimit is the soft memory limit (runtime/debug.SetMemoryLimit)
// signet audit and signet report set for their process unless told
// otherwise. What an audit keeps grows with the branch (a few KB a run:
// docs/performance.md), and without a limit the collector lets the heap
// grow to twice what is live: at 10^5 runs that alone passes 1 GiB. With
// it the collector runs more often as the heap nears the limit; past it
// (a branch whose live state is larger) the runtime bounds the
// collector's share of the CPU and the audit still finishes. The library
// sets no limit itself: it is the process's to choose.
const DefaultMemoryLimit = 768 << 20

// Options says what to audit.
type Options struct {
	// Repo is a local Git repository (bare or not), or a remote URL
	// (file://, http(s)://, ssh://) fetched into a temporary bare
	// repository first.
	Repo string
	// Auth is used for a remote Repo.
	Auth evidence.Auth
	// Branch is the evidence branch, DefaultBranch when empty.
	Branch string
	// Policy is the trust policy the signatures are checked against.
	// Required.
	Policy *signing.TrustPolicy
	// Since pins a commit (hash or revision) that the branch must descend
	// from; a branch that does not is reported as history-rewritten.
	Since string
	// Now is the audit's time (time.Now when zero): runs admitted without
	// a receipt past their deadline plus Grace at Now are flagged.
	Now time.Time
	// Grace is DefaultGrace when zero.
	Grace time.Duration
	// Workers verifies signatures on this many goroutines;
	// runtime.GOMAXPROCS(0) when zero.
	Workers int
	// Observe, when set, is called with the verified documents of every
	// run once the audit has checked it (again if a later file reopens
	// the run: the last call holds), from several goroutines at once.
	// It sees documents before the whole-branch checks (receipt chain,
	// index, copies) ran: Report.Findings, not the call, says whether a
	// run is clean.
	Observe func(*RunDocuments)
	// Checkpoint, when set, is a signed audit checkpoint (named
	// CheckpointName in errors) to start from: verified against the
	// trust policy's auditors at Now, for this branch and this trust
	// policy, its tip on the branch's first-parent history; then only
	// the commits after its tip are read. A checkpoint that fails any of
	// these is an error wrapping ErrCheckpoint, never a clean report.
	Checkpoint     []byte
	CheckpointName string
	// CheckpointPages holds the pages of Checkpoint's state tables
	// (Report.CheckpointPages of the audit that wrote it, or a
	// pagetable.DirStore of the directory they were written to). A page
	// missing or not the one the checkpoint names refuses it.
	CheckpointPages pagetable.Store
	// CheckpointKey, when set, signs a checkpoint of a clean audit's end
	// (Report.Checkpoint); its key must be an auditor of the policy.
	CheckpointKey *signing.PrivateKey
	// WritePages is where the pages of that checkpoint's state tables
	// are written (a new pagetable.MemStore when nil); pages of
	// CheckpointPages it keeps are carried there (hard links between
	// directories). Report.CheckpointPages is it.
	WritePages pagetable.Store
	// Resume, when set, is the state a clean audit of this branch in this
	// process ended with (Report.Resume): the audit continues from it as
	// from a checkpoint (the same checks but the signature: this branch,
	// this trust policy, its tip on the first-parent history; an error
	// wrapping ErrCheckpoint otherwise). Not with Checkpoint.
	Resume *Resume
	// KeepResume sets Report.Resume at the end of a clean audit.
	KeepResume bool
	// Progress, when set, is called as the audit goes: when each phase
	// begins and every ProgressEvery commits within one, from the
	// audit's goroutine (a slow Progress slows the audit). An audit of
	// 10^5 runs takes tens of minutes; this is how a caller shows it.
	Progress func(Progress)
}

// Phases of an audit, in order (Progress.Phase).
const (
	// PhaseHistory reads the first-parent history from the tip back.
	PhaseHistory = "history"
	// PhaseReplay reads what each commit added, oldest first, verifies
	// the documents and checks each run once its receipt has landed.
	PhaseReplay = "replay"
	// PhaseBranch runs the checks that need the whole branch read.
	PhaseBranch = "whole-branch checks"
)

// ProgressEvery is how many commits an audit reads between two calls of
// Options.Progress within a phase.
const ProgressEvery = 1024

// progressEvery is ProgressEvery; tests lower it (SetProgressEvery).
var progressEvery = ProgressEvery

// Progress is how far an audit has come (Options.Progress).
type Progress struct {
	// Phase is PhaseHistory, PhaseReplay or PhaseBranch.
	Phase string
	// Commits is how many commits the phase has read; Total, how many
	// it will (0 while reading the history: not known before its root).
	Commits, Total int
	// Runs is how many runs with a receipt have been checked so far.
	Runs int
}

// Branch audits the evidence branch of opts.Repo, reading objects only
// (never a worktree), and proves what DESIGN §6 says it must: append-only
// first-parent history with commits signed by evidence signers, every
// document signed by a key allowed to sign evidence and valid when it was
// committed, every digest binding, lifecycle order and completeness per
// run, approvals behind admissions, cancels and releases, the receipt
// chain of every cluster, the run-ID index, and (with Since) that the
// branch was not rewritten. Problems with the evidence are Findings in
// the report; an error means the branch could not be read at all (a
// missing repository or branch, an unreadable object, a failed fetch).
func Branch(ctx context.Context, opts Options) (*Report, error) {
	if opts.Policy == nil {
		return nil, errors.New("evidence: audit.Options.Policy is required")
	}
	withDefaults(&opts.Branch, &opts.Now, &opts.Grace)
	if opts.Workers <= 0 {
		opts.Workers = runtime.GOMAXPROCS(0)
	}
	rd, err := openBranch(ctx, opts.Repo, opts.Auth, opts.Branch)
	if err != nil {
		return nil, err
	}
	defer rd.close()
	if opts.Checkpoint != nil && opts.Resume != nil {
		return nil, errors.New("evidence: audit.Options: Checkpoint and Resume are exclusive")
	}
	rep, err := branch(ctx, rd, opts, true)
	if errors.Is(err, errPastChanged) {
		// A commit after the checkpoint changed or deleted a file it
		// vouched for: a finding whatever else holds, and one whose
		// consequences every rule must see as a full audit does.
		rep, err = branch(ctx, rd, opts, false)
		if rep != nil {
			rep.FullAudit = "a commit after the checkpoint's tip changed or deleted a file: the whole branch was audited"
		}
	}
	return rep, err
}

// branch is Branch on rd: from opts' checkpoint or resume state when
// fromCheckpoint, else of the whole branch.
func branch(ctx context.Context, rd *openedBranch, opts Options, fromCheckpoint bool) (*Report, error) {
	a := newAuditor(rd, rd.display, rd.branch, opts)
	a.stream = true
	defer func() { a.spill.close() }()
	var cp *Checkpoint
	var err error
	switch {
	case !fromCheckpoint:
	case opts.Checkpoint != nil:
		a.pages = opts.CheckpointPages
		if cp, a.from, err = a.openCheckpoint(opts.CheckpointName, opts.Checkpoint); err != nil {
			return nil, err
		}
	case opts.Resume != nil:
		a.opts.CheckpointName = resumeName
		if cp, a.from, err = a.resume(opts.Resume); err != nil {
			return nil, err
		}
	}
	if err := a.walk(ctx, cp); err != nil {
		return nil, err
	}
	if afterWalk != nil {
		afterWalk()
	}
	a.progress(PhaseBranch, 0, 0)
	a.checkSince()
	a.checkAll()
	if a.ioErr != nil {
		return nil, a.ioErr
	}
	rep := a.report()
	if rep.Clean() && opts.CheckpointKey != nil {
		pages := opts.WritePages
		if pages == nil {
			pages = pagetable.NewMemStore()
		}
		if rep.Checkpoint, err = a.checkpoint(opts.CheckpointKey, pages); err != nil {
			return nil, err
		}
		rep.CheckpointPages = pages
	}
	if rep.Clean() && opts.KeepResume {
		pages := pagetable.Store(pagetable.NewMemStore())
		st, err := a.endState(pages)
		if err != nil {
			return nil, err
		}
		rep.Resume = &Resume{cp: *st, pages: pages}
	}
	return rep, nil
}

// commitInfo is one commit of the first-parent history, oldest first.
type commitInfo struct {
	hash   plumbing.Hash
	tree   plumbing.Hash
	when   time.Time
	index  int
	sigErr *sigResult
}

// fileRec is one version of a file added by a commit.
type fileRec struct {
	path   string
	blob   plumbing.Hash
	commit *commitInfo
	// landed is the commit where the path first appeared: lifecycle
	// order is judged by it, whatever later commits did to the file.
	landed *commitInfo
	digest specs.Digest
	data   []byte // node snapshots, index entries and chain links only
	// link is a chain link restored from a checkpoint, decoded (data is
	// then nil): the audit that wrote it decoded it.
	link *evidence.ChainLink
	doc  *docRec
	// ref: a record of the checkpoint's tables (restoreReferences), not
	// checked again itself.
	ref bool
}

// auditor holds one audit's state.
type auditor struct {
	rd BranchReader
	// repo and branch name what rd reads, in the report.
	repo, branch string
	opts         Options
	policy       *signing.TrustPolicy
	commits      []*commitInfo
	byHash       commitIndex
	// files is the latest version of every path ever added; versions
	// keeps every version of paths that changed.
	files    map[string]*fileRec
	versions map[string][]*fileRec
	findings []Finding
	docs     int
	runs     []*runAudit
	pool     *verifyPool
	// Trees read for the current and the previous commit.
	curTrees, prevTrees map[plumbing.Hash][]object.TreeEntry

	// Whole-branch audits group run directories while replaying
	// (runsByDir) and check a run once its receipt has landed, in
	// batches of closedRunBatch (closed): its decoded documents are then
	// dropped, so that memory grows with the runs still open rather than
	// with the branch. A file added later to a checked run reopens it.
	stream    bool
	runsByDir map[string]*runAudit
	closed    []*runAudit
	// sigFindings are the signature verdicts of the files compact
	// dropped (sigVerdicts); closedFiles counts those files.
	sigFindings []sigFinding
	closedFiles int
	// sigDone counts the commits whose signature verdicts are reported
	// (commitVerdicts).
	sigDone int
	// spill holds the compact file records of checked runs; ioErr is the
	// first error reading it back in a whole-branch check.
	spill *spill
	ioErr error
	// bindings: list every digest binding checked in the run reports
	// (Verify, one run); a whole-branch audit reports only the ones that
	// fail, as findings.
	bindings bool
	// older is the first-parent commit just before those read, when the
	// history was read back to a run directory's first commit only.
	older plumbing.Hash
	// base is the tip of the checkpoint the audit started from (nil for
	// a whole-branch audit) and baseLen the number of first-parent
	// commits up to it; commits then holds those after it. tab is the
	// checkpoint's state tables (named tabName in errors, its pages in
	// pages), pastCommits the commits up to the tip looked up in them,
	// noRun the directories they hold no finished run at, heads the last
	// chain sequence of each cluster at the tip.
	base        *commitInfo
	baseLen     int
	tab         *pagetable.Tree
	tabName     string
	pages       pagetable.Store
	pastCommits map[int]*commitInfo
	noRun       map[string]bool
	heads       map[string]int64
	// pastMu guards pastCommits and ioErr, which runs checked on
	// several goroutines reach through commitByHash and parentOf.
	pastMu sync.Mutex
	// newFiles counts the files read after the checkpoint's tip.
	newFiles int
	from     *CheckpointInfo
	// hist is the replay state that proves firings (checkFiringHistory):
	// restored from a checkpoint, then at the end of the audit.
	hist historyState
	// readMu serializes the blob reads of documents (Observe) when the
	// object source is not safe for concurrent use.
	readMu sync.Mutex
	// checkedRuns counts the runs with a receipt checked (Progress).
	checkedRuns int
}

// afterWalk, when set (tests), is called by Branch between the walk and
// the whole-branch checks: the state then is what the audit keeps of the
// whole history.
var afterWalk func()

// closedRunBatch is how many runs with a receipt the replay lets
// accumulate before it checks them and drops their decoded documents.
var closedRunBatch = 256

func newAuditor(rd BranchReader, repo, branch string, opts Options) *auditor {
	return &auditor{rd: rd, repo: repo, branch: branch, opts: opts, policy: opts.Policy, byHash: newCommitIndex(),
		files: map[string]*fileRec{}, versions: map[string][]*fileRec{},
		curTrees: map[plumbing.Hash][]object.TreeEntry{}, prevTrees: map[plumbing.Hash][]object.TreeEntry{},
		runsByDir: map[string]*runAudit{}}
}

func (a *auditor) add(f Finding) { a.findings = append(a.findings, f) }

// progress tells Options.Progress where the audit is.
func (a *auditor) progress(phase string, commits, total int) {
	if a.opts.Progress != nil {
		a.opts.Progress(Progress{Phase: phase, Commits: commits, Total: total, Runs: a.checkedRuns})
	}
}

// walk reads the first-parent history from the root to the tip, checks
// that each commit only adds files, and reads every added file once,
// handing signed documents to the verification pool.
func (a *auditor) walk(ctx context.Context, cp *Checkpoint) error {
	a.pool = newVerifyPool(a.rd, a.policy, a.opts.Workers)
	defer a.pool.close()
	var open []*runAudit
	if cp != nil {
		var err error
		if open, err = a.restore(a.opts.CheckpointName, cp); err != nil {
			return err
		}
	}
	if err := a.history(ctx, ""); err != nil {
		return err
	}
	for _, r := range open {
		if _, err := a.reopen(r); err != nil {
			return err
		}
	}
	return a.replay(ctx, "")
}

// checkClosed checks the runs closed since the last batch, once their
// documents are verified, and drops what only their own checks read.
func (a *auditor) checkClosed() error {
	if err := a.pool.wait(); err != nil {
		return err
	}
	a.commitVerdicts()
	batch := a.closed
	a.closed = nil
	a.checkRuns(batch)
	a.checkedRuns += len(batch)
	for _, r := range batch {
		if err := r.compact(); err != nil {
			return err
		}
	}
	return nil
}

// checkAll runs every check that needs the whole branch read.
func (a *auditor) checkAll() {
	// Signature verdicts of every version of every signed document: those
	// of checked runs were recorded when compact dropped their files.
	var paths []string
	for p := range a.files {
		paths = append(paths, p)
		a.sigVerdicts(p)
	}
	sort.Strings(paths)
	sort.SliceStable(a.sigFindings, func(i, j int) bool {
		x, y := a.sigFindings[i], a.sigFindings[j]
		return x.path < y.path || x.path == y.path && x.version < y.version
	})
	for _, s := range a.sigFindings {
		a.add(s.f)
	}
	a.sigFindings = nil
	// The layout. Run directories were grouped during the replay
	// (addToRun), and those with a receipt mostly checked already.
	runs := a.runsByDir
	for _, p := range paths {
		if a.files[p].landed.index < a.baseLen {
			continue // its path passed when the checkpoint's audit read it
		}
		top, _, _ := strings.Cut(p, "/")
		switch top {
		case "runs":
			if rp, ok := evidence.ParsePath(p); !ok || !rp.InRun() {
				a.add(Finding{Rule: RuleLayout, Path: p, Message: "not inside a run directory runs/<cluster>/<YYYY>/<MM>/<DD>/<xx>/<run>/"})
			}
		case "ids", "chain":
		default:
			a.add(Finding{Rule: RuleLayout, Path: p, Message: "outside the evidence layout (ids/, runs/, chain/)"})
		}
	}
	// Run order is path order: a directory's files sort together.
	var open []*runAudit
	for _, r := range runs {
		if !r.checked {
			open = append(open, r)
		}
	}
	sort.Slice(open, func(i, j int) bool { return open[i].dir+"/" < open[j].dir+"/" })
	a.checkRuns(open)
	if a.tab != nil {
		if err := a.restoreReferences(); err != nil {
			a.failIO(err)
			return
		}
	}
	for _, r := range runs {
		a.runs = append(a.runs, r)
	}
	sort.Slice(a.runs, func(i, j int) bool { return a.runs[i].dir+"/" < a.runs[j].dir+"/" })
	for _, r := range a.runs {
		a.findings = append(a.findings, r.findings...)
		r.findings = nil
	}
	a.checkIndex(runs)
	a.checkFiringSequences(runs)
	a.checkFiringHistory(runs)
	a.checkCopies()
	a.checkChains()
	for _, r := range a.runs {
		r.finish()
	}
}

// checkRuns checks runs independently, on as many goroutines as the
// audit has workers.
func (a *auditor) checkRuns(runs []*runAudit) {
	next := make(chan *runAudit)
	var wg sync.WaitGroup
	for range min(max(1, a.opts.Workers), len(runs)) {
		wg.Go(func() {
			for r := range next {
				r.check()
				r.checked = true
				if a.opts.Observe != nil {
					a.opts.Observe(r.documents())
				}
			}
		})
	}
	for _, r := range runs {
		next <- r
	}
	close(next)
	wg.Wait()
}

// checkSince: the branch must descend from the pinned commit.
func (a *auditor) checkSince() {
	if a.opts.Since == "" {
		return
	}
	var h plumbing.Hash
	if len(a.opts.Since) == 40 && plumbing.IsHash(a.opts.Since) {
		h = plumbing.NewHash(a.opts.Since)
	} else if rh, ok := a.rd.Resolve(a.opts.Since); ok {
		h = rh
	} else {
		a.add(Finding{Rule: RuleHistoryRewritten, Commit: a.opts.Since, Message: fmt.Sprintf("pinned revision %q is not in the repository: the branch was rewritten, or the pin is not a commit of it", a.opts.Since)})
		return
	}
	if a.commitByHash(h) != nil {
		return
	}
	msg := fmt.Sprintf("branch %s at %s does not descend from the pinned commit %s: its history was rewritten", a.branch, shortHash(a.rd.Tip().String()), shortHash(h.String()))
	if !a.rd.Has(h) {
		msg += " (the pinned commit is not even in the repository any more)"
	}
	a.add(Finding{Rule: RuleHistoryRewritten, Commit: h.String(), Message: msg})
}

// report assembles the audit's report, findings sorted by run and path.
func (a *auditor) report() *Report {
	files := len(a.files) + a.closedFiles
	if a.tab != nil {
		files = a.newFiles
	}
	rep := &Report{Repo: a.repo, Branch: a.branch, Tip: a.rd.Tip().String(), Since: a.opts.Since,
		TrustPolicyDigest: a.policy.Digest(), Commits: len(a.commits), Files: files, Documents: a.docs,
		Runs: []RunReport{}, Findings: dedupe(a.findings)}
	byRun := map[string][]Finding{}
	for _, f := range rep.Findings {
		if f.Run != "" {
			byRun[f.Run] = append(byRun[f.Run], f)
		}
	}
	for _, r := range a.runs {
		if r.restored {
			continue // checked by the audit that wrote the checkpoint
		}
		r.report.Findings = byRun[r.id]
		rep.Runs = append(rep.Runs, r.report)
	}
	sort.SliceStable(rep.Runs, func(i, j int) bool {
		if !rep.Runs[i].AdmittedAt.Equal(rep.Runs[j].AdmittedAt) {
			return rep.Runs[i].AdmittedAt.Before(rep.Runs[j].AdmittedAt)
		}
		return rep.Runs[i].Dir < rep.Runs[j].Dir
	})
	rep.Checkpoint = nil
	rep.From = a.from
	tip := a.base
	if len(a.commits) > 0 {
		tip = a.commits[len(a.commits)-1]
	}
	if rep.Clean() && tip != nil {
		rep.Pin = &Pin{Branch: a.branch, Commit: tip.hash.String(), Committed: tip.when.UTC()}
	}
	return rep
}
