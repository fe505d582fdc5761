package audit

import (
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"signet.dev/signet/evidence"
	"signet.dev/signet/internal/gitobj"
	"signet.dev/signet/signing"
	"signet.dev/signet/specs"
)

// PredicateCheckpoint is the predicate type of an audit checkpoint: a
// DSSE envelope, signed by an auditor of the trust policy, of what a
// clean audit knew at the tip it read.
const PredicateCheckpoint = "https://signet.dev/AuditCheckpoint/v1"

// ErrCheckpoint: the checkpoint given to start from cannot be used (not
// signed by an auditor of the trust policy, another branch or trust
// policy, its tip not on the branch's first-parent history, a state that
// does not decode or does not hold together). Nothing was audited: a
// refused checkpoint is never a clean result.
var ErrCheckpoint = errors.New("evidence: audit checkpoint refused")

// Checkpoint is the predicate of an audit checkpoint. State is what the
// whole-branch rules need to continue past Tip without reading the
// history again; it is trusted only through the envelope's signature.
type Checkpoint struct {
	Branch            string       `json:"branch"`
	Tip               string       `json:"tip"`
	TipCommitted      time.Time    `json:"tipCommitted"`
	AuditedAt         time.Time    `json:"auditedAt"`
	TrustPolicyDigest specs.Digest `json:"trustPolicyDigest"`
	State             State        `json:"state"`
}

// State is the audit state a checkpoint carries, in compact form: every
// commit of the first-parent history up to the tip (hash, committer
// time), every file (path, blob, digest, the commit it landed in; the
// content of index entries and chain links), and every run directory
// (admitted, its receipt's place in the chain; open runs, without a
// receipt, are read and checked again by the next audit).
type State struct {
	Commits []StateCommit `json:"commits"`
	Files   []StateFile   `json:"files"`
	Runs    []StateRun    `json:"runs"`
}

// StateCommit is one commit of the first-parent history.
type StateCommit struct {
	Hash string `json:"h"`
	Time int64  `json:"t"` // committer time, Unix seconds
}

// StateFile is one file of the branch.
type StateFile struct {
	Path   string       `json:"p"`
	Blob   string       `json:"b"`
	Digest specs.Digest `json:"d"`
	Landed int          `json:"l"`           // index into State.Commits
	Data   []byte       `json:"x,omitempty"` // index entries and chain links only
}

// StateRun is one run directory.
type StateRun struct {
	Dir      string            `json:"dir"`
	Admitted bool              `json:"admitted"`
	Sequence int64             `json:"seq,omitempty"`
	Previous *evidence.FileRef `json:"prev,omitempty"`
}

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
	if v.Statement.PredicateType != PredicateCheckpoint {
		return nil, nil, checkpointErr(name, "predicateType", "%q is not %q", v.Statement.PredicateType, PredicateCheckpoint)
	}
	var cp Checkpoint
	if err := signing.StrictUnmarshal(v.Statement.Predicate, &cp); err != nil {
		return nil, nil, checkpointErr(name, "predicate", "does not decode: %v", err)
	}
	switch {
	case cp.Branch != a.branch:
		return nil, nil, checkpointErr(name, "branch", "%q, but the audit reads branch %q", cp.Branch, a.branch)
	case cp.TrustPolicyDigest != a.policy.Digest():
		return nil, nil, checkpointErr(name, "trustPolicyDigest", "%s, but the audit's trust policy is %s: a checkpoint holds only under the policy it was audited with (audit the whole branch again)", cp.TrustPolicyDigest, a.policy.Digest())
	case !evidence.IsCommitHash(cp.Tip):
		return nil, nil, checkpointErr(name, "tip", "%q is not a commit hash", cp.Tip)
	case len(cp.State.Commits) == 0 || cp.State.Commits[len(cp.State.Commits)-1].Hash != cp.Tip:
		return nil, nil, checkpointErr(name, "state.commits", "does not end at the tip %s", cp.Tip)
	}
	return &cp, &CheckpointInfo{Tip: cp.Tip, AuditedAt: cp.AuditedAt, Signers: v.Keys}, nil
}

// restore makes the audit continue from cp: the commits, files and run
// directories it names become what the replay of the history up to its
// tip would have left. It returns the runs without a receipt, which the
// caller reopens once the revocation anchors are resolved (their
// documents are read and verified again, and they are checked at the end
// at the audit's time). It runs before the history is read.
func (a *auditor) restore(name string, cp *Checkpoint) (open []*runAudit, err error) {
	st := &cp.State
	commits := make([]*commitInfo, len(st.Commits))
	for i, c := range st.Commits {
		if !evidence.IsCommitHash(c.Hash) {
			return nil, checkpointErr(name, fmt.Sprintf("state.commits[%d]", i), "%q is not a commit hash", c.Hash)
		}
		ci := &commitInfo{hash: plumbing.NewHash(c.Hash), when: time.Unix(c.Time, 0), index: i, sigErr: &sigResult{}}
		if a.byHash[ci.hash] != nil {
			return nil, checkpointErr(name, fmt.Sprintf("state.commits[%d]", i), "%s appears twice", c.Hash)
		}
		commits[i] = ci
		a.byHash[ci.hash] = ci
	}
	a.baseCommits = commits
	a.base = commits[len(commits)-1]
	raw, err := readRaw(a.rd, plumbing.CommitObject, a.base.hash)
	if err != nil {
		return nil, checkpointErr(name, "tip", "commit %s is not in the repository: %v", cp.Tip, err)
	}
	hdr, err := gitobj.ParseCommitHeader(raw)
	if err != nil {
		return nil, fmt.Errorf("evidence: could not decode commit %s: %w", cp.Tip, err)
	}
	if !hdr.When.Equal(a.base.when) {
		return nil, checkpointErr(name, "state.commits", "tip %s was committed at %s, the state says %s", cp.Tip, hdr.When.UTC().Format(time.RFC3339), a.base.when.UTC().Format(time.RFC3339))
	}
	a.base.tree = hdr.Tree
	byDir := map[string]map[string]*fileRec{}
	for i, sf := range st.Files {
		field := fmt.Sprintf("state.files[%d]", i)
		blob, err := hex.DecodeString(sf.Blob)
		if err != nil || len(blob) != len(plumbing.ZeroHash) {
			return nil, checkpointErr(name, field+".b", "%q is not an object hash", sf.Blob)
		}
		if sf.Landed < 0 || sf.Landed >= len(commits) {
			return nil, checkpointErr(name, field+".l", "commit %d is not in state.commits", sf.Landed)
		}
		if a.files[sf.Path] != nil {
			return nil, checkpointErr(name, field+".p", "%s appears twice", sf.Path)
		}
		c := commits[sf.Landed]
		f := &fileRec{path: sf.Path, blob: plumbing.NewHash(sf.Blob), commit: c, landed: c, digest: sf.Digest}
		switch kind := classify(sf.Path); kind {
		case kindDocument, kindApproval:
			f.doc = &docRec{kind: kind}
		case kindIndex, kindChain:
			f.data = sf.Data
		}
		a.files[sf.Path] = f
		if rp, ok := evidence.ParsePath(sf.Path); ok && rp.InRun() {
			if byDir[rp.Dir()] == nil {
				byDir[rp.Dir()] = map[string]*fileRec{}
			}
			byDir[rp.Dir()][rp.Rel()] = f
		}
	}
	for i, sr := range st.Runs {
		field := fmt.Sprintf("state.runs[%d]", i)
		rp, ok := evidence.ParsePath(sr.Dir + "/" + evidence.AdmissionFile)
		files := byDir[sr.Dir]
		if !ok || !rp.InRun() || rp.Dir() != sr.Dir || files == nil || a.runsByDir[sr.Dir] != nil {
			return nil, checkpointErr(name, field+".dir", "%q is not a run directory of state.files named once", sr.Dir)
		}
		r := newRunAudit(a, rp.Cluster, rp.Run, sr.Dir, files)
		r.admitted, r.admFile = sr.Admitted, files[evidence.AdmissionFile]
		a.runsByDir[sr.Dir] = r
		if sr.Sequence == 0 {
			open = append(open, r)
			continue
		}
		r.rcFile = files[evidence.ReceiptFile]
		if r.rcFile == nil {
			return nil, checkpointErr(name, field+".seq", "run %s has a receipt sequence but no receipt in state.files", sr.Dir)
		}
		r.receipt = &evidence.Receipt{Sequence: sr.Sequence, Previous: sr.Previous}
		r.checked, r.queued, r.restored = true, true, true
	}
	if len(byDir) != len(a.runsByDir) {
		return nil, checkpointErr(name, "state.runs", "%d run directories, but state.files holds files of %d", len(a.runsByDir), len(byDir))
	}
	return open, nil
}

// checkpoint returns the checkpoint of a clean audit's end: its tip and
// the state a later audit continues from, signed by key.
func (a *auditor) checkpoint(key *signing.PrivateKey) ([]byte, error) {
	commits := append(append([]*commitInfo(nil), a.baseCommits...), a.commits...)
	if len(commits) == 0 {
		return nil, errors.New("evidence: no commit to checkpoint")
	}
	tip := commits[len(commits)-1]
	cp := Checkpoint{Branch: a.branch, Tip: tip.hash.String(), TipCommitted: tip.when.UTC(), AuditedAt: a.opts.Now.UTC(),
		TrustPolicyDigest: a.policy.Digest()}
	for _, c := range commits {
		cp.State.Commits = append(cp.State.Commits, StateCommit{Hash: c.hash.String(), Time: c.when.Unix()})
	}
	var paths []string
	for p := range a.files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		f := a.files[p]
		sf := StateFile{Path: p, Blob: f.blob.String(), Digest: f.digest, Landed: f.landed.index}
		if top, _, _ := strings.Cut(p, "/"); top == "ids" || top == "chain" {
			sf.Data = f.data
		}
		cp.State.Files = append(cp.State.Files, sf)
	}
	for _, r := range a.runs {
		sr := StateRun{Dir: r.dir, Admitted: r.admitted}
		if r.receipt != nil {
			sr.Sequence, sr.Previous = r.receipt.Sequence, r.receipt.Previous
		}
		cp.State.Runs = append(cp.State.Runs, sr)
	}
	st, err := signing.NewStatement(PredicateCheckpoint,
		[]signing.Subject{signing.SubjectFor(path.Join("git-commit", a.branch), specs.DigestOf([]byte(cp.Tip)))}, cp)
	if err != nil {
		return nil, err
	}
	return signing.SignStatement(st, key)
}
