package audit

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"signet.dev/signet/evidence"
	"signet.dev/signet/internal/pagetable"
	"signet.dev/signet/specs"
)

// The state tables of a checkpoint: one sorted table (a pagetable.Tree:
// data pages found through an index whose few pages the checkpoint names)
// of records whose key starts with the question it answers about the
// history up to the checkpoint's tip. Every whole-branch rule asks the
// past by key, so an audit from a checkpoint reads the pages of the keys
// its new commits touch, not the history:
//
//	b/<blob>                  <landed> <commit> <path>…   signed documents of finished runs with these bytes (checkCopies)
//	c/<index, 10 digits>      <hash> <Unix seconds>        first-parent commit by index
//	h/<hash>                  <index>                      … and by hash
//	i/<cluster>/<run>         <landed> <blob> <path> <dir>  the run-ID index entry of a run (checkIndex)
//	l/<cluster>/<seq, 12 d.>  <landed> <blob> <path> <run> <receipt path> <receipt digest>  a chain link (checkChains)
//	p/<cluster>/<digest>      <dir>                        the run whose receipt names that previous receipt (forks)
//	r/<dir>                   <admitted> <fired> <sequence> <previous digest|-> <previous path|-> <files>  a finished run
//
// Indexes are first-parent indexes (c/). A finished run's files are
// base64 of a record each: its name in the run directory (uvarint length,
// bytes), blob (20 bytes), kind (0 other, 1 signed document, 2 approval
// copy), the commits that added this version and where the path first
// appeared (uvarints), and 1 and the sha256 digest for a receipt, 0 for
// any other file.
//
// A clean past is immutable to the audits that read it: a commit after
// the tip that changes or deletes a file is an append-only finding, and
// the audit then reads the whole branch (errPastChanged), so that every
// consequence of the change is what a full audit reports. What the past
// can still meet is new: a run ID, a chain sequence, a previous receipt,
// a document's bytes, a file in a finished run. Those are looked up
// (restoreReferences) and join the whole-branch rules as references:
// records the rules compare new ones with, not checked again themselves
// (they were, and nothing they depend on changed).
const (
	tabDoc    = "b/"
	tabCommit = "c/"
	tabHash   = "h/"
	tabIndex  = "i/"
	tabLink   = "l/"
	tabPrev   = "p/"
	tabRun    = "r/"
)

// errPastChanged: a commit after the checkpoint's tip changed or deleted
// a file (Branch then audits the whole branch).
var errPastChanged = errors.New("evidence: a file was changed or deleted after the checkpoint")

func commitKey(i int) string { return fmt.Sprintf("%s%010d", tabCommit, i) }

func linkKey(cluster string, seq int64) string {
	return fmt.Sprintf("%s%s/%012d", tabLink, cluster, seq)
}

// tabErr is a state table that does not hold together: the checkpoint is
// refused.
func (a *auditor) tabErr(key, format string, args ...any) error {
	return checkpointErr(a.tabName, "state.pages", "record %s: %s", key, fmt.Sprintf(format, args...))
}

// lookup returns the value of key in the checkpoint's tables.
func (a *auditor) lookup(key string) (string, bool, error) {
	v, ok, err := a.tab.Get(key)
	if err != nil {
		return "", false, checkpointErr(a.tabName, "state.pages", "%v", err)
	}
	return v, ok, nil
}

// pastCommitErr returns the first-parent commit of index i up to the
// checkpoint's tip.
func (a *auditor) pastCommitErr(i int) (*commitInfo, error) {
	a.pastMu.Lock()
	defer a.pastMu.Unlock()
	if c := a.pastCommits[i]; c != nil {
		return c, nil
	}
	key := commitKey(i)
	v, ok, err := a.lookup(key)
	if err != nil {
		return nil, err
	}
	h, unix, _ := strings.Cut(v, " ")
	secs, perr := strconv.ParseInt(unix, 10, 64)
	if !ok || !evidence.IsCommitHash(h) || perr != nil {
		return nil, a.tabErr(key, "%q is not a commit hash and its time", v)
	}
	c := &commitInfo{hash: plumbing.NewHash(h), when: time.Unix(secs, 0), index: i, sigErr: &sigResult{}}
	a.pastCommits[i] = c
	return c, nil
}

// pastCommit is pastCommitErr for callers that cannot return an error:
// the first is kept in a.ioErr, which fails the audit.
func (a *auditor) pastCommit(i int) *commitInfo {
	c, err := a.pastCommitErr(i)
	if err != nil {
		a.failIO(err)
		return &commitInfo{index: i, sigErr: &sigResult{}}
	}
	return c
}

// failIO keeps the first error of a check that cannot return one in
// a.ioErr, which fails the audit.
func (a *auditor) failIO(err error) {
	a.pastMu.Lock()
	defer a.pastMu.Unlock()
	if a.ioErr == nil {
		a.ioErr = err
	}
}

// commitByHash returns the first-parent commit h, read or up to the
// checkpoint's tip; nil when the history has none.
func (a *auditor) commitByHash(h plumbing.Hash) *commitInfo {
	if c := a.byHash.get(h); c != nil || a.tab == nil {
		return c
	}
	key := tabHash + h.String()
	v, ok, err := a.lookup(key)
	if err == nil && ok {
		i, perr := strconv.Atoi(v)
		if perr != nil || i < 0 || i >= a.baseLen {
			err = a.tabErr(key, "%q is not a commit index", v)
		} else if c := a.pastCommit(i); c.hash == h {
			return c
		} else {
			err = a.tabErr(key, "index %d is commit %s", i, c.hash)
		}
	}
	if err != nil {
		a.failIO(err)
	}
	return nil
}

// pastRun returns the run at dir: one the audit holds, or a finished run
// of the checkpoint's tables, which it then holds as a reference
// (compacted, checked); nil when there is none.
func (a *auditor) pastRun(dir string) (*runAudit, error) {
	if r := a.runsByDir[dir]; r != nil || a.tab == nil || a.noRun[dir] {
		return r, nil
	}
	key := tabRun + dir
	v, ok, err := a.lookup(key)
	if err != nil {
		return nil, err
	}
	if !ok {
		a.noRun[dir] = true
		return nil, nil
	}
	rp, okp := evidence.ParsePath(dir + "/" + evidence.AdmissionFile)
	f := strings.Split(v, " ")
	if !okp || !rp.InRun() || rp.Dir() != dir || len(f) != 6 {
		return nil, a.tabErr(key, "not a run directory's record")
	}
	seq, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil || seq < 1 || (f[0] != "0" && f[0] != "1") || (f[1] != "0" && f[1] != "1") || (f[3] == "-") != (f[4] == "-") {
		return nil, a.tabErr(key, "%q is not admitted, fired, a receipt sequence and its previous receipt", strings.Join(f[:5], " "))
	}
	r := &runAudit{a: a, cluster: rp.Cluster, id: rp.Run, dir: dir, ref: true,
		admitted: f[0] == "1", fired: f[1] == "1", checked: true, queued: true, restored: true, compacted: true, linked: true}
	r.link.Sequence = seq
	if f[3] != "-" {
		r.link.Previous = &evidence.FileRef{Digest: specs.Digest(f[3]), Path: f[4]}
	}
	if r.closed, err = decodeRunFiles(f[5]); err != nil {
		return nil, a.tabErr(key, "files: %v", err)
	}
	for _, c := range r.closed {
		if int(c.commit) >= a.baseLen || int(c.landed) >= a.baseLen {
			return nil, a.tabErr(key, "%s landed in commit %d, after the checkpoint's tip", c.rel, c.landed)
		}
		var kept **fileRec
		switch c.rel {
		case evidence.AdmissionFile:
			kept = &r.admFile
		case evidence.FiringFile:
			kept = &r.firFile
		case evidence.ReceiptFile:
			kept = &r.rcFile
		default:
			continue
		}
		fr := &fileRec{path: dir + "/" + c.rel, blob: c.blob, commit: a.pastCommit(int(c.commit)), landed: a.pastCommit(int(c.landed)), digest: c.digestString(), ref: true}
		if c.kind != kindOther {
			fr.doc = doneDocs[int(c.kind)]
		}
		*kept = fr
	}
	if r.rcFile == nil {
		return nil, a.tabErr(key, "a finished run without its receipt")
	}
	a.closedFiles += len(r.closed)
	a.runsByDir[dir] = r
	return r, nil
}

// encodeRunFiles is a finished run's files in a r/ record.
func encodeRunFiles(files []closedFile) string {
	sort.Slice(files, func(i, j int) bool { return files[i].rel < files[j].rel })
	var b []byte
	for _, c := range files {
		b = binary.AppendUvarint(b, uint64(len(c.rel)))
		b = append(b, c.rel...)
		b = append(b, c.blob[:]...)
		b = append(b, closedKinds[c.kind])
		b = binary.AppendUvarint(b, uint64(c.commit))
		b = binary.AppendUvarint(b, uint64(c.landed))
		if c.rel == evidence.ReceiptFile {
			b = append(b, 1)
			b = append(b, c.digest[:]...)
		} else {
			b = append(b, 0)
		}
	}
	return base64.StdEncoding.EncodeToString(b)
}

var closedKinds = map[int8]byte{kindOther: 0, kindDocument: 1, kindApproval: 2}

// decodeRunFiles reads what encodeRunFiles wrote, strictly: names inside
// the run directory, each once, in order.
func decodeRunFiles(s string) ([]closedFile, error) {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, err
	}
	uvarint := func() (uint64, bool) {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, false
		}
		b = b[n:]
		return v, true
	}
	var out []closedFile
	for len(b) > 0 {
		n, ok := uvarint()
		if !ok || n == 0 || uint64(len(b)) < n+22 {
			return nil, errors.New("a record is cut short")
		}
		rel := string(b[:n])
		b = b[n:]
		if path.IsAbs(rel) || path.Clean(rel) != rel || rel == ".." || strings.HasPrefix(rel, "../") || len(out) > 0 && rel <= out[len(out)-1].rel {
			return nil, fmt.Errorf("%q is not a name inside the run directory after %d names in order", rel, len(out))
		}
		var c closedFile
		c.rel = internRel(rel)
		copy(c.blob[:], b[:20])
		kind := b[20]
		b = b[21:]
		if kind > 2 {
			return nil, fmt.Errorf("%s: kind %d", rel, kind)
		}
		c.kind = [...]int8{kindOther, kindDocument, kindApproval}[kind]
		commit, ok1 := uvarint()
		landed, ok2 := uvarint()
		if !ok1 || !ok2 || len(b) < 1 || commit > 1<<31-1 || landed > commit {
			return nil, fmt.Errorf("%s: commits do not decode", rel)
		}
		c.commit, c.landed = int32(commit), int32(landed)
		switch b[0] {
		case 0:
			b = b[1:]
		case 1:
			if len(b) < 33 {
				return nil, errors.New("a record is cut short")
			}
			copy(c.digest[:], b[1:33])
			b = b[33:]
		default:
			return nil, fmt.Errorf("%s: digest flag %d", rel, b[0])
		}
		out = append(out, c)
	}
	return out, nil
}

// refIndexEntry restores, as references, the index entry of run id of
// cluster up to the checkpoint's tip and the run directory it points at.
func (a *auditor) refIndexEntry(cluster, id string) error {
	key := tabIndex + cluster + "/" + id
	v, ok, err := a.lookup(key)
	if err != nil || !ok {
		return err
	}
	f := strings.Split(v, " ")
	landed, perr := strconv.Atoi(safeAt(f, 0))
	if len(f) != 4 || perr != nil || landed < 0 || landed >= a.baseLen || !plumbing.IsHash(f[1]) {
		return a.tabErr(key, "%q is not an index entry", v)
	}
	if rp, ok := evidence.ParsePath(f[2]); !ok || rp.Kind != evidence.KindIndex || rp.Cluster != cluster || rp.Run != id {
		return a.tabErr(key, "%s is not the index entry of run %s of cluster %s", f[2], id, cluster)
	}
	if a.files[f[2]] == nil {
		c := a.pastCommit(landed)
		a.files[f[2]] = &fileRec{path: f[2], blob: plumbing.NewHash(f[1]), commit: c, landed: c, data: []byte(f[3] + "\n"), ref: true}
	}
	_, err = a.pastRun(f[3])
	return err
}

// refLink restores, as a reference, chain link seq of cluster up to the
// checkpoint's tip and the run whose receipt it links.
func (a *auditor) refLink(cluster string, seq int64) error {
	if seq < 1 || seq > a.heads[cluster] {
		return nil
	}
	key := linkKey(cluster, seq)
	v, ok, err := a.lookup(key)
	if err != nil {
		return err
	}
	f := strings.Split(v, " ")
	landed, perr := strconv.Atoi(safeAt(f, 0))
	if !ok || len(f) != 6 || perr != nil || landed < 0 || landed >= a.baseLen || !plumbing.IsHash(f[1]) {
		return a.tabErr(key, "%q is not a chain link, or there is none below the cluster's head %d", v, a.heads[cluster])
	}
	if rp, ok := evidence.ParsePath(f[2]); !ok || rp.Kind != evidence.KindChainLink || rp.Cluster != cluster || rp.Seq != seq {
		return a.tabErr(key, "%s is not link %d of cluster %s", f[2], seq, cluster)
	}
	if a.files[f[2]] == nil {
		c := a.pastCommit(landed)
		a.files[f[2]] = &fileRec{path: f[2], blob: plumbing.NewHash(f[1]), commit: c, landed: c, ref: true,
			link: &evidence.ChainLink{Run: f[3], Receipt: evidence.FileRef{Path: f[4], Digest: specs.Digest(f[5])}}}
	}
	_, err = a.closedRunOf(f[4])
	return err
}

func safeAt(f []string, i int) string {
	if i < len(f) {
		return f[i]
	}
	return ""
}

// restoreReferences restores what the whole-branch rules compare the
// runs and files of this audit with (its subjects: what came after the
// checkpoint's tip, runs reopened by it, runs open at the tip): the
// index entry and any other run of each subject's run ID, the firing
// before each subject's firing, the chain links at and before each
// subject receipt's sequence and the run forking its previous receipt,
// the runs new index entries point at and the runs whose receipts new
// links name. Subject documents' copies are checkCopies' (refDocs).
func (a *auditor) restoreReferences() error {
	var subjects []*runAudit
	for _, r := range a.runsByDir {
		if !r.ref {
			subjects = append(subjects, r)
		}
	}
	sort.Slice(subjects, func(i, j int) bool { return subjects[i].dir < subjects[j].dir })
	for _, r := range subjects {
		if r.admitted || r.fired {
			if err := a.refIndexEntry(r.cluster, r.id); err != nil {
				return err
			}
		}
		if i := strings.LastIndexByte(r.id, '-'); r.firFile != nil && i > 0 {
			if seq, ok := specs.FiringSequence(r.id[:i], r.id); ok && seq > 1 {
				if err := a.refIndexEntry(r.cluster, specs.FiringRunID(r.id[:i], seq-1)); err != nil {
					return err
				}
			}
		}
		l := r.chainLink()
		if l == nil {
			continue
		}
		for _, s := range []int64{l.Sequence, l.Sequence - 1} {
			if err := a.refLink(r.cluster, s); err != nil {
				return err
			}
		}
		if l.Previous != nil {
			key := tabPrev + r.cluster + "/" + string(l.Previous.Digest)
			dir, ok, err := a.lookup(key)
			if err != nil {
				return err
			}
			if ok {
				if _, err := a.pastRun(dir); err != nil {
					return err
				}
			}
		}
	}
	var paths []string
	for p, f := range a.files {
		if !f.ref && (strings.HasPrefix(p, "ids/") || strings.HasPrefix(p, "chain/")) {
			paths = append(paths, p)
		}
	}
	sort.Strings(paths)
	for _, p := range paths {
		f := a.files[p]
		rp, ok := evidence.ParsePath(p)
		switch {
		case ok && rp.Kind == evidence.KindIndex && f.data != nil:
			if err := a.refIndexEntry(rp.Cluster, rp.Run); err != nil {
				return err
			}
			if _, err := a.pastRun(strings.TrimSuffix(string(f.data), "\n")); err != nil {
				return err
			}
		case ok && rp.Kind == evidence.KindChainLink:
			if err := a.refLink(rp.Cluster, rp.Seq-1); err != nil {
				return err
			}
			var l evidence.ChainLink
			if f.data != nil && json.Unmarshal(f.data, &l) == nil {
				if _, err := a.closedRunOf(l.Receipt.Path); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// refDocs returns, as references, the signed documents of finished runs
// up to the checkpoint's tip with one of blobs' bytes, but those of runs
// this audit holds as subjects (their documents are its own).
func (a *auditor) refDocs(blobs map[plumbing.Hash]bool) ([]copyDoc, error) {
	keys := make([]plumbing.Hash, 0, len(blobs))
	for b := range blobs {
		keys = append(keys, b)
	}
	slices.SortFunc(keys, func(x, y plumbing.Hash) int { return bytes.Compare(x[:], y[:]) })
	var out []copyDoc
	for _, b := range keys {
		key := tabDoc + b.String()
		v, ok, err := a.lookup(key)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		docs, err := a.decodeDocs(key, v)
		if err != nil {
			return nil, err
		}
		for _, d := range docs {
			if r := a.runsByDir[runDirOf(d.dir)]; r != nil && !r.ref {
				continue
			}
			d.blob = b
			out = append(out, d)
		}
	}
	return out, nil
}

// decodeDocs reads a b/ record's documents.
func (a *auditor) decodeDocs(key, v string) ([]copyDoc, error) {
	f := strings.Split(v, " ")
	if len(f)%3 != 0 || len(f) == 0 {
		return nil, a.tabErr(key, "not documents of three fields each")
	}
	var out []copyDoc
	for i := 0; i < len(f); i += 3 {
		landed, err1 := strconv.Atoi(f[i])
		commit, err2 := strconv.Atoi(f[i+1])
		rp, ok := evidence.ParsePath(f[i+2])
		if err1 != nil || err2 != nil || landed < 0 || commit < landed || commit >= a.baseLen || !ok || !rp.InRun() {
			return nil, a.tabErr(key, "%q is not a document's landing and commit and its path in a run", strings.Join(f[i:i+3], " "))
		}
		out = append(out, copyDoc{dir: f[i+2], landed: landed, commit: a.pastCommit(commit)})
	}
	return out, nil
}

// docEntry is a signed document of a finished run, for the b/ records:
// its run by index in the runs written (36 bytes, a few million at 10^5
// runs).
type docEntry struct {
	blob           plumbing.Hash
	landed, commit int32
	run            int32
	rel            uint16
}

// writeTables writes the state tables of the audit's end to pages: a
// whole-branch audit writes them all, kind by kind in key order, without
// holding them (at 10^5 runs they are hundreds of megabytes); an audit
// from a checkpoint puts the records its subjects add or change into the
// checkpoint's tables.
func (a *auditor) writeTables(pages pagetable.Store) ([]pagetable.Page, error) {
	// Finished runs this audit holds as subjects, by directory.
	var finished []*runAudit
	for _, r := range a.runs {
		if !r.ref && r.chainLink() != nil {
			finished = append(finished, r)
		}
	}
	sort.Slice(finished, func(i, j int) bool { return finished[i].dir < finished[j].dir })
	filesOf := func(r *runAudit) ([]closedFile, error) {
		if r.compacted && r.closed == nil {
			return r.closedRecs() // read from the spill file: its own
		}
		if r.compacted {
			return slices.Clone(r.closed), nil // encodeRunFiles sorts it
		}
		var closed []closedFile
		for rel, f := range r.files {
			closed = append(closed, newClosedFile(rel, f))
		}
		return closed, nil
	}
	// Index entries and chain links this audit read, by key.
	type keyed struct {
		key string
		f   *fileRec
	}
	var entries, links []keyed
	for p, f := range a.files {
		if f.ref {
			continue
		}
		switch rp, ok := evidence.ParsePath(p); {
		case ok && rp.Kind == evidence.KindIndex:
			entries = append(entries, keyed{tabIndex + rp.Cluster + "/" + rp.Run, f})
		case ok && rp.Kind == evidence.KindChainLink:
			links = append(links, keyed{linkKey(rp.Cluster, rp.Seq), f})
		}
	}
	byKey := func(x, y keyed) int { return strings.Compare(x.key, y.key) }
	slices.SortFunc(entries, byKey)
	slices.SortFunc(links, byKey)

	var emit func(key, value string) error
	var w *pagetable.TreeWriter
	puts := map[string]string{}
	if a.tab == nil {
		w = pagetable.NewTreeWriter(pages)
		emit = w.Add
	} else {
		emit = func(key, value string) error { puts[key] = value; return nil }
	}

	// b/: documents by blob, then path.
	var docs []docEntry
	var rels []string
	relIndex := map[string]uint16{}
	for i, r := range finished {
		closed, err := filesOf(r)
		if err != nil {
			return nil, err
		}
		for _, c := range closed {
			if c.kind != kindDocument {
				continue
			}
			n, ok := relIndex[c.rel]
			if !ok {
				if len(rels) == 1<<16-1 {
					return nil, errors.New("evidence: checkpoint: more than 65535 names of documents in run directories")
				}
				n = uint16(len(rels))
				rels = append(rels, c.rel)
				relIndex[c.rel] = n
			}
			docs = append(docs, docEntry{blob: c.blob, landed: c.landed, commit: c.commit, run: int32(i), rel: n})
		}
	}
	docPath := func(d docEntry) string { return finished[d.run].dir + "/" + rels[d.rel] }
	slices.SortFunc(docs, func(x, y docEntry) int {
		if c := bytes.Compare(x.blob[:], y.blob[:]); c != 0 {
			return c
		}
		return strings.Compare(docPath(x), docPath(y))
	})
	for i := 0; i < len(docs); {
		var sb strings.Builder
		j := i
		for ; j < len(docs) && docs[j].blob == docs[i].blob; j++ {
			if j > i {
				sb.WriteByte(' ')
			}
			fmt.Fprintf(&sb, "%d %d %s", docs[j].landed, docs[j].commit, docPath(docs[j]))
		}
		key, value := tabDoc+docs[i].blob.String(), sb.String()
		if a.tab != nil {
			var err error
			if value, err = a.mergeDocs(key, value); err != nil {
				return nil, err
			}
		}
		if err := emit(key, value); err != nil {
			return nil, err
		}
		i = j
	}
	docs = nil
	// c/ and h/: the commits read.
	for _, c := range a.commits {
		if err := emit(commitKey(c.index), fmt.Sprintf("%s %d", c.hash, c.when.Unix())); err != nil {
			return nil, err
		}
	}
	byHash := slices.Clone(a.commits)
	slices.SortFunc(byHash, func(x, y *commitInfo) int { return bytes.Compare(x.hash[:], y.hash[:]) })
	for _, c := range byHash {
		if err := emit(tabHash+c.hash.String(), strconv.Itoa(c.index)); err != nil {
			return nil, err
		}
	}
	byHash = nil
	// i/ and l/.
	for _, e := range entries {
		rp, _ := evidence.ParsePath(e.f.path)
		if err := emit(e.key, fmt.Sprintf("%d %s %s %s", e.f.landed.index, e.f.blob, e.f.path, strings.TrimSuffix(string(e.f.data), "\n"))); err != nil {
			return nil, fmt.Errorf("evidence: index entry %s of run %s cannot be written in a checkpoint: %w", e.f.path, rp.Run, err)
		}
	}
	for _, e := range links {
		l, err := encodeLink(e.f.path, e.f)
		if err != nil {
			return nil, err
		}
		if err := emit(e.key, fmt.Sprintf("%d %s %s %s %s %s", e.f.landed.index, e.f.blob, e.f.path, l.Run, l.Receipt.Path, l.Receipt.Digest)); err != nil {
			return nil, err
		}
	}
	// p/: receipts by cluster and the previous receipt they name.
	type prevRec struct{ key, dir string }
	var prevs []prevRec
	for _, r := range finished {
		if p := r.chainLink().Previous; p != nil {
			prevs = append(prevs, prevRec{tabPrev + r.cluster + "/" + string(p.Digest), r.dir})
		}
	}
	slices.SortFunc(prevs, func(x, y prevRec) int { return strings.Compare(x.key, y.key) })
	for i, p := range prevs {
		if i > 0 && prevs[i-1].key == p.key {
			continue // a fork: not in a clean audit's checkpoint
		}
		if err := emit(p.key, p.dir); err != nil {
			return nil, err
		}
	}
	// r/: finished runs by directory.
	for _, r := range finished {
		l := r.chainLink()
		prev := "- -"
		if p := l.Previous; p != nil {
			if strings.ContainsAny(string(p.Digest)+p.Path, " \t\n") || p.Path == "" {
				return nil, fmt.Errorf("evidence: run directory %q cannot be written in a checkpoint", r.dir)
			}
			prev = string(p.Digest) + " " + p.Path
		}
		closed, err := filesOf(r)
		if err != nil {
			return nil, err
		}
		if err := emit(tabRun+r.dir, fmt.Sprintf("%d %d %d %s %s", b2i(r.admitted), b2i(r.fired), l.Sequence, prev, encodeRunFiles(closed))); err != nil {
			return nil, err
		}
	}
	if w != nil {
		return w.Finish()
	}
	return a.tab.Update(puts, pages)
}

// mergeDocs is the b/ record of key with the documents of value added,
// replacing those at the same path (a reopened run's).
func (a *auditor) mergeDocs(key, value string) (string, error) {
	old, ok, err := a.lookup(key)
	if err != nil || !ok {
		return value, err
	}
	type doc struct{ landed, commit, path string }
	split := func(s string) []doc {
		f := strings.Split(s, " ")
		var out []doc
		for i := 0; i+2 < len(f); i += 3 {
			out = append(out, doc{f[i], f[i+1], f[i+2]})
		}
		return out
	}
	byPath := map[string]doc{}
	for _, d := range split(old) {
		byPath[d.path] = d
	}
	for _, d := range split(value) {
		byPath[d.path] = d
	}
	var parts []string
	for _, p := range sortedKeys(byPath) {
		d := byPath[p]
		parts = append(parts, d.landed, d.commit, d.path)
	}
	return strings.Join(parts, " "), nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
