package audit

import (
	"encoding/hex"
	"strings"
	"sync"

	"github.com/go-git/go-git/v5/plumbing"

	"signet.dev/signet/evidence"
	"signet.dev/signet/specs"
)

// closedFile is what a whole-branch audit keeps of a file of a run it has
// checked (runAudit.closed), once compact has dropped the file's record:
// enough to read and verify the file again if a later commit reopens the
// run, to find byte-for-byte copies of its documents in other runs
// (checkCopies), and to write it in a checkpoint. About 80 bytes, against
// several hundred for a fileRec with its path, digest string and map
// entries.
type closedFile struct {
	rel    string // relative to the run directory, interned
	blob   plumbing.Hash
	digest [32]byte // sha256; zero when the record had none
	commit int32    // first-parent index of the commit that added this version
	landed int32    // … and of the one where the path first appeared
	kind   int8     // kindDocument, kindApproval or another kind
}

// keptRel are the files of a checked run whose records compact keeps, for
// the whole-branch rules that read them: the receipt (checkChains), and
// the admission and firing record (checkIndex, checkFiringSequences).
func keptRel(rel string) bool {
	return rel == evidence.ReceiptFile || rel == evidence.AdmissionFile || rel == evidence.FiringFile
}

// relNames interns the relative paths of run directories: every run has
// the same few names, so a closed run costs a string header per file.
var relNames sync.Map

func internRel(rel string) string {
	if v, ok := relNames.Load(rel); ok {
		return v.(string)
	}
	rel = strings.Clone(rel)
	v, _ := relNames.LoadOrStore(rel, rel)
	return v.(string)
}

// doneDocs are the shared records of documents that verified, for the
// kept files of compacted runs: what check decoded is gone, only the kind
// is read after it.
var doneDocs = map[int]*docRec{kindDocument: {kind: kindDocument}, kindApproval: {kind: kindApproval}}

func digestBytes(d specs.Digest) (out [32]byte) {
	if h := d.Hex(); len(h) == 64 {
		_, _ = hex.Decode(out[:], []byte(h))
	}
	return out
}

func (c *closedFile) digestString() specs.Digest {
	if c.digest == ([32]byte{}) {
		return ""
	}
	return specs.Digest("sha256:" + hex.EncodeToString(c.digest[:]))
}

// commitAt returns the commit with first-parent index i, whether read by
// this audit or named by the checkpoint it started from.
func (a *auditor) commitAt(i int32) *commitInfo {
	if int(i) < len(a.baseCommits) {
		return a.baseCommits[i]
	}
	return a.commits[int(i)-len(a.baseCommits)]
}

// compactFiles drops the file records of a checked run (whole-branch
// audits only): they leave a.files, their signature verdicts go to
// a.sigFindings now (checkAll reports those of the files still open), and
// what stays is r.closed plus the records keptRel names. Memory then grows
// with the runs still open and by a closed run's compact record, not by
// every document the branch ever held.
func (r *runAudit) compactFiles() {
	a := r.a
	kept := map[string]*fileRec{}
	r.closed = make([]closedFile, 0, len(r.files))
	for rel, f := range r.files {
		a.sigVerdicts(f.path)
		kind := int8(kindOther)
		if f.doc != nil {
			kind = int8(f.doc.kind)
		}
		r.closed = append(r.closed, closedFile{rel: internRel(rel), blob: f.blob, digest: digestBytes(f.digest),
			commit: int32(f.commit.index), landed: int32(f.landed.index), kind: kind})
		delete(a.files, f.path)
		if keptRel(rel) {
			if f.doc != nil && f.doc.err == nil {
				f.doc = doneDocs[f.doc.kind]
			}
			kept[rel] = f
		}
	}
	r.files = kept
	r.compacted = true
	a.closedFiles += len(r.closed)
}

// openFiles is the inverse of compactFiles, for reopen: fresh records of
// every file of the run, back in a.files.
func (r *runAudit) openFiles() map[string]*fileRec {
	a := r.a
	files := make(map[string]*fileRec, len(r.closed))
	for _, c := range r.closed {
		f := &fileRec{path: r.dir + "/" + c.rel, blob: c.blob, commit: a.commitAt(c.commit), landed: a.commitAt(c.landed), digest: c.digestString()}
		if c.kind == kindDocument || c.kind == kindApproval {
			f.doc = &docRec{kind: int(c.kind)}
		}
		files[c.rel] = f
		a.files[f.path] = f
	}
	a.closedFiles -= len(r.closed)
	r.closed = nil
	return files
}

// sigFinding is a signature verdict of one version of a file.
type sigFinding struct {
	path    string
	version int
	f       Finding
}

// sigVerdicts records the signature verdicts of every version of p.
func (a *auditor) sigVerdicts(p string) {
	vs := a.versions[p]
	if len(vs) == 0 {
		vs = []*fileRec{a.files[p]}
	}
	for i, f := range vs {
		if f != nil && f.doc != nil && f.doc.err != nil {
			a.sigFindings = append(a.sigFindings, sigFinding{p, i, Finding{Rule: f.doc.rule, Run: runOfPath(p), Path: p, Commit: f.commit.hash.String(), Message: f.doc.err.Error()}})
		}
	}
}

// closedRunOf returns the checked (compacted) run whose directory holds
// p, nil when p is in none.
func (a *auditor) closedRunOf(p string) *runAudit {
	if !a.stream {
		return nil
	}
	rp, ok := evidence.ParsePath(p)
	if !ok || !rp.InRun() {
		return nil
	}
	if r := a.runsByDir[rp.Dir()]; r != nil && r.compacted {
		return r
	}
	return nil
}

// fileAt returns the latest version of the file at p, whether its run is
// open or compacted; nil when the branch has no such file.
func (a *auditor) fileAt(p string) *fileRec {
	if f := a.files[p]; f != nil {
		return f
	}
	r := a.closedRunOf(p)
	if r == nil {
		return nil
	}
	rel, _ := r.rel(p)
	if f := r.files[rel]; f != nil {
		return f
	}
	for _, c := range r.closed {
		if c.rel == rel {
			return &fileRec{path: p, blob: c.blob, commit: a.commitAt(c.commit), landed: a.commitAt(c.landed), digest: c.digestString()}
		}
	}
	return nil
}
