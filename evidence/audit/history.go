package audit

import (
	"context"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"

	"signet.dev/signet/evidence"
	"signet.dev/signet/internal/gitobj"
	"signet.dev/signet/specs"
)

// history reads the first-parent history from the tip back to the root,
// or, with dir set, back to the last commit holding dir, recording dir's
// tree in each commit (commitInfo.tree). It stores it oldest first. Each
// commit's signature goes to the pool (started by the caller) as soon as
// the commit is read, so that verification overlaps the walk.
func (a *auditor) history(ctx context.Context, dir string) error {
	var chain []*commitInfo
	reached := false
	a.progress(PhaseHistory, 0, 0)
	for h := a.rd.Tip(); !h.IsZero(); {
		if err := ctx.Err(); err != nil {
			return err
		}
		if len(chain) > 0 && len(chain)%progressEvery == 0 {
			a.progress(PhaseHistory, len(chain), 0)
		}
		if a.base != nil && h == a.base.hash {
			reached = true
			break
		}
		raw, err := readRaw(a.rd, plumbing.CommitObject, h)
		if err != nil {
			return err
		}
		c, err := gitobj.ParseCommitHeader(raw)
		if err != nil {
			return fmt.Errorf("evidence: could not decode commit %s: %w", h, err)
		}
		tree := c.Tree
		if dir != "" {
			if tree, err = lookupTree(a.rd, c.Tree, dir); err != nil {
				return err
			}
			if tree.IsZero() {
				a.older = h
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
	if a.base != nil && !reached {
		return checkpointErr(a.opts.CheckpointName, "tip", "%s is not on the first-parent history of %s at %s: the branch was rewritten since the checkpoint, or the checkpoint is of another repository",
			a.base.hash, a.branch, a.rd.Tip())
	}
	slices.Reverse(chain)
	for i, c := range chain {
		c.index = a.baseLen + i
		a.byHash.put(c)
	}
	a.commits = chain
	a.checkCommitTimes()
	return a.resolveAnchors(ctx)
}

// checkCommitTimes: committer times never decrease along the first-parent
// history. Keys are judged at a commit's time (and its documents'), so a
// commit stamped before its parent would let a revoked key sign with a
// time from before its revocation. Equal times are fine: git stamps whole
// seconds and several commits land in one.
func (a *auditor) checkCommitTimes() {
	prev := a.base
	for _, c := range a.commits {
		if prev != nil && c.when.Before(prev.when) {
			a.add(Finding{Rule: RuleCommitTimeOrder, Commit: c.hash.String(),
				Message: fmt.Sprintf("committer time %s is before its parent %s's (%s): committer times on the evidence branch never decrease",
					c.when.UTC().Format(time.RFC3339), shortHash(prev.hash.String()), prev.when.UTC().Format(time.RFC3339))})
		}
		prev = c
	}
}

// replay diffs each commit's tree (of dir) against its parent's, reading
// only what changed, and verifies document signatures on the pool; it
// waits for the pool and reports commit signatures.
func (a *auditor) replay(ctx context.Context, dir string) error {
	prev := plumbing.ZeroHash
	if a.base != nil {
		prev = a.base.tree // what came before was read by the checkpoint's audit
	}
	a.progress(PhaseReplay, 0, len(a.commits))
	for i, c := range a.commits {
		if err := ctx.Err(); err != nil {
			return err
		}
		if i > 0 && i%progressEvery == 0 {
			a.progress(PhaseReplay, i, len(a.commits))
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
	a.commitVerdicts()
	return nil
}

// commitVerdicts reports the commit signatures that do not count, in
// first-parent order, and drops each commit's verification record. Every
// commit's check was submitted by history, so once the pool has been
// waited for they are all done: whole-branch audits call it at their
// first batch (checkClosed), so that the records do not stay for the
// whole replay.
func (a *auditor) commitVerdicts() {
	for _, c := range a.commits[a.sigDone:] {
		if r := c.sigErr; r.err != nil {
			a.add(Finding{Rule: RuleCommitSignature, Commit: c.hash.String(), Message: refusalMessage(r.err).Error()})
		} else if why := a.pool.revokedAfterAnchor(r.key, c); why != "" {
			a.add(Finding{Rule: RuleCommitSignature, Commit: c.hash.String(), Message: why})
		}
		c.sigErr = nil
	}
	a.sigDone = len(a.commits)
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
		if a.tab != nil && (!ok || o.Mode != filemode.Dir || n.Mode != filemode.Dir) {
			return errPastChanged // a full audit reports it and all it changes
		}
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
	entries, err := readTree(a.rd, h)
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
	entries, err := readTree(a.rd, e.Hash)
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
	rp, _ := evidence.ParsePath(p) // a path it refuses is in no run
	kind := kindOf(p, rp)
	f := &fileRec{path: p, blob: e.Hash, commit: c, landed: c}
	var data []byte
	if (kind != kindDocument && kind != kindApproval) || !a.pool.reads {
		var err error
		if data, err = readRaw(a.rd, plumbing.BlobObject, e.Hash); err != nil {
			return fmt.Errorf("evidence: %s: %w", p, err)
		}
		f.digest = specs.DigestOf(data)
	}
	r, err := a.closedRunAt(p, rp)
	if err != nil {
		return err
	}
	if r != nil {
		// A file added to a checked run: its files are needed again.
		if _, err := a.reopen(r); err != nil {
			return err
		}
	}
	if c.index >= a.baseLen && a.tab != nil {
		a.newFiles++
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
	case kindNode:
		f.data = data
	case kindIndex, kindChain:
		// Kept to the end of the audit, one of each per run: the digest
		// is only written in checkpoints, which compute it again.
		f.data, f.digest = data, ""
	}
	if a.stream && rp.InRun() {
		return a.addToRun(p, rp, f)
	}
	return nil
}

// addToRun files f (at p, which ParsePath read as rp, a file of a run
// directory) under its run directory. A receipt closes the run. A run
// already checked is not found here: checked runs are compacted in a
// streaming audit, and addFile reopened this one before f was read; one
// that was not is an error, never a file left unchecked.
func (a *auditor) addToRun(p string, rp evidence.RunPath, f *fileRec) error {
	dir, rel := evidence.SplitRunFile(p)
	r := a.runsByDir[dir]
	switch {
	case r == nil:
		r = newRunAudit(a, rp.Cluster, rp.Run, dir, map[string]*fileRec{})
		a.runsByDir[dir] = r
	case r.checked:
		return fmt.Errorf("evidence: audit: %s was added to run %s after it was checked, and the run was not reopened", p, dir)
	}
	r.files[rel] = f
	if r.files[evidence.ReceiptFile] != nil && !r.queued {
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
	files := old.files
	if old.compacted {
		var err error
		if files, err = old.openFiles(); err != nil {
			return nil, err
		}
	}
	r := newRunAudit(a, old.cluster, old.id, old.dir, files)
	a.runsByDir[r.dir] = r
	for rel, f := range r.files {
		p := path.Join(r.dir, rel)
		switch {
		case f.doc != nil:
			var data []byte
			if !a.pool.reads {
				var err error
				if data, err = readRaw(a.rd, plumbing.BlobObject, f.blob); err != nil {
					return nil, fmt.Errorf("evidence: %s: %w", p, err)
				}
			}
			a.pool.submitDoc(f, data)
		case classify(p) == kindNode:
			data, err := readRaw(a.rd, plumbing.BlobObject, f.blob)
			if err != nil {
				return nil, fmt.Errorf("evidence: %s: %w", p, err)
			}
			f.data = data
		}
	}
	return r, nil
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
	rp, _ := evidence.ParsePath(p)
	return kindOf(p, rp)
}

// kindOf is classify of p, which ParsePath read as rp.
func kindOf(p string, rp evidence.RunPath) int {
	switch top, _, _ := strings.Cut(p, "/"); top {
	case "ids":
		return kindIndex
	case "chain":
		return kindChain
	}
	switch rp.Kind {
	case evidence.KindNode:
		return kindNode
	case evidence.KindLog:
		return kindLog
	case evidence.KindApproval:
		return kindApproval
	case evidence.KindFiring, evidence.KindAdmission, evidence.KindCheckIntent, evidence.KindCheck, evidence.KindEvidence, evidence.KindCancel, evidence.KindRelease, evidence.KindReceipt:
		return kindDocument
	case evidence.KindRunFile:
		if strings.HasSuffix(p, ".json") {
			return kindDocument
		}
	}
	return kindOther
}

// runOfPath returns the run ID a path of the layout belongs to, "" when
// none.
func runOfPath(p string) string {
	rp, _ := evidence.ParsePath(p)
	return rp.Run
}

// resolveAnchors finds, for every evidence signer the trust policy
// revokes after a commit (revokedAfterCommit), that commit's place in the
// first-parent history, and hands them to the pool. An anchor older than
// the commits read (Verify reads only a run directory's history) is
// looked for further back, reading commit headers only. An anchor that
// is not on the history at all is a finding, and the key then counts
// nowhere: what it signed cannot be placed before or after it.
func (a *auditor) resolveAnchors(ctx context.Context) error {
	for _, k := range a.policy.EvidenceSigners() {
		id := k.KeyID()
		anchor := a.policy.RevokedAfterCommit(id)
		if anchor == "" {
			continue
		}
		h := plumbing.NewHash(anchor)
		if c := a.commitByHash(h); c != nil {
			a.pool.revokedAfter[id] = c.index
			continue
		}
		a.pool.revokedAfter[id] = -1 // before every commit read
		found, err := a.olderHas(ctx, h)
		if err != nil {
			return err
		}
		if !found {
			a.add(Finding{Rule: RuleRevocationAnchor, Commit: anchor,
				Message: fmt.Sprintf("the trust policy revokes key %s after commit %s, which is not on the first-parent history of %s: nothing the key signed counts", shortHash(id), shortHash(anchor), a.branch)})
		}
	}
	return nil
}

// olderHas reports whether h is a first-parent ancestor of the oldest
// commit read (a.older and before).
func (a *auditor) olderHas(ctx context.Context, h plumbing.Hash) (bool, error) {
	for c := a.older; !c.IsZero(); {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		if c == h {
			return true, nil
		}
		raw, err := readRaw(a.rd, plumbing.CommitObject, c)
		if err != nil {
			return false, err
		}
		hdr, err := gitobj.ParseCommitHeader(raw)
		if err != nil {
			return false, fmt.Errorf("evidence: could not decode commit %s: %w", c, err)
		}
		if len(hdr.Parents) == 0 {
			break
		}
		c = hdr.Parents[0]
	}
	return false, nil
}

// revokedAfterAnchor returns why key id, which signed in commit c, does
// not count there: c comes after the commit the trust policy revokes it
// after. It returns "" when the key counts.
func (vp *verifyPool) revokedAfterAnchor(id string, c *commitInfo) string {
	i, ok := vp.revokedAfter[id]
	if !ok || c.index <= i {
		return ""
	}
	anchor := vp.policy.RevokedAfterCommit(id)
	return fmt.Sprintf("key %s is revoked after commit %s (trust policy revokedAfterCommit), and this was committed after it in first-parent order", shortHash(id), shortHash(anchor))
}
