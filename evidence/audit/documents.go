package audit

import (
	"path"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"signet.dev/signet/evidence"
	"signet.dev/signet/specs"
)

// RunDocuments are the documents of one run that the audit verified,
// decoded by the audit's own code, for a reader that shows them
// (Options.Observe, signet report). A field is nil (or absent from its
// map) when its document is missing or did not verify and decode: nothing
// here was read a second way. Verified is not clean: a run may still
// have findings (a binding, a summary, an approval), which Report.Findings
// name; a reader must check them before it presents these documents as
// proven.
type RunDocuments struct {
	Cluster, Run, Dir string
	// Firing is a standing certification's run's firing record.
	Firing    *evidence.Firing
	Admission *evidence.Admission
	// Snapshots are the node snapshots the admission binds by digest, by
	// node name.
	Snapshots map[string]*evidence.NodeSnapshot
	// Intents and Checks are by the admitted profile's check index.
	Intents  []*evidence.CheckIntent
	Checks   []*evidence.CheckEvidence
	Evidence *evidence.RunEvidence
	Cancel   *evidence.Action
	Release  *evidence.Action
	Receipt  *evidence.Receipt
	Files    map[string]FileInfo
	// Logs are the log tails a verified check document binds, by path
	// relative to the run directory, each read from the branch and equal
	// to the digest the document binds.
	Logs map[string][]byte
	// ApprovedBy are the approver key ids the trust policy counted, by
	// document (admission.json, cancel.json, release.json).
	ApprovedBy map[string][]string
	// Signers are the evidence keys that signed the run's documents.
	Signers []string
}

// FileInfo is one file of a run directory as the audit read it.
type FileInfo struct {
	Digest specs.Digest
	// Commit is the commit where the path first appeared, and its
	// committer time.
	Commit    string
	Committed time.Time
}

// documents collects what r.check verified, before compact drops it.
func (r *runAudit) documents() *RunDocuments {
	d := &RunDocuments{Cluster: r.cluster, Run: r.id, Dir: r.dir, Files: map[string]FileInfo{},
		Snapshots: map[string]*evidence.NodeSnapshot{}, Logs: map[string][]byte{}, ApprovedBy: map[string][]string{}}
	for rel, f := range r.files {
		d.Files[rel] = FileInfo{Digest: f.digest, Commit: f.landed.hash.String(), Committed: f.landed.when}
	}
	d.Firing = r.firing
	if !r.admitted || r.adm == nil {
		return d
	}
	d.Admission = r.adm
	for k, v := range r.snapshots {
		d.Snapshots[k] = v
	}
	d.Intents, d.Checks = r.intents, r.checks
	d.Evidence, d.Receipt, d.Cancel, d.Release = r.ev, r.receipt, r.actions[evidence.CancelFile], r.actions[evidence.ReleaseFile]
	for rel, keys := range r.approvedBy {
		d.ApprovedBy[rel] = keys
	}
	for k := range r.signers {
		d.Signers = append(d.Signers, k)
	}
	for _, ce := range r.checks {
		if ce == nil {
			continue
		}
		for _, po := range ce.Participants {
			for _, l := range po.Logs {
				rel, ok := r.rel(l.Path)
				f := r.files[rel]
				if !ok || f == nil || f.digest != l.Digest {
					continue
				}
				data, err := r.a.readShared(f.blob)
				if err != nil || specs.DigestOf(data) != l.Digest {
					continue
				}
				d.Logs[rel] = data
			}
		}
	}
	return d
}

// Rel returns p (a branch path) relative to the run directory, "" when
// it is outside it.
func (d *RunDocuments) Rel(p string) string {
	if len(p) > len(d.Dir) && p[:len(d.Dir)+1] == d.Dir+"/" {
		return p[len(d.Dir)+1:]
	}
	return ""
}

// Path returns the branch path of rel, a path relative to the run
// directory.
func (d *RunDocuments) Path(rel string) string { return path.Join(d.Dir, rel) }

// readShared reads a blob from the runs' checks, which run on several
// goroutines: serialized when the branch's object source is not safe for
// concurrent use.
func (a *auditor) readShared(h plumbing.Hash) ([]byte, error) {
	if !a.rd.Concurrent() {
		a.readMu.Lock()
		defer a.readMu.Unlock()
	}
	return readRaw(a.rd, plumbing.BlobObject, h)
}
