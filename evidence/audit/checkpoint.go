package audit

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
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
	"signet.dev/signet/signing"
	"signet.dev/signet/specs"
)

// PredicateCheckpoint is the predicate type of an audit checkpoint: a
// DSSE envelope, signed by an auditor of the trust policy, of what a
// clean audit knew at the tip it read.
// Version 2 added the replay state that proves firings (State.Latest,
// Held, Pending); a version 1 checkpoint, without it, is refused.
// Version 3 packs the files of runs with a receipt (State.Closed); a
// version 2 checkpoint is refused, as one the audit no longer reads.
const PredicateCheckpoint = "https://signet.dev/AuditCheckpoint/v3"

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

// State is the audit state a checkpoint carries: every commit of the
// first-parent history up to the tip, every file, and every run
// directory. Each is a list of lines of space-separated fields, the last
// one running to the end of the line, so that the state of a long branch
// decodes in one pass without escapes (a JSON object per file costs
// several times more than the audit of a run):
//
//	Runs:    <admitted 0|1> <receipt sequence, 0: none> <previous receipt digest|-> <its path|-> <dir>
//	Files:   <landed: index in Commits> <blob> <digest> <kind> <run: index in Runs|-> <content, base64|-> <path>
//
// Kind is d (signed document), a (approval copy), i (index entry), c
// (chain link) or - (other); only index entries and chain links carry
// their content, a chain link decoded (encodeLink: run, receipt path and
// digest, one a line). Runs without a receipt are read and checked again by
// the audit that starts from the checkpoint.
//
// Commits is every commit of the first-parent history up to the tip,
// oldest first, packed (base64): its hash (20 bytes) and committer time
// (Unix seconds, 8 bytes big-endian) each. Index entries and chain links
// carry "-" for their digest, computed from their content when needed.
//
// The files of runs with a receipt are not in Files but packed in Closed
// (base64), a record each, their names relative to the run directory in
// ClosedNames (encodeClosed): about a sixth of the bytes of a Files line,
// and decoded without splitting strings. Only the receipt carries its
// digest; a later audit reads the others' blobs again if a file added to
// the run reopens it.
//
// Latest, Held and Pending are the state of the replay that proves
// firings at the tip (encodeHistory): each node's latest finished run of
// each profile, the nodes signet holds, and the snapshots identity
// reasons of firings not admitted yet are proven against.
type State struct {
	Commits string   `json:"commits"`
	Runs    []string `json:"runs"`
	Files   []string `json:"files"`
	Latest  []string `json:"latest"`
	Held    []string `json:"held"`
	Pending []string `json:"pending"`
	// ClosedNames and Closed: the files of runs with a receipt.
	ClosedNames []string `json:"closedNames"`
	Closed      string   `json:"closed"`
}

// stateKinds are the file kinds a State names, by letter.
var stateKinds = map[string]int{"d": kindDocument, "a": kindApproval, "i": kindIndex, "c": kindChain, "-": kindOther}

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
	if old := "https://signet.dev/AuditCheckpoint/v2"; v.Statement.PredicateType == old {
		return nil, nil, checkpointErr(name, "predicateType", "%q is a checkpoint in the format before %q (files of finished runs packed): audit the whole branch again", old, PredicateCheckpoint)
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
// the state a signed checkpoint carries, unsigned: it is trusted only
// because this process computed it, and cannot be written out or read
// back (its fields are unexported).
type Resume struct {
	cp Checkpoint
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
	return &r.cp, &CheckpointInfo{Tip: r.cp.Tip, AuditedAt: r.cp.AuditedAt}, nil
}

// restore makes the audit continue from cp: the commits, files and run
// directories it names become what the replay of the history up to its
// tip would have left. It returns the runs without a receipt, which the
// caller reopens once the revocation anchors are resolved (their
// documents are read and verified again, and they are checked at the end
// at the audit's time). It runs before the history is read.
func (a *auditor) restore(name string, cp *Checkpoint) (open []*runAudit, err error) {
	st := &cp.State
	bad := func(field string, i int, format string, args ...any) error {
		return checkpointErr(name, fmt.Sprintf("%s line %d", field, i+1), format, args...)
	}
	packedCommits, err := base64.StdEncoding.DecodeString(st.Commits)
	if err != nil || len(packedCommits)%28 != 0 {
		return nil, checkpointErr(name, "state.commits", "is not base64 of 28-byte records")
	}
	commits := make([]*commitInfo, len(packedCommits)/28)
	infos := make([]commitInfo, len(commits))
	done := &sigResult{}
	for i := range commits {
		b := packedCommits[i*28:]
		ci := &infos[i]
		copy(ci.hash[:], b[:20])
		ci.when, ci.index, ci.sigErr = time.Unix(int64(binary.BigEndian.Uint64(b[20:28])), 0), i, done
		if a.byHash.get(ci.hash) != nil {
			return nil, checkpointErr(name, fmt.Sprintf("state.commits record %d", i+1), "%s appears twice", ci.hash)
		}
		commits[i] = ci
		a.byHash.put(ci)
	}
	if len(commits) == 0 || commits[len(commits)-1].hash.String() != cp.Tip {
		return nil, checkpointErr(name, "state.commits", "does not end at the tip %s", cp.Tip)
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

	var runs []*runAudit
	for i, line := range st.Runs {
		f := strings.SplitN(line, " ", 5)
		if len(f) != 5 {
			return nil, bad("state.runs", i, "%d fields, not 5", len(f))
		}
		seq, err := strconv.ParseInt(f[1], 10, 64)
		rp, ok := evidence.ParsePath(f[4] + "/" + evidence.AdmissionFile)
		if err != nil || seq < 0 || (f[0] != "0" && f[0] != "1") || !ok || !rp.InRun() || rp.Dir() != f[4] || a.runsByDir[f[4]] != nil {
			return nil, bad("state.runs", i, "%q is not a run directory named once, admitted 0 or 1 and a receipt sequence", line)
		}
		// Only files and what checkAll reads: a run with a receipt is not
		// checked again unless a later file reopens it (newRunAudit).
		r := &runAudit{a: a, cluster: rp.Cluster, id: rp.Run, dir: f[4], files: map[string]*fileRec{}}
		r.admitted = f[0] == "1"
		if seq > 0 {
			r.receipt = &evidence.Receipt{Sequence: seq}
			if f[2] != "-" {
				r.receipt.Previous = &evidence.FileRef{Digest: specs.Digest(f[2]), Path: f[3]}
			}
		}
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
		if err != nil || landed < 0 || landed >= len(commits) {
			return nil, bad("state.files", i, "landed %q is not a commit of state.commits", f[0])
		}
		blob, err := hex.DecodeString(f[1])
		if err != nil || len(blob) != len(plumbing.ZeroHash) {
			return nil, bad("state.files", i, "%q is not an object hash", f[1])
		}
		kind, ok := stateKinds[f[3]]
		if !ok {
			return nil, bad("state.files", i, "kind %q is not one of d, a, i, c, -", f[3])
		}
		p := f[6]
		if a.files[p] != nil || seen[p] {
			return nil, bad("state.files", i, "%s appears twice", p)
		}
		seen[p] = true
		c := commits[landed]
		fr := &fileRec{path: p, blob: plumbing.NewHash(f[1]), commit: c, landed: c, digest: specs.Digest(f[2])}
		switch kind {
		case kindDocument, kindApproval:
			fr.doc = &docRec{kind: kind}
		case kindIndex, kindChain:
			if fr.data, err = base64.StdEncoding.DecodeString(f[5]); err != nil {
				return nil, bad("state.files", i, "content of %s: %v", p, err)
			}
			fr.digest = "" // as addFile keeps them
			if kind == kindChain {
				parts := strings.Split(string(fr.data), "\n")
				if len(parts) != 3 {
					return nil, bad("state.files", i, "content of %s is not a run, a receipt path and its digest", p)
				}
				fr.link, fr.data = &evidence.ChainLink{Run: parts[0], Receipt: evidence.FileRef{Path: parts[1], Digest: specs.Digest(parts[2])}}, nil
			}
		}
		if f[4] == "-" {
			a.files[p] = fr
			continue
		}
		ri, err := strconv.Atoi(f[4])
		if err != nil || ri < 0 || ri >= len(runs) || !strings.HasPrefix(p, runs[ri].dir+"/") {
			return nil, bad("state.files", i, "run %q of %s is not its run directory in state.runs", f[4], p)
		}
		r, rel := runs[ri], p[len(runs[ri].dir)+1:]
		if r.receipt != nil {
			return nil, bad("state.files", i, "%s is a file of run %s, which has a receipt: its files are in state.closed", p, r.dir)
		}
		a.files[p] = fr
		r.files[rel] = fr
	}
	if err := a.decodeClosed(name, st, runs, commits); err != nil {
		return nil, err
	}
	if err := a.decodeHistory(name, st); err != nil {
		return nil, err
	}
	for _, r := range runs {
		r.admFile = r.files[evidence.AdmissionFile]
		r.firFile = r.files[evidence.FiringFile]
		if r.receipt == nil {
			open = append(open, r)
			continue
		}
		if r.rcFile = r.files[evidence.ReceiptFile]; r.rcFile == nil {
			return nil, checkpointErr(name, "state.runs", "run %s has a receipt sequence but no receipt in state.files", r.dir)
		}
		r.checked, r.queued, r.restored, r.compacted = true, true, true, true
		r.files = nil
		r.link, r.linked, r.receipt = receiptLink{r.receipt.Sequence, r.receipt.Previous}, true, nil
		if err := r.spillClosed(); err != nil {
			return nil, err
		}
	}
	return open, nil
}

// checkpoint returns the checkpoint of a clean audit's end: its tip and
// the state a later audit continues from, signed by key.
func (a *auditor) checkpoint(key *signing.PrivateKey) ([]byte, error) {
	cp, err := a.endState()
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

// endState is the checkpoint predicate of a clean audit's end, unsigned.
func (a *auditor) endState() (*Checkpoint, error) {
	commits := append(append([]*commitInfo(nil), a.baseCommits...), a.commits...)
	if len(commits) == 0 {
		return nil, errors.New("evidence: no commit to checkpoint")
	}
	tip := commits[len(commits)-1]
	cp := Checkpoint{Branch: a.branch, Tip: tip.hash.String(), TipCommitted: tip.when.UTC(), AuditedAt: a.opts.Now.UTC(),
		TrustPolicyDigest: a.policy.Digest()}
	packedCommits := make([]byte, 0, 28*len(commits))
	for _, c := range commits {
		packedCommits = append(packedCommits, c.hash[:]...)
		packedCommits = binary.BigEndian.AppendUint64(packedCommits, uint64(c.when.Unix()))
	}
	cp.State.Commits = base64.StdEncoding.EncodeToString(packedCommits)
	type line struct{ path, text string }
	var lines []line
	fileLine := func(p string, landed int, blob plumbing.Hash, digest specs.Digest, data []byte, run string) {
		kind, content := "-", "-"
		switch classify(p) {
		case kindDocument:
			kind = "d"
		case kindApproval:
			kind = "a"
		case kindIndex:
			kind, content = "i", base64.StdEncoding.EncodeToString(data)
		case kindChain:
			kind, content = "c", base64.StdEncoding.EncodeToString(data) // encodeLink's
		}
		lines = append(lines, line{p, fmt.Sprintf("%d %s %s %s %s %s %s", landed, blob, digest, kind, run, content, p)})
	}
	runOf := map[*fileRec]int{}
	files := maps.Clone(a.files)
	packed := newClosedPacker()
	for i, r := range a.runs {
		adm, prev := 0, "- -"
		if r.admitted {
			adm = 1
		}
		var seq int64
		if rc := r.chainLink(); rc != nil {
			seq = rc.Sequence
			if pr := rc.Previous; pr != nil {
				prev = string(pr.Digest) + " " + pr.Path
			}
		}
		if strings.Count(prev, " ") != 1 {
			return nil, fmt.Errorf("evidence: run directory %q cannot be written in a checkpoint", r.dir)
		}
		cp.State.Runs = append(cp.State.Runs, fmt.Sprintf("%d %d %s %s", adm, seq, prev, r.dir))
		switch {
		case r.compacted:
			closed, err := r.closedRecs()
			if err != nil {
				return nil, err
			}
			packed.add(i, closed)
		case seq > 0:
			// Checked at the end of the audit, not compacted.
			var closed []closedFile
			for rel, f := range r.files {
				closed = append(closed, newClosedFile(rel, f))
				delete(files, f.path)
			}
			packed.add(i, closed)
		default:
			for _, f := range r.files {
				runOf[f] = i
			}
		}
	}
	cp.State.ClosedNames, cp.State.Closed = packed.names, base64.StdEncoding.EncodeToString(packed.buf)
	for p, f := range files {
		run := "-"
		if i, ok := runOf[f]; ok {
			run = strconv.Itoa(i)
		}
		d, data := f.digest, f.data
		switch classify(p) {
		case kindIndex:
			d = "-"
		case kindChain:
			d = "-"
			var err error
			if data, err = encodeLink(p, f); err != nil {
				return nil, err
			}
		}
		fileLine(p, f.landed.index, f.blob, d, data, run)
	}
	sort.Slice(lines, func(i, j int) bool { return lines[i].path < lines[j].path })
	for _, l := range lines {
		cp.State.Files = append(cp.State.Files, l.text)
	}
	if err := encodeHistory(&a.hist, &cp.State); err != nil {
		return nil, err
	}
	return &cp, nil
}

// closedPacker writes State.Closed: per file, the index of its run in
// State.Runs (uint32), of its name in State.ClosedNames (uint16), of the
// commit where it landed in State.Commits (uint32), its kind (0 other, 1
// signed document, 2 approval copy), its blob (20 bytes), then 1 and its
// sha256 digest (32 bytes) for a receipt, 0 for any other file.
type closedPacker struct {
	buf   []byte
	names []string
	index map[string]int
}

func newClosedPacker() *closedPacker {
	return &closedPacker{names: []string{}, index: map[string]int{}}
}

var closedKinds = map[int8]byte{kindOther: 0, kindDocument: 1, kindApproval: 2}

func (w *closedPacker) add(run int, files []closedFile) {
	sort.Slice(files, func(i, j int) bool { return files[i].rel < files[j].rel })
	for _, c := range files {
		n, ok := w.index[c.rel]
		if !ok {
			n = len(w.names)
			w.names = append(w.names, c.rel)
			w.index[c.rel] = n
		}
		w.buf = binary.LittleEndian.AppendUint32(w.buf, uint32(run))
		w.buf = binary.LittleEndian.AppendUint16(w.buf, uint16(n))
		w.buf = binary.LittleEndian.AppendUint32(w.buf, uint32(c.landed))
		w.buf = append(w.buf, closedKinds[c.kind])
		w.buf = append(w.buf, c.blob[:]...)
		if c.rel == evidence.ReceiptFile {
			w.buf = append(w.buf, 1)
			w.buf = append(w.buf, c.digest[:]...)
		} else {
			w.buf = append(w.buf, 0)
		}
	}
}

// decodeClosed restores the files of the runs with a receipt from
// State.Closed: such a run was checked by the audit that wrote the
// checkpoint, and starts compacted, with the records of its admission,
// firing and receipt for the whole-branch rules.
func (a *auditor) decodeClosed(name string, st *State, runs []*runAudit, commits []*commitInfo) error {
	bad := func(format string, args ...any) error {
		return checkpointErr(name, "state.closed", format, args...)
	}
	if len(st.ClosedNames) > 1<<16 {
		return bad("%d names, more than %d", len(st.ClosedNames), 1<<16)
	}
	names := make([]string, len(st.ClosedNames))
	for i, n := range st.ClosedNames {
		if n == "" || path.IsAbs(n) || path.Clean(n) != n || n == ".." || strings.HasPrefix(n, "../") {
			return checkpointErr(name, fmt.Sprintf("state.closedNames line %d", i+1), "%q is not a path inside a run directory", n)
		}
		names[i] = internRel(n)
	}
	buf, err := base64.StdEncoding.DecodeString(st.Closed)
	if err != nil {
		return bad("does not decode: %v", err)
	}
	// Records come by run, then by name (closedPacker): a file named
	// twice is a record not after the one before.
	var prevRun uint32
	prevName := ""
	for i := 0; len(buf) > 0; i++ {
		if len(buf) < 32 {
			return bad("record %d is cut short", i+1)
		}
		ri, ni := binary.LittleEndian.Uint32(buf), binary.LittleEndian.Uint16(buf[4:])
		landed, kind := binary.LittleEndian.Uint32(buf[6:]), buf[10]
		var c closedFile
		copy(c.blob[:], buf[11:31])
		hasDigest := buf[31]
		buf = buf[32:]
		switch {
		case int(ri) >= len(runs) || runs[ri].receipt == nil:
			return bad("record %d: run %d is not a run with a receipt of state.runs", i+1, ri)
		case int(ni) >= len(st.ClosedNames):
			return bad("record %d: name %d is not in state.closedNames", i+1, ni)
		case int(landed) >= len(commits):
			return bad("record %d: landed %d is not a commit of state.commits", i+1, landed)
		case kind > 2 || hasDigest > 1:
			return bad("record %d: kind %d, digest flag %d", i+1, kind, hasDigest)
		case i > 0 && (ri < prevRun || ri == prevRun && names[ni] <= prevName):
			return bad("record %d: %s of run %s is not after the record before (by run, then name): named twice, or out of order", i+1, names[ni], runs[ri].dir)
		}
		prevRun, prevName = ri, names[ni]
		if hasDigest == 1 {
			if len(buf) < 32 {
				return bad("record %d is cut short", i+1)
			}
			copy(c.digest[:], buf[:32])
			buf = buf[32:]
		}
		r := runs[ri]
		c.rel = names[ni]
		c.commit, c.landed = int32(landed), int32(landed)
		c.kind = [...]int8{kindOther, kindDocument, kindApproval}[kind]
		r.closed = append(r.closed, c)
		a.closedFiles++
		switch c.rel {
		case evidence.AdmissionFile, evidence.FiringFile, evidence.ReceiptFile:
			f := &fileRec{path: r.dir + "/" + c.rel, blob: c.blob, commit: commits[landed], landed: commits[landed], digest: c.digestString()}
			if c.kind != kindOther {
				f.doc = doneDocs[int(c.kind)]
			}
			r.files[c.rel] = f
		}
	}
	return nil
}

// encodeLink is what a checkpoint carries of chain link f (at p): its
// run, receipt path and digest, one a line, decoded once by the audit
// that wrote it (checkChains reads them, not the JSON).
func encodeLink(p string, f *fileRec) ([]byte, error) {
	l := f.link
	if l == nil {
		l = &evidence.ChainLink{}
		if err := signing.StrictUnmarshal(f.data, l); err != nil {
			return nil, fmt.Errorf("evidence: chain link %s cannot be written in a checkpoint: %w", p, err)
		}
	}
	if strings.Contains(l.Run+l.Receipt.Path+string(l.Receipt.Digest), "\n") {
		return nil, fmt.Errorf("evidence: chain link %s cannot be written in a checkpoint", p)
	}
	return []byte(l.Run + "\n" + l.Receipt.Path + "\n" + string(l.Receipt.Digest)), nil
}
