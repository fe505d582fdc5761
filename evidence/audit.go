package evidence

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/storage/filesystem"

	"signet.dev/signet/internal/gitobj"
	"signet.dev/signet/signing"
	"signet.dev/signet/specs"
)

// Rules an audit finding names. Each is stable: scripts may match on it.
const (
	// RuleAppendOnly: a commit changed or deleted a file of its parent.
	RuleAppendOnly = "append-only"
	// RuleLinearHistory: a merge commit on the evidence branch.
	RuleLinearHistory = "linear-history"
	// RuleCommitSignature: a commit is unsigned or its SSH signature does
	// not verify with a key allowed to sign evidence, valid at commit time.
	RuleCommitSignature = "commit-signature"
	// RuleSignature: a document's DSSE signature does not verify (forged or
	// corrupted), or the document is not a well-formed envelope.
	RuleSignature = "signature"
	// RuleUntrustedSigner: a document verifies only with a key that is not
	// allowed to sign evidence, or was not valid when it was committed.
	RuleUntrustedSigner = "untrusted-signer"
	// RulePredicate: the predicate type does not match the file name, or
	// the predicate does not decode.
	RulePredicate = "predicate"
	// RuleLayout: a file where the evidence layout puts none, or a path
	// that does not match what the document says.
	RuleLayout = "layout"
	// RuleLifecycleOrder: a document landed before the one it depends on,
	// or without it.
	RuleLifecycleOrder = "lifecycle-order"
	// RuleIncompleteRun: an admitted run has no receipt past its deadline
	// plus AuditOptions.Grace.
	RuleIncompleteRun = "incomplete-run"
	// RuleDigestBinding: a document binds another file (or spec object)
	// by a digest that does not match it.
	RuleDigestBinding = "digest-binding"
	// RuleVerdict: a recorded verdict is not what the documents it sums
	// up imply.
	RuleVerdict = "verdict"
	// RuleRunSummary: the run evidence (evidence.json) is not exactly
	// Summarize of the run's check documents and cancel: its run verdict,
	// per-check or per-node verdicts or coverage say something else.
	RuleRunSummary = "run-summary"
	// RuleReceiptChain: a gap, fork or broken link in a cluster's receipt
	// chain.
	RuleReceiptChain = "receipt-chain"
	// RuleApproval: an admission, cancel or release is not backed by
	// approvals that meet the trust policy's threshold at its time.
	RuleApproval = "approval"
	// RuleCopiedDocument: a document of one run's directory names another
	// run, or is byte for byte another run's document.
	RuleCopiedDocument = "copied-document"
	// RuleIndex: the run-ID index and the run directories disagree.
	RuleIndex = "index"
	// RuleHistoryRewritten: the branch does not descend from the commit
	// pinned with AuditOptions.Since.
	RuleHistoryRewritten = "history-rewritten"
)

// DefaultGrace is how long after its run deadline an admitted run may go
// without a receipt before the audit flags it, when AuditOptions.Grace is
// zero: enough for a reconciler restart to finish it.
const DefaultGrace = 15 * time.Minute

// ErrNoBranch means the repository has no such evidence branch.
var ErrNoBranch = errors.New("evidence: no such branch")

// AuditOptions says what to audit.
type AuditOptions struct {
	// Repo is a local Git repository (bare or not), or a remote URL
	// (file://, http(s)://, ssh://) fetched into a temporary bare
	// repository first.
	Repo string
	// Auth is used for a remote Repo.
	Auth Auth
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
}

// Finding is one problem the audit found. Run and Path are empty when the
// finding is about the branch as a whole.
type Finding struct {
	Rule    string `json:"rule"`
	Cluster string `json:"cluster,omitempty"`
	Run     string `json:"run,omitempty"`
	Path    string `json:"path,omitempty"`
	Commit  string `json:"commit,omitempty"`
	Message string `json:"message"`
}

func (f Finding) String() string {
	var b strings.Builder
	b.WriteString(f.Rule)
	if f.Run != "" {
		fmt.Fprintf(&b, " run %s", f.Run)
	}
	if f.Path != "" {
		fmt.Fprintf(&b, " %s", f.Path)
	}
	if f.Commit != "" {
		fmt.Fprintf(&b, " (commit %s)", shortHash(f.Commit))
	}
	b.WriteString(": ")
	b.WriteString(f.Message)
	return b.String()
}

// AuditReport is what Audit found. Clean reports whether there is no
// finding.
type AuditReport struct {
	Repo              string       `json:"repo"`
	Branch            string       `json:"branch"`
	Tip               string       `json:"tip"`
	Since             string       `json:"since,omitempty"`
	TrustPolicyDigest specs.Digest `json:"trustPolicyDigest"`
	Commits           int          `json:"commits"`
	Files             int          `json:"files"`
	// Documents is the number of signed documents verified (envelopes,
	// approvals copied into runs included).
	Documents int         `json:"documents"`
	Runs      []RunReport `json:"runs"`
	Findings  []Finding   `json:"findings"`
}

// Clean reports whether the audit found nothing.
func (r *AuditReport) Clean() bool { return len(r.Findings) == 0 }

// Audit reads the evidence branch of opts.Repo with go-git (objects only,
// never a worktree) and proves what DESIGN §6 says it must: append-only
// first-parent history with commits signed by evidence signers, every
// document signed by a key allowed to sign evidence and valid when it was
// committed, every digest binding, lifecycle order and completeness per
// run, approvals behind admissions, cancels and releases, the receipt
// chain of every cluster, the run-ID index, and (with Since) that the
// branch was not rewritten. Problems with the evidence are Findings in
// the report; an error means the branch could not be read at all (a
// missing repository or branch, an unreadable object, a failed fetch).
func Audit(ctx context.Context, opts AuditOptions) (*AuditReport, error) {
	if opts.Policy == nil {
		return nil, errors.New("evidence: AuditOptions.Policy is required")
	}
	if opts.Branch == "" {
		opts.Branch = DefaultBranch
	}
	if opts.Now.IsZero() {
		opts.Now = time.Now()
	}
	if opts.Grace == 0 {
		opts.Grace = DefaultGrace
	}
	if opts.Workers <= 0 {
		opts.Workers = runtime.GOMAXPROCS(0)
	}
	rd, err := openBranch(ctx, opts.Repo, opts.Auth, opts.Branch)
	if err != nil {
		return nil, err
	}
	defer rd.close()
	a := newAuditor(rd, opts)
	a.stream = true
	if err := a.walk(ctx); err != nil {
		return nil, err
	}
	a.checkSince()
	a.checkAll()
	return a.report(), nil
}

// branchReader is an opened evidence branch.
type branchReader struct {
	st      storer.EncodedObjectStorer
	display string
	branch  string
	tip     plumbing.Hash
	repo    *git.Repository
	// objs reads the objects the audit walks: gitobj.Dir where the
	// objects directory is plain, go-git's storer otherwise.
	objs    gitobj.Source
	cleanup func()
}

func (b *branchReader) close() {
	if d, ok := b.objs.(*gitobj.Dir); ok {
		d.Close()
	}
	if b.cleanup != nil {
		b.cleanup()
	}
}

// sourceFor returns the fastest reader of gitDir's objects: gitobj.Dir,
// or st when the objects directory is not one gitobj.Dir reads.
func sourceFor(gitDir string, st storer.EncodedObjectStorer) gitobj.Source {
	if gitDir != "" {
		if d, err := gitobj.OpenDir(gitDir); err == nil {
			return d
		}
	}
	return gitobj.StorerSource{Storer: st}
}

// isRemoteURL reports whether repo names a remote rather than a local
// directory.
func isRemoteURL(repo string) bool {
	if strings.Contains(repo, "://") {
		return true
	}
	if _, err := os.Stat(repo); err == nil {
		return false
	}
	// scp-like user@host:path
	i := strings.Index(repo, ":")
	return i > 0 && !strings.ContainsAny(repo[:i], "/\\")
}

// openBranch opens repo and resolves branch. A remote is fetched into a
// temporary bare repository removed by close.
func openBranch(ctx context.Context, repo string, auth Auth, branch string) (*branchReader, error) {
	ref := plumbing.NewBranchReferenceName(branch)
	if err := ref.Validate(); err != nil {
		return nil, fmt.Errorf("evidence: branch %q is not a valid branch name", branch)
	}
	if repo == "" {
		return nil, errors.New("evidence: no repository given")
	}
	if isRemoteURL(repo) {
		return fetchBranch(ctx, repo, auth, ref)
	}
	r, closeStorage, err := openLocal(repo)
	if err != nil {
		return nil, fmt.Errorf("evidence: could not open repository %s: %w", repo, err)
	}
	var tip plumbing.Hash
	for _, name := range []plumbing.ReferenceName{ref, plumbing.NewRemoteReferenceName("origin", branch)} {
		rf, err := r.Reference(name, true)
		if err == nil {
			tip = rf.Hash()
			break
		}
		if !errors.Is(err, plumbing.ErrReferenceNotFound) {
			return nil, fmt.Errorf("evidence: %s: read %s: %w", repo, name, err)
		}
	}
	if tip.IsZero() {
		return nil, fmt.Errorf("%w: %s has no branch %s", ErrNoBranch, repo, branch)
	}
	return &branchReader{st: r.Storer, display: repo, branch: branch, tip: tip, repo: r, cleanup: closeStorage,
		objs: sourceFor(localGitDir(repo), r.Storer)}, nil
}

// openLocal opens a local repository for reading only. A plain bare or
// non-bare layout is opened with pack file descriptors kept open and the
// object list cached (nothing writes through this handle), which makes
// reading every object of a branch several times faster than go-git's
// defaults; anything else (a linked worktree) goes through PlainOpen.
func openLocal(repo string) (*git.Repository, func(), error) {
	if gitDir := localGitDir(repo); gitDir != "" {
		st, closeFn, err := openStorage(gitDir)
		if err != nil {
			return nil, nil, err
		}
		r, err := git.Open(st, nil)
		if err != nil {
			closeFn()
			return nil, nil, err
		}
		return r, closeFn, nil
	}
	r, err := git.PlainOpenWithOptions(repo, &git.PlainOpenOptions{EnableDotGitCommonDir: true})
	return r, nil, err
}

// localGitDir returns the object directory's parent of a plain bare or
// non-bare repository, "" for anything else.
func localGitDir(repo string) string {
	gitDir := repo
	if fi, err := os.Stat(filepath.Join(repo, ".git")); err == nil && fi.IsDir() {
		gitDir = filepath.Join(repo, ".git")
	}
	if fi, err := os.Stat(filepath.Join(gitDir, "objects")); err == nil && fi.IsDir() {
		return gitDir
	}
	return ""
}

// openStorage opens gitDir's objects for reading only.
func openStorage(gitDir string) (*filesystem.Storage, func(), error) {
	st := filesystem.NewStorageWithOptions(osfs.New(gitDir, osfs.WithBoundOS()), cache.NewObjectLRU(64*cache.MiByte),
		filesystem.Options{ExclusiveAccess: true, KeepDescriptors: true})
	return st, func() { st.Close() }, nil
}

// readRaw returns the content of object h of type t, refusing one
// larger than an evidence file may be.
func readRaw(src gitobj.Source, t plumbing.ObjectType, h plumbing.Hash) ([]byte, error) {
	b, err := src.Object(t, h, signing.MaxEnvelopeSize*2)
	if err != nil {
		return nil, fmt.Errorf("evidence: could not read %s %s: %w", t, h, err)
	}
	return b, nil
}

// readTree returns the entries of tree h.
func readTree(src gitobj.Source, h plumbing.Hash) ([]object.TreeEntry, error) {
	b, err := src.Object(plumbing.TreeObject, h, 0)
	if err != nil {
		return nil, err
	}
	return gitobj.ParseTree(b)
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
	doc    *docRec
}

// auditor holds one audit's state.
type auditor struct {
	rd      *branchReader
	opts    AuditOptions
	policy  *signing.TrustPolicy
	commits []*commitInfo
	byHash  map[plumbing.Hash]*commitInfo
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
	// bindings: list every digest binding checked in the run reports
	// (Verify, one run); a whole-branch audit reports only the ones that
	// fail, as findings.
	bindings bool
}

// closedRunBatch is how many runs with a receipt the replay lets
// accumulate before it checks them and drops their decoded documents.
var closedRunBatch = 256

func newAuditor(rd *branchReader, opts AuditOptions) *auditor {
	return &auditor{rd: rd, opts: opts, policy: opts.Policy, byHash: map[plumbing.Hash]*commitInfo{},
		files: map[string]*fileRec{}, versions: map[string][]*fileRec{},
		curTrees: map[plumbing.Hash][]object.TreeEntry{}, prevTrees: map[plumbing.Hash][]object.TreeEntry{},
		runsByDir: map[string]*runAudit{}}
}

func (a *auditor) add(f Finding) { a.findings = append(a.findings, f) }

// walk reads the first-parent history from the root to the tip, checks
// that each commit only adds files, and reads every added file once,
// handing signed documents to the verification pool.
func (a *auditor) walk(ctx context.Context) error {
	a.pool = newVerifyPool(a.rd, a.policy, a.opts.Workers)
	defer a.pool.close()
	if err := a.history(ctx, ""); err != nil {
		return err
	}
	return a.replay(ctx, "")
}

// history reads the first-parent history from the tip back to the root,
// or, with dir set, back to the last commit holding dir, recording dir's
// tree in each commit (commitInfo.tree). It stores it oldest first. Each
// commit's signature goes to the pool (started by the caller) as soon as
// the commit is read, so that verification overlaps the walk.
func (a *auditor) history(ctx context.Context, dir string) error {
	var chain []*commitInfo
	for h := a.rd.tip; !h.IsZero(); {
		if err := ctx.Err(); err != nil {
			return err
		}
		raw, err := readRaw(a.rd.objs, plumbing.CommitObject, h)
		if err != nil {
			return err
		}
		c, err := gitobj.ParseCommitHeader(raw)
		if err != nil {
			return fmt.Errorf("evidence: could not decode commit %s: %w", h, err)
		}
		tree := c.Tree
		if dir != "" {
			if tree, err = lookupTree(a.rd.objs, c.Tree, dir); err != nil {
				return err
			}
			if tree.IsZero() {
				break
			}
		}
		ci := &commitInfo{hash: h, tree: tree, when: c.When, sigErr: &sigResult{raw: raw}}
		chain = append(chain, ci)
		a.pool.submitCommit(ci)
		if len(c.Parents) > 1 {
			a.add(Finding{Rule: RuleLinearHistory, Commit: h.String(),
				Message: fmt.Sprintf("merge commit with %d parents: the evidence branch only moves fast-forward by single-parent commits; only the first parent is audited", len(c.Parents))})
		}
		if len(c.Parents) == 0 {
			break
		}
		h = c.Parents[0]
	}
	slices.Reverse(chain)
	for i, c := range chain {
		c.index = i
		a.byHash[c.hash] = c
	}
	a.commits = chain
	return nil
}

// replay diffs each commit's tree (of dir) against its parent's, reading
// only what changed, and verifies document signatures on the pool; it
// waits for the pool and reports commit signatures.
func (a *auditor) replay(ctx context.Context, dir string) error {
	prev := plumbing.ZeroHash
	for _, c := range a.commits {
		if err := ctx.Err(); err != nil {
			return err
		}
		// The current commit's trees become the parent side of the next.
		clear(a.prevTrees)
		a.prevTrees, a.curTrees = a.curTrees, a.prevTrees
		if err := a.diff(c, dir, prev, c.tree); err != nil {
			return err
		}
		prev = c.tree
		if len(a.closed) >= closedRunBatch {
			if err := a.checkClosed(); err != nil {
				return err
			}
		}
	}
	if err := a.pool.wait(); err != nil {
		return err
	}
	for _, c := range a.commits {
		if r := c.sigErr; r.err != nil {
			a.add(Finding{Rule: RuleCommitSignature, Commit: c.hash.String(), Message: refusalMessage(r.err).Error()})
		}
	}
	return nil
}

// lookupTree returns the hash of the directory p under root, zero when
// there is none (or p is a file).
func lookupTree(src gitobj.Source, root plumbing.Hash, p string) (plumbing.Hash, error) {
	e, err := lookupEntry(src, root, p)
	if err != nil || e == nil || e.Mode != filemode.Dir {
		return plumbing.ZeroHash, err
	}
	return e.Hash, nil
}

// lookupEntry returns the entry at p under root, nil when there is none.
func lookupEntry(src gitobj.Source, root plumbing.Hash, p string) (*object.TreeEntry, error) {
	cur := object.TreeEntry{Mode: filemode.Dir, Hash: root}
	for _, name := range strings.Split(p, "/") {
		if cur.Mode != filemode.Dir {
			return nil, nil
		}
		entries, err := readTree(src, cur.Hash)
		if err != nil {
			return nil, fmt.Errorf("evidence: could not read tree %s: %w", cur.Hash, err)
		}
		found := false
		for _, e := range entries {
			if e.Name == name {
				cur, found = e, true
				break
			}
		}
		if !found {
			return nil, nil
		}
	}
	return &cur, nil
}

// diff compares the tree old (zero for none) with new at dir. Entries with
// the same hash are skipped without reading them; only subtrees whose
// hashes differ are read.
func (a *auditor) diff(c *commitInfo, dir string, old, new plumbing.Hash) error {
	if old == new {
		return nil
	}
	oldEntries, err := a.tree(dir, old)
	if err != nil {
		return err
	}
	newEntries, err := a.tree(dir, new)
	if err != nil {
		return err
	}
	byName := make(map[string]object.TreeEntry, len(newEntries))
	for _, e := range newEntries {
		byName[e.Name] = e
	}
	for _, o := range oldEntries {
		n, ok := byName[o.Name]
		if ok && o.Hash == n.Hash && o.Mode == n.Mode {
			delete(byName, o.Name)
			continue // unchanged, the common case: no path built
		}
		p := path.Join(dir, o.Name)
		delete(byName, o.Name)
		switch {
		case !ok:
			a.removed(c, p, o)
		case o.Mode == filemode.Dir && n.Mode == filemode.Dir:
			if err := a.diff(c, p, o.Hash, n.Hash); err != nil {
				return err
			}
		default:
			a.add(Finding{Rule: RuleAppendOnly, Path: p, Commit: c.hash.String(), Run: runOfPath(p),
				Message: fmt.Sprintf("changed after it was added (%s %s → %s %s)", o.Mode, shortHash(o.Hash.String()), n.Mode, shortHash(n.Hash.String()))})
			if o.Mode == filemode.Dir {
				a.removed(c, p, o)
				if err := a.added(c, p, n); err != nil {
					return err
				}
			} else if n.Mode == filemode.Dir {
				if err := a.added(c, p, n); err != nil {
					return err
				}
			} else if err := a.addFile(c, p, n); err != nil {
				return err
			}
		}
	}
	// What is left was added by this commit; keep tree order.
	for _, n := range newEntries {
		if _, ok := byName[n.Name]; !ok {
			continue
		}
		if err := a.added(c, path.Join(dir, n.Name), n); err != nil {
			return err
		}
	}
	return nil
}

// tree returns the entries of tree h (none for zero). Trees read for one
// commit are kept for the next, whose parent side they are.
func (a *auditor) tree(dir string, h plumbing.Hash) ([]object.TreeEntry, error) {
	if h.IsZero() {
		return nil, nil
	}
	if e, ok := a.curTrees[h]; ok {
		return e, nil
	}
	if e, ok := a.prevTrees[h]; ok {
		a.curTrees[h] = e
		return e, nil
	}
	entries, err := readTree(a.rd.objs, h)
	if err != nil {
		return nil, fmt.Errorf("evidence: could not read tree %s (%s): %w", orRootDir(dir), h, err)
	}
	a.curTrees[h] = entries
	return entries, nil
}

func orRootDir(dir string) string {
	if dir == "" {
		return "/"
	}
	return dir
}

// removed reports a deleted file or every file of a deleted directory.
func (a *auditor) removed(c *commitInfo, p string, e object.TreeEntry) {
	what := "file"
	if e.Mode == filemode.Dir {
		what = "directory"
	}
	a.add(Finding{Rule: RuleAppendOnly, Path: p, Commit: c.hash.String(), Run: runOfPath(p),
		Message: fmt.Sprintf("%s deleted after it was added", what)})
}

// added records every file under entry e, added by c.
func (a *auditor) added(c *commitInfo, p string, e object.TreeEntry) error {
	if e.Mode != filemode.Dir {
		return a.addFile(c, p, e)
	}
	entries, err := readTree(a.rd.objs, e.Hash)
	if err != nil {
		return fmt.Errorf("evidence: could not read tree %s (%s): %w", p, e.Hash, err)
	}
	for _, sub := range entries {
		if err := a.added(c, path.Join(p, sub.Name), sub); err != nil {
			return err
		}
	}
	return nil
}

// addFile reads a file added (or changed) by c and classifies it.
func (a *auditor) addFile(c *commitInfo, p string, e object.TreeEntry) error {
	if e.Mode != filemode.Regular {
		a.add(Finding{Rule: RuleLayout, Path: p, Commit: c.hash.String(), Run: runOfPath(p),
			Message: fmt.Sprintf("mode %s: evidence files are regular files (100644)", e.Mode)})
		if e.Mode == filemode.Submodule {
			return nil
		}
	}
	kind := classify(p)
	f := &fileRec{path: p, blob: e.Hash, commit: c, landed: c}
	var data []byte
	if (kind != kindDocument && kind != kindApproval) || !a.pool.reads {
		var err error
		if data, err = readRaw(a.rd.objs, plumbing.BlobObject, e.Hash); err != nil {
			return fmt.Errorf("evidence: %s: %w", p, err)
		}
		f.digest = specs.DigestOf(data)
	}
	if old := a.files[p]; old != nil {
		f.landed = old.landed
		if len(a.versions[p]) == 0 {
			a.versions[p] = []*fileRec{old}
		}
		a.versions[p] = append(a.versions[p], f)
	}
	a.files[p] = f
	switch kind {
	case kindDocument, kindApproval:
		f.doc = &docRec{kind: kind}
		a.docs++
		a.pool.submitDoc(f, data)
	case kindNode, kindIndex, kindChain:
		f.data = data
	}
	if a.stream {
		return a.addToRun(p, f)
	}
	return nil
}

// addToRun files f (at p) under its run directory, when it is in one. A
// receipt closes the run; a file added to a run already checked reopens
// it.
func (a *auditor) addToRun(p string, f *fileRec) error {
	rp, ok := ParsePath(p)
	if !ok || !rp.InRun() {
		return nil
	}
	dir := rp.Dir()
	r := a.runsByDir[dir]
	if r == nil {
		r = newRunAudit(a, rp.Cluster, rp.Run, dir, map[string]*fileRec{})
		a.runsByDir[dir] = r
	} else if r.checked {
		var err error
		if r, err = a.reopen(r); err != nil {
			return err
		}
	}
	r.files[rp.Rel()] = f
	if r.files[ReceiptFile] != nil && !r.queued {
		r.queued = true
		a.closed = append(a.closed, r)
	}
	return nil
}

// reopen replaces a checked run (a file was added to it after its
// receipt) by a fresh one, reading and verifying again the documents
// and snapshots its check dropped. It is checked again with the next
// batch, or at the end.
func (a *auditor) reopen(old *runAudit) (*runAudit, error) {
	r := newRunAudit(a, old.cluster, old.id, old.dir, old.files)
	a.runsByDir[r.dir] = r
	for rel, f := range r.files {
		p := path.Join(r.dir, rel)
		switch {
		case f.doc != nil:
			var data []byte
			if !a.pool.reads {
				var err error
				if data, err = readRaw(a.rd.objs, plumbing.BlobObject, f.blob); err != nil {
					return nil, fmt.Errorf("evidence: %s: %w", p, err)
				}
			}
			a.pool.submitDoc(f, data)
		case classify(p) == kindNode:
			data, err := readRaw(a.rd.objs, plumbing.BlobObject, f.blob)
			if err != nil {
				return nil, fmt.Errorf("evidence: %s: %w", p, err)
			}
			f.data = data
		}
	}
	return r, nil
}

// checkClosed checks the runs closed since the last batch, once their
// documents are verified, and drops what only their own checks read.
func (a *auditor) checkClosed() error {
	if err := a.pool.wait(); err != nil {
		return err
	}
	batch := a.closed
	a.closed = nil
	a.checkRuns(batch)
	for _, r := range batch {
		r.compact()
	}
	return nil
}

// File kinds of the evidence layout.
const (
	kindOther = iota
	kindDocument
	kindApproval
	kindNode
	kindLog
	kindIndex
	kindChain
)

// classify tells what the layout makes of path p. Everything under ids/
// and chain/ is read as an index entry or link, so that checkIndex and
// checkChains report what is malformed there; any other .json file of a
// run directory is read as a signed document.
func classify(p string) int {
	switch top, _, _ := strings.Cut(p, "/"); top {
	case "ids":
		return kindIndex
	case "chain":
		return kindChain
	}
	rp, _ := ParsePath(p)
	switch rp.Kind {
	case KindNode:
		return kindNode
	case KindLog:
		return kindLog
	case KindApproval:
		return kindApproval
	case KindAdmission, KindCheckIntent, KindCheck, KindEvidence, KindCancel, KindRelease, KindReceipt:
		return kindDocument
	case KindRunFile:
		if strings.HasSuffix(p, ".json") {
			return kindDocument
		}
	}
	return kindOther
}

// runOfPath returns the run ID a path of the layout belongs to, "" when
// none.
func runOfPath(p string) string {
	rp, _ := ParsePath(p)
	return rp.Run
}

func shortHash(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// sigResult is the outcome of a commit signature check.
type sigResult struct {
	raw []byte
	key string
	err error
}

// docRec is a verified (or refused) signed document.
type docRec struct {
	kind      int
	statement *signing.Statement
	keys      []string
	rule      string // RuleSignature or RuleUntrustedSigner when refused
	err       error
	approval  *signing.Approval
}

// verifyPool verifies signatures on a fixed number of goroutines. When
// the branch's object source is safe for concurrent use (reads is true)
// each worker reads the blobs of its documents itself; otherwise the
// walker reads them.
type verifyPool struct {
	policy  *signing.TrustPolicy
	signers signing.Signers
	objs    gitobj.Source
	jobs    chan func()
	reads   bool
	wg      sync.WaitGroup
	workers sync.WaitGroup

	mu        sync.Mutex
	approvals map[plumbing.Hash]*approvalResult // identical approval copies are parsed and checked once
	errMu     sync.Mutex
	err       error // the first read error of a worker
}

type approvalResult struct {
	once sync.Once
	ap   *signing.Approval
	err  error
}

func newVerifyPool(rd *branchReader, p *signing.TrustPolicy, n int) *verifyPool {
	vp := &verifyPool{policy: p, signers: p.Signers(signing.RoleEvidenceSigner), objs: rd.objs, reads: rd.objs.Concurrent(),
		jobs: make(chan func(), 1024), approvals: map[plumbing.Hash]*approvalResult{}}
	for range n {
		vp.workers.Go(func() {
			for j := range vp.jobs {
				j()
				vp.wg.Done()
			}
		})
	}
	return vp
}

func (vp *verifyPool) submit(f func()) {
	vp.wg.Add(1)
	vp.jobs <- f
}

// wait runs queued jobs on the calling goroutine too until none is left,
// waits for every job submitted so far, and returns the first error a
// worker had reading an object.
func (vp *verifyPool) wait() error {
	for drained := false; !drained; {
		select {
		case j := <-vp.jobs:
			j()
			vp.wg.Done()
		default:
			drained = true
		}
	}
	vp.wg.Wait()
	vp.errMu.Lock()
	defer vp.errMu.Unlock()
	return vp.err
}

func (vp *verifyPool) close() {
	close(vp.jobs)
	vp.workers.Wait()
}

func (vp *verifyPool) submitCommit(c *commitInfo) {
	vp.submit(func() {
		c.sigErr.key, c.sigErr.err = signing.VerifyCommit(c.sigErr.raw, vp.signers, c.when)
		c.sigErr.raw = nil
	})
}

// submitDoc verifies f; data is nil when the worker reads the blob.
func (vp *verifyPool) submitDoc(f *fileRec, data []byte) {
	vp.submit(func() {
		if data == nil {
			var err error
			if data, err = readRaw(vp.objs, plumbing.BlobObject, f.blob); err != nil {
				vp.errMu.Lock()
				if vp.err == nil {
					vp.err = fmt.Errorf("evidence: %s: %w", f.path, err)
				}
				vp.errMu.Unlock()
				return
			}
			f.digest = specs.DigestOf(data)
		}
		if f.doc.kind == kindApproval {
			vp.mu.Lock()
			r := vp.approvals[f.blob]
			if r == nil {
				r = &approvalResult{}
				vp.approvals[f.blob] = r
			}
			vp.mu.Unlock()
			r.once.Do(func() {
				r.ap, r.err = signing.ParseApproval(f.path, data)
				if r.err == nil {
					// Verify here, on the pool, once per distinct
					// approval; Decide uses the result and reports
					// the signatures that did not verify.
					_, _ = r.ap.Verify(vp.policy)
				}
			})
			if r.err != nil {
				f.doc.rule, f.doc.err = RuleApproval, r.err
				return
			}
			f.doc.approval = r.ap
			f.doc.statement = r.ap.Statement
			return
		}
		v, err := signing.VerifyDSSE(data, vp.signers, f.commit.when)
		if err != nil {
			f.doc.rule, f.doc.err = refusalRule(err), refusalMessage(err)
			return
		}
		f.doc.statement, f.doc.keys = v.Statement, v.Keys
	})
}

// refusalRule returns the rule a document that did not verify falls
// under: RuleUntrustedSigner when a key that may not sign evidence made it,
// or one that was not valid when committed; RuleSignature when it does not
// parse or its signature does not verify (forged or corrupted).
func refusalRule(err error) string {
	var ve *signing.VerifyError
	if errors.As(err, &ve) {
		switch ve.Kind {
		case signing.KindUnknownKey, signing.KindNotAllowed, signing.KindKeyNotValid:
			return RuleUntrustedSigner
		}
	}
	return RuleSignature
}

// refusalMessage returns what a finding states for a refused document or
// commit: the verifier's cause, without its "verification failed" framing.
func refusalMessage(err error) error {
	var ve *signing.VerifyError
	if errors.As(err, &ve) {
		return ve.Err
	}
	return err
}
