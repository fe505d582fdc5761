package audit

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"signet.dev/signet/evidence"
	"signet.dev/signet/internal/gitobj"
	"signet.dev/signet/internal/pagetable"
	"signet.dev/signet/signing"
	"signet.dev/signet/specs"
)

// PredicateCheckpoint is the predicate type of an audit checkpoint: a
// DSSE envelope, signed by an auditor of the trust policy, of what a
// clean audit knew at the tip it read.
// Version 2 added the replay state that proves firings (State.Latest,
// Held, Pending); version 3 packed the files of finished runs; version 4
// keeps finished runs, index entries, chain links, commits and document
// digests in state tables queried by key (State.Pages), so that an audit
// from it reads what is new, not the whole state. Older versions are
// refused.
const PredicateCheckpoint = "https://signet.dev/AuditCheckpoint/v4"

// ErrCheckpoint: the checkpoint given to start from cannot be used (not
// signed by an auditor of the trust policy, another branch or trust
// policy, its tip not on the branch's first-parent history, a state that
// does not decode or does not hold together, a state page missing or not
// the one its digest names). Nothing was audited: a refused checkpoint
// is never a clean result.
var ErrCheckpoint = errors.New("evidence: audit checkpoint refused")

// Checkpoint is the predicate of an audit checkpoint. State is what the
// whole-branch rules need to continue past Tip without reading the
// history again; it is trusted only through the envelope's signature,
// and its tables' pages through their digests in it.
type Checkpoint struct {
	Branch            string       `json:"branch"`
	Tip               string       `json:"tip"`
	TipCommitted      time.Time    `json:"tipCommitted"`
	AuditedAt         time.Time    `json:"auditedAt"`
	TrustPolicyDigest specs.Digest `json:"trustPolicyDigest"`
	State             State        `json:"state"`
}

// State is the audit state a checkpoint carries. What grows with the
// branch is in its state tables, a sorted table of records cut into pages
// kept beside the checkpoint (Options.CheckpointPages) and found through
// an index, itself pages (pagetable.Tree); Pages names the index's pages
// by their first key and SHA-256 digest, and the index each data page by
// its digest, so the checkpoint stays a few kilobytes at any length. An
// audit from the checkpoint reads only the index and data pages holding
// the keys it looks up (see tables.go for the records). What stays small
// is here whole:
//
//	Commits: how many first-parent commits the history holds up to the tip
//	Runs:    <admitted 0|1> 0 - - <dir>: the runs without a receipt at the tip
//	Files:   <landed: first-parent index> <blob> <digest> <kind> <run: index in Runs> - <path>: their files
//	Heads:   <cluster> <sequence>: the last link of each cluster's receipt chain
//
// Kind is d (signed document), a (approval copy) or - (other). Runs
// without a receipt are read and checked again by the audit that starts
// from the checkpoint. Latest, Held and Pending are the state of the
// replay that proves firings at the tip (encodeHistory): each node's
// latest finished run of each profile, the nodes signet holds, and the
// snapshots identity reasons of firings not admitted yet are proven
// against; they grow with the fleet, not the branch.
type State struct {
	Commits int              `json:"commits"`
	Runs    []string         `json:"runs"`
	Files   []string         `json:"files"`
	Heads   []string         `json:"heads"`
	Latest  []string         `json:"latest"`
	Held    []string         `json:"held"`
	Pending []string         `json:"pending"`
	Pages   []pagetable.Page `json:"pages"`
}

// stateKinds are the file kinds a State names, by letter.
var stateKinds = map[string]int{"d": kindDocument, "a": kindApproval, "-": kindOther}

// CheckpointInfo names the checkpoint an incremental audit started from.
type CheckpointInfo struct {
	Tip       string    `json:"tip"`
	AuditedAt time.Time `json:"auditedAt"`
	Signers   []string  `json:"signers"`
}

// checkpointErr wraps ErrCheckpoint with the checkpoint's name, the field
// and what is wrong with it.
func checkpointErr(name, field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s: %s", ErrCheckpoint, name, field, fmt.Sprintf(format, args...))
}

// openCheckpoint verifies the checkpoint envelope (named name) against
// the auditors of the trust policy at the audit's time and checks that it
// is about this branch under this trust policy.
func (a *auditor) openCheckpoint(name string, envelope []byte) (*Checkpoint, *CheckpointInfo, error) {
	v, err := signing.VerifyDSSE(envelope, a.policy.Signers(signing.RoleAuditor), a.opts.Now)
	if err != nil {
		return nil, nil, checkpointErr(name, "signature", "%v", refusalMessage(err))
	}
	if old := "https://signet.dev/AuditCheckpoint/v1"; v.Statement.PredicateType == old {
		return nil, nil, checkpointErr(name, "predicateType", "%q is a checkpoint without the state that proves standing certifications' firings (%q): audit the whole branch again", old, PredicateCheckpoint)
	}
	for _, old := range []string{"https://signet.dev/AuditCheckpoint/v2", "https://signet.dev/AuditCheckpoint/v3"} {
		if v.Statement.PredicateType == old {
			return nil, nil, checkpointErr(name, "predicateType", "%q is a checkpoint in a format before %q (state tables queried by key): audit the whole branch again", old, PredicateCheckpoint)
		}
	}
	if v.Statement.PredicateType != PredicateCheckpoint {
		return nil, nil, checkpointErr(name, "predicateType", "%q is not %q", v.Statement.PredicateType, PredicateCheckpoint)
	}
	var cp Checkpoint
	if err := signing.StrictUnmarshal(v.Statement.Predicate, &cp); err != nil {
		return nil, nil, checkpointErr(name, "predicate", "does not decode: %v", err)
	}
	if err := a.checkpointFits(name, &cp); err != nil {
		return nil, nil, err
	}
	return &cp, &CheckpointInfo{Tip: cp.Tip, AuditedAt: cp.AuditedAt, Signers: v.Keys}, nil
}

// checkpointFits: cp is about this branch under this trust policy, and
// names a commit as its tip.
func (a *auditor) checkpointFits(name string, cp *Checkpoint) error {
	switch {
	case cp.Branch != a.branch:
		return checkpointErr(name, "branch", "%q, but the audit reads branch %q", cp.Branch, a.branch)
	case cp.TrustPolicyDigest != a.policy.Digest():
		return checkpointErr(name, "trustPolicyDigest", "%s, but the audit's trust policy is %s: a checkpoint holds only under the policy it was audited with (audit the whole branch again)", cp.TrustPolicyDigest, a.policy.Digest())
	case !evidence.IsCommitHash(cp.Tip):
		return checkpointErr(name, "tip", "%q is not a commit hash", cp.Tip)
	}
	return nil
}

// Resume is the state a clean audit ended with (Report.Resume), kept in
// the memory of the process that ran it so that its next audit of the
// same branch reads only the commits after it (Options.Resume). It is
// the state a signed checkpoint carries, unsigned, its tables' pages in
// memory: it is trusted only because this process computed it, and
// cannot be written out or read back (its fields are unexported).
type Resume struct {
	cp    Checkpoint
	pages pagetable.Store
}

// Tip is the commit the state was taken at.
func (r *Resume) Tip() string { return r.cp.Tip }

// resumeName names a Resume in the errors of an audit that starts from
// it.
const resumeName = "the previous audit's state"

// resume makes the audit continue from r as from a checkpoint, after the
// same checks but the signature's: this branch, this trust policy.
func (a *auditor) resume(r *Resume) (*Checkpoint, *CheckpointInfo, error) {
	if err := a.checkpointFits(resumeName, &r.cp); err != nil {
		return nil, nil, err
	}
	a.pages = r.pages
	return &r.cp, &CheckpointInfo{Tip: r.cp.Tip, AuditedAt: r.cp.AuditedAt}, nil
}

// restore makes the audit continue from cp: its tip becomes the commit
// the history is read back to, its tables what the whole-branch rules
// look the past up in, and its runs without a receipt are returned for
// the caller to reopen once the revocation anchors are resolved (their
// documents are read and verified again, and they are checked at the end
// at the audit's time). It runs before the history is read.
func (a *auditor) restore(name string, cp *Checkpoint) (open []*runAudit, err error) {
	st := &cp.State
	bad := func(field string, i int, format string, args ...any) error {
		return checkpointErr(name, fmt.Sprintf("%s line %d", field, i+1), format, args...)
	}
	if st.Commits < 1 {
		return nil, checkpointErr(name, "state.commits", "%d: a checkpoint's history holds its tip", st.Commits)
	}
	if a.pages == nil {
		return nil, checkpointErr(name, "state.pages", "no store of the checkpoint's state pages was given (audit.Options.CheckpointPages)")
	}
	tab, err := pagetable.OpenTree(st.Pages, a.pages)
	if err != nil {
		return nil, checkpointErr(name, "state.pages", "%v", err)
	}
	a.tab, a.tabName, a.baseLen = tab, name, st.Commits
	a.pastCommits, a.noRun = map[int]*commitInfo{}, map[string]bool{}
	a.base = &commitInfo{hash: plumbing.NewHash(cp.Tip), when: cp.TipCommitted, index: st.Commits - 1, sigErr: &sigResult{}}
	a.byHash.put(a.base)
	raw, err := readRaw(a.rd, plumbing.CommitObject, a.base.hash)
	if err != nil {
		return nil, checkpointErr(name, "tip", "commit %s is not in the repository: %v", cp.Tip, err)
	}
	hdr, err := gitobj.ParseCommitHeader(raw)
	if err != nil {
		return nil, fmt.Errorf("evidence: could not decode commit %s: %w", cp.Tip, err)
	}
	if !hdr.When.Equal(a.base.when) {
		return nil, checkpointErr(name, "tipCommitted", "tip %s was committed at %s, the checkpoint says %s", cp.Tip, hdr.When.UTC().Format(time.RFC3339), a.base.when.UTC().Format(time.RFC3339))
	}
	a.base.tree = hdr.Tree
	// The tip's own record in the tables must be the tip: the tables are
	// of this history.
	if c, err := a.pastCommitErr(a.base.index); err != nil {
		return nil, checkpointErr(name, "state.pages", "%v", err)
	} else if c.hash != a.base.hash {
		return nil, checkpointErr(name, "state.pages", "commit %d of the tables is %s, not the tip %s", a.base.index, c.hash, cp.Tip)
	}
	a.pastCommits[a.base.index] = a.base

	var runs []*runAudit
	for i, line := range st.Runs {
		f := strings.SplitN(line, " ", 5)
		if len(f) != 5 {
			return nil, bad("state.runs", i, "%d fields, not 5", len(f))
		}
		rp, ok := evidence.ParsePath(f[4] + "/" + evidence.AdmissionFile)
		if (f[0] != "0" && f[0] != "1") || f[1] != "0" || f[2] != "-" || f[3] != "-" || !ok || !rp.InRun() || rp.Dir() != f[4] || a.runsByDir[f[4]] != nil {
			return nil, bad("state.runs", i, "%q is not a run directory without a receipt named once, admitted 0 or 1", line)
		}
		r := &runAudit{a: a, cluster: rp.Cluster, id: rp.Run, dir: f[4], files: map[string]*fileRec{}, restored: true}
		r.admitted = f[0] == "1"
		a.runsByDir[r.dir] = r
		runs = append(runs, r)
	}
	seen := map[string]bool{}
	for i, line := range st.Files {
		f := strings.SplitN(line, " ", 7)
		if len(f) != 7 {
			return nil, bad("state.files", i, "%d fields, not 7", len(f))
		}
		landed, err := strconv.Atoi(f[0])
		if err != nil || landed < 0 || landed >= st.Commits {
			return nil, bad("state.files", i, "landed %q is not a commit of the checkpoint's history (%d commits)", f[0], st.Commits)
		}
		blob, err := hex.DecodeString(f[1])
		if err != nil || len(blob) != len(plumbing.ZeroHash) {
			return nil, bad("state.files", i, "%q is not an object hash", f[1])
		}
		kind, ok := stateKinds[f[3]]
		if !ok {
			return nil, bad("state.files", i, "kind %q is not one of d, a, -", f[3])
		}
		p := f[6]
		if seen[p] {
			return nil, bad("state.files", i, "%s appears twice", p)
		}
		seen[p] = true
		ri, err := strconv.Atoi(f[4])
		if err != nil || ri < 0 || ri >= len(runs) || !strings.HasPrefix(p, runs[ri].dir+"/") || f[5] != "-" {
			return nil, bad("state.files", i, "run %q of %s is not its run directory in state.runs", f[4], p)
		}
		c, err := a.pastCommitErr(landed)
		if err != nil {
			return nil, checkpointErr(name, "state.pages", "%v", err)
		}
		fr := &fileRec{path: p, blob: plumbing.NewHash(f[1]), commit: c, landed: c, digest: specs.Digest(f[2])}
		if kind == kindDocument || kind == kindApproval {
			fr.doc = &docRec{kind: kind}
		}
		a.files[p] = fr
		runs[ri].files[p[len(runs[ri].dir)+1:]] = fr
	}
	a.heads = map[string]int64{}
	for i, line := range st.Heads {
		c, n, ok := strings.Cut(line, " ")
		seq, err := strconv.ParseInt(n, 10, 64)
		if !ok || !evidence.IsDNSLabel(c) || err != nil || seq < 1 || a.heads[c] != 0 {
			return nil, bad("state.heads", i, "%q is not a cluster named once and its last chain sequence", line)
		}
		a.heads[c] = seq
	}
	if err := a.decodeHistory(name, st); err != nil {
		return nil, err
	}
	for _, r := range runs {
		r.admFile = r.files[evidence.AdmissionFile]
		r.firFile = r.files[evidence.FiringFile]
	}
	return runs, nil
}

// checkpoint returns the checkpoint of a clean audit's end: its tip and
// the state a later audit continues from, signed by key; its tables'
// pages are in a.opts.WritePages.
func (a *auditor) checkpoint(key *signing.PrivateKey, pages pagetable.Store) ([]byte, error) {
	cp, err := a.endState(pages)
	if err != nil {
		return nil, err
	}
	st, err := signing.NewStatement(PredicateCheckpoint,
		[]signing.Subject{signing.SubjectFor(path.Join("git-commit", a.branch), specs.DigestOf([]byte(cp.Tip)))}, cp)
	if err != nil {
		return nil, err
	}
	return signing.SignStatement(st, key)
}

// endState is the checkpoint predicate of a clean audit's end, unsigned;
// the pages of its tables are written to pages.
func (a *auditor) endState(pages pagetable.Store) (*Checkpoint, error) {
	tip := a.base
	if len(a.commits) > 0 {
		tip = a.commits[len(a.commits)-1]
	}
	if tip == nil {
		return nil, errors.New("evidence: no commit to checkpoint")
	}
	cp := Checkpoint{Branch: a.branch, Tip: tip.hash.String(), TipCommitted: tip.when.UTC(), AuditedAt: a.opts.Now.UTC(),
		TrustPolicyDigest: a.policy.Digest()}
	cp.State.Commits = tip.index + 1
	var open []*runAudit
	for _, r := range a.runs {
		if !r.ref && r.chainLink() == nil {
			open = append(open, r)
		}
	}
	type line struct{ path, text string }
	var lines []line
	for i, r := range open {
		adm := 0
		if r.admitted {
			adm = 1
		}
		cp.State.Runs = append(cp.State.Runs, fmt.Sprintf("%d 0 - - %s", adm, r.dir))
		for _, f := range r.files {
			kind := "-"
			switch classify(f.path) {
			case kindDocument:
				kind = "d"
			case kindApproval:
				kind = "a"
			}
			lines = append(lines, line{f.path, fmt.Sprintf("%d %s %s %s %d - %s", f.landed.index, f.blob, f.digest, kind, i, f.path)})
		}
	}
	sort.Slice(lines, func(i, j int) bool { return lines[i].path < lines[j].path })
	cp.State.Runs = append([]string{}, cp.State.Runs...)
	cp.State.Files = []string{}
	for _, l := range lines {
		cp.State.Files = append(cp.State.Files, l.text)
	}
	heads := maps.Clone(a.heads)
	if heads == nil {
		heads = map[string]int64{}
	}
	for p, f := range a.files {
		if f.ref || !strings.HasPrefix(p, "chain/") {
			continue
		}
		if rp, ok := evidence.ParsePath(p); ok && rp.Kind == evidence.KindChainLink && rp.Seq > heads[rp.Cluster] {
			heads[rp.Cluster] = rp.Seq
		}
	}
	cp.State.Heads = []string{}
	for _, c := range sortedKeys(heads) {
		cp.State.Heads = append(cp.State.Heads, fmt.Sprintf("%s %d", c, heads[c]))
	}
	if err := encodeHistory(&a.hist, &cp.State); err != nil {
		return nil, err
	}
	var err error
	if cp.State.Pages, err = a.writeTables(pages); err != nil {
		return nil, err
	}
	return &cp, nil
}

// encodeLink is what a checkpoint carries of chain link f (at p): its
// run, receipt path and digest.
func encodeLink(p string, f *fileRec) (*evidence.ChainLink, error) {
	l := f.link
	if l == nil {
		l = &evidence.ChainLink{}
		if err := signing.StrictUnmarshal(f.data, l); err != nil {
			return nil, fmt.Errorf("evidence: chain link %s cannot be written in a checkpoint: %w", p, err)
		}
	}
	if strings.ContainsAny(l.Run+l.Receipt.Path+string(l.Receipt.Digest), " \t\n") {
		return nil, fmt.Errorf("evidence: chain link %s cannot be written in a checkpoint", p)
	}
	return l, nil
}

// CheckpointPages returns the digest of every state page checkpoint
// names, directly (the pages of its tables' index) or through its index,
// read from pages: for housekeeping of the pages kept beside it. The
// envelope is not verified (the audit that uses a checkpoint does); the
// index pages are checked against their digests.
func CheckpointPages(checkpoint []byte, pages pagetable.Store) ([]string, error) {
	var env signing.Envelope
	if err := json.Unmarshal(checkpoint, &env); err != nil {
		return nil, fmt.Errorf("evidence: checkpoint: %w", err)
	}
	payload, err := base64.StdEncoding.DecodeString(env.Payload)
	if err != nil {
		return nil, fmt.Errorf("evidence: checkpoint: %w", err)
	}
	var st struct {
		Predicate struct {
			State struct {
				Pages []pagetable.Page `json:"pages"`
			} `json:"state"`
		} `json:"predicate"`
	}
	if err := json.Unmarshal(payload, &st); err != nil {
		return nil, fmt.Errorf("evidence: checkpoint: %w", err)
	}
	tree, err := pagetable.OpenTree(st.Predicate.State.Pages, pages)
	if err != nil {
		return nil, fmt.Errorf("evidence: checkpoint: %w", err)
	}
	return tree.Digests()
}
