package audit

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"path"
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
// entries; whole-branch audits keep even those in a temporary file
// (spill), 63 bytes a file, and a run only their place in it.
type closedFile struct {
	rel    string // relative to the run directory, interned
	blob   plumbing.Hash
	digest [32]byte // sha256; zero when the record had none
	commit int32    // first-parent index of the commit that added this version
	landed int32    // … and of the one where the path first appeared
	kind   int8     // kindDocument, kindApproval or another kind
}

// newClosedFile is the compact record of f, at rel in its run.
func newClosedFile(rel string, f *fileRec) closedFile {
	kind := int8(kindOther)
	if f.doc != nil {
		kind = int8(f.doc.kind)
	}
	return closedFile{rel: internRel(rel), blob: f.blob, digest: digestBytes(f.digest),
		commit: int32(f.commit.index), landed: int32(f.landed.index), kind: kind}
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
	if int(i) < a.baseLen {
		return a.pastCommit(int(i))
	}
	return a.commits[int(i)-a.baseLen]
}

// compactFiles drops the file records of a checked run (whole-branch
// audits only): they leave a.files and r.files, their signature verdicts
// go to a.sigFindings now (checkAll reports those of the files still
// open), and what stays is r.closed and, trimmed, the records of the
// admission, firing and receipt (admFile, firFile, rcFile) that
// checkIndex, checkFiringSequences and checkChains read, with the
// receipt's sequence and previous receipt. Memory then grows with the
// runs still open and by a closed run's compact record, not by every
// document the branch ever held.
func (r *runAudit) compactFiles() error {
	a := r.a
	r.closed = make([]closedFile, 0, len(r.files))
	for rel, f := range r.files {
		a.sigVerdicts(f.path)
		r.closed = append(r.closed, newClosedFile(rel, f))
		delete(a.files, f.path)
	}
	for _, f := range []*fileRec{r.admFile, r.firFile, r.rcFile} {
		if f == nil {
			continue
		}
		if f.doc != nil && f.doc.err == nil {
			f.doc = doneDocs[f.doc.kind]
		}
		f.path, f.data = "", nil
		if f != r.rcFile {
			f.digest = "" // only the receipt's is read again (checkChains)
		}
	}
	if rc := r.receipt; rc != nil {
		r.link, r.linked, r.receipt = receiptLink{rc.Sequence, rc.Previous}, true, nil
	}
	r.files = nil
	r.compacted = true
	a.closedFiles += len(r.closed)
	return r.spillClosed()
}

// spillClosed moves r.closed to the audit's spill file.
func (r *runAudit) spillClosed() error {
	a := r.a
	if a.spill == nil {
		var err error
		if a.spill, err = newSpill(); err != nil {
			return err
		}
	}
	ref, err := a.spill.put(r.closed, r)
	if err != nil {
		return err
	}
	r.spilled = ref
	r.closed = nil
	return nil
}

// closedRecs returns the compact records of a compacted run.
func (r *runAudit) closedRecs() ([]closedFile, error) {
	if r.closed != nil || r.spilled.n == 0 {
		return r.closed, nil
	}
	return r.a.spill.get(r.spilled)
}

// openFiles is the inverse of compactFiles, for reopen: fresh records of
// every file of the run, back in a.files.
func (r *runAudit) openFiles() (map[string]*fileRec, error) {
	a := r.a
	closed, err := r.closedRecs()
	if err != nil {
		return nil, err
	}
	files := make(map[string]*fileRec, len(closed))
	for _, c := range closed {
		f, err := a.reviveFile(r.dir+"/"+c.rel, c)
		if err != nil {
			return nil, err
		}
		if c.kind == kindDocument || c.kind == kindApproval {
			f.doc = &docRec{kind: int(c.kind)}
		}
		files[c.rel] = f
		a.files[f.path] = f
	}
	a.closedFiles -= len(closed)
	if r.spilled.n > 0 {
		a.spill.segs[r.spilled.seg] = nil // superseded: scan skips them
	}
	r.closed, r.spilled = nil, spillRef{}
	return files, nil
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
// p, nil when p is in none: a run this audit holds, or a finished run of
// the checkpoint's tables, which it then holds (pastRun).
func (a *auditor) closedRunOf(p string) (*runAudit, error) {
	if !a.stream {
		return nil, nil
	}
	// A file directly in a run directory (a receipt, most often): no
	// need to parse the path. A record of the run at p means ParsePath
	// placed p there when it was added.
	if r := a.runsByDir[path.Dir(p)]; r != nil && r.compacted {
		return r, nil
	}
	rp, _ := evidence.ParsePath(p)
	return a.closedRunAt(p, rp)
}

// closedRunAt is closedRunOf of p, which ParsePath read as rp.
func (a *auditor) closedRunAt(p string, rp evidence.RunPath) (*runAudit, error) {
	if !a.stream {
		return nil, nil
	}
	if r := a.runsByDir[path.Dir(p)]; r != nil && r.compacted {
		return r, nil
	}
	if !rp.InRun() {
		return nil, nil
	}
	r, err := a.pastRun(rp.Dir())
	if err != nil || r == nil || !r.compacted {
		return nil, err
	}
	return r, nil
}

// fileAt returns the latest version of the file at p, whether its run is
// open or compacted; nil when the branch has no such file.
func (a *auditor) fileAt(p string) (*fileRec, error) {
	if f := a.files[p]; f != nil {
		return f, nil
	}
	r, err := a.closedRunOf(p)
	if r == nil || err != nil {
		return nil, err
	}
	rel, _ := r.rel(p)
	for _, f := range []*fileRec{r.rcFile, r.admFile, r.firFile} {
		if f != nil && f.digest != "" && rel == keptName(r, f) {
			return f, nil
		}
	}
	closed, err := r.closedRecs()
	if err != nil {
		return nil, err
	}
	for _, c := range closed {
		if c.rel == rel {
			return a.reviveFile(p, c)
		}
	}
	return nil, nil
}

// keptName is the name in r's directory of f, one of the records compact
// keeps.
func keptName(r *runAudit, f *fileRec) string {
	switch f {
	case r.rcFile:
		return evidence.ReceiptFile
	case r.admFile:
		return evidence.AdmissionFile
	}
	return evidence.FiringFile
}

// reviveFile is a record of the file at p from its compact record c.
// Checkpoints keep only receipts' digests (closedPacker): the digest of
// any other file restored from one is computed again from its blob.
func (a *auditor) reviveFile(p string, c closedFile) (*fileRec, error) {
	f := &fileRec{path: p, blob: c.blob, commit: a.commitAt(c.commit), landed: a.commitAt(c.landed), digest: c.digestString()}
	if f.digest == "" {
		data, err := readRaw(a.rd, plumbing.BlobObject, c.blob)
		if err != nil {
			return nil, fmt.Errorf("evidence: %s: %w", p, err)
		}
		f.digest = specs.DigestOf(data)
	}
	return f, nil
}

// fileOrNil is fileAt for checks that cannot return an error: the first
// one is kept in a.ioErr, which fails the audit.
func (a *auditor) fileOrNil(p string) *fileRec {
	f, err := a.fileAt(p)
	if err != nil && a.ioErr == nil {
		a.ioErr = err
	}
	return f
}

// scanClosed calls fn with the compact record of every file of every
// compacted run, for checks that cannot return an error: the first one
// is kept in a.ioErr, as fileOrNil.
func (a *auditor) scanClosed(fn func(r *runAudit, c *closedFile)) {
	if err := a.spill.scan(fn); err != nil && a.ioErr == nil {
		a.ioErr = err
	}
}

// spill is a temporary file of closedFile records, unlinked once created
// (it goes with the process), written through a buffer and read back by
// place.
type spill struct {
	f    *os.File
	w    *bufio.Writer
	size int64
	// names interns the relative paths the records name by index.
	names []string
	index map[string]uint16
	// segs are the runs whose records each put wrote, by the segment
	// number the records carry; nil once a reopened run took them back.
	segs []*runAudit
	mu   sync.Mutex
}

// spillRef is where a run's records are in the spill file.
type spillRef struct {
	off int64
	n   int32
	seg uint32
}

// spillRecord is the size of one closedFile in the spill file: blob,
// digest, commit, landed, kind, the index of its relative path and the
// segment (spill.segs) it belongs to.
const spillRecord = 20 + 32 + 4 + 4 + 1 + 2 + 4

func newSpill() (*spill, error) {
	f, err := os.CreateTemp("", "signet-audit-spill-")
	if err != nil {
		return nil, fmt.Errorf("evidence: audit spill file: %w", err)
	}
	_ = os.Remove(f.Name())
	return &spill{f: f, w: bufio.NewWriterSize(f, 64<<10), index: map[string]uint16{}}, nil
}

func (s *spill) close() {
	if s != nil {
		_ = s.f.Close()
	}
}

func (s *spill) put(recs []closedFile, r *runAudit) (spillRef, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ref := spillRef{off: s.size, n: int32(len(recs)), seg: uint32(len(s.segs))}
	if len(recs) == 0 {
		return spillRef{}, nil
	}
	s.segs = append(s.segs, r)
	var b [spillRecord]byte
	for _, c := range recs {
		i, ok := s.index[c.rel]
		if !ok {
			if len(s.names) == 1<<16-1 {
				return spillRef{}, fmt.Errorf("evidence: audit spill file: more than %d file names in run directories", 1<<16-1)
			}
			i = uint16(len(s.names))
			s.names = append(s.names, c.rel)
			s.index[c.rel] = i
		}
		copy(b[0:20], c.blob[:])
		copy(b[20:52], c.digest[:])
		binary.LittleEndian.PutUint32(b[52:], uint32(c.commit))
		binary.LittleEndian.PutUint32(b[56:], uint32(c.landed))
		b[60] = byte(c.kind)
		binary.LittleEndian.PutUint16(b[61:], i)
		binary.LittleEndian.PutUint32(b[63:], ref.seg)
		if _, err := s.w.Write(b[:]); err != nil {
			return spillRef{}, fmt.Errorf("evidence: audit spill file: %w", err)
		}
		s.size += spillRecord
	}
	return ref, nil
}

func (s *spill) get(ref spillRef) ([]closedFile, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.w.Flush(); err != nil {
		return nil, fmt.Errorf("evidence: audit spill file: %w", err)
	}
	buf := make([]byte, int(ref.n)*spillRecord)
	if _, err := s.f.ReadAt(buf, ref.off); err != nil {
		return nil, fmt.Errorf("evidence: audit spill file: %w", err)
	}
	out := make([]closedFile, ref.n)
	for i := range out {
		if _, err := s.decode(buf[i*spillRecord:], &out[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// decode reads the record at the start of b into c and returns its
// segment.
func (s *spill) decode(b []byte, c *closedFile) (uint32, error) {
	copy(c.blob[:], b[0:20])
	copy(c.digest[:], b[20:52])
	c.commit = int32(binary.LittleEndian.Uint32(b[52:]))
	c.landed = int32(binary.LittleEndian.Uint32(b[56:]))
	c.kind = int8(b[60])
	n := binary.LittleEndian.Uint16(b[61:])
	seg := binary.LittleEndian.Uint32(b[63:])
	if int(n) >= len(s.names) || int(seg) >= len(s.segs) {
		return 0, fmt.Errorf("evidence: audit spill file: a record names path %d of %d, segment %d of %d", n, len(s.names), seg, len(s.segs))
	}
	c.rel = s.names[n]
	return seg, nil
}

// scan calls fn with every record of the runs still compacted, reading
// the file once, in order.
func (s *spill) scan(fn func(r *runAudit, c *closedFile)) error {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.w.Flush(); err != nil {
		return fmt.Errorf("evidence: audit spill file: %w", err)
	}
	buf := make([]byte, 4096*spillRecord)
	var c closedFile
	for off := int64(0); off < s.size; {
		n := min(int64(len(buf)), s.size-off)
		if _, err := s.f.ReadAt(buf[:n], off); err != nil {
			return fmt.Errorf("evidence: audit spill file: %w", err)
		}
		for b := buf[:n]; len(b) > 0; b = b[spillRecord:] {
			seg, err := s.decode(b, &c)
			if err != nil {
				return err
			}
			if r := s.segs[seg]; r != nil {
				fn(r, &c)
			}
		}
		off += n
	}
	return nil
}

// commitIndex finds first-parent commits by hash: by the first 8 bytes
// of the hash in a map of pointers, about half the bytes of a map keyed
// by the whole hash; the few commits whose prefix another already holds
// go to a map by the whole hash. A hit is always checked against the
// whole hash.
type commitIndex struct {
	byPrefix map[uint64]*commitInfo
	rest     map[plumbing.Hash]*commitInfo
}

func newCommitIndex() commitIndex {
	return commitIndex{byPrefix: map[uint64]*commitInfo{}, rest: map[plumbing.Hash]*commitInfo{}}
}

func hashPrefix(h plumbing.Hash) uint64 { return binary.LittleEndian.Uint64(h[:8]) }

// put adds c; a commit already there stays where it is.
func (x commitIndex) put(c *commitInfo) {
	p := hashPrefix(c.hash)
	switch o := x.byPrefix[p]; {
	case o == nil:
		x.byPrefix[p] = c
	case o.hash != c.hash:
		x.rest[c.hash] = c
	}
}

// get returns the commit with hash h, nil when none.
func (x commitIndex) get(h plumbing.Hash) *commitInfo {
	if c := x.byPrefix[hashPrefix(h)]; c != nil && c.hash == h {
		return c
	}
	return x.rest[h]
}

// receiptLink is a receipt's place in its cluster's chain.
type receiptLink struct {
	Sequence int64
	Previous *evidence.FileRef
}

// chainLink returns the run's receipt's place in the chain, nil when the
// run has no receipt that verified and decoded.
func (r *runAudit) chainLink() *receiptLink {
	switch {
	case r.receipt != nil:
		return &receiptLink{r.receipt.Sequence, r.receipt.Previous}
	case r.linked:
		return &r.link
	}
	return nil
}
