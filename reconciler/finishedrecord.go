package reconciler

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/google/renameio/v2"

	"signet.dev/signet/evidence"
	"signet.dev/signet/specs"
)

// runVerdicts are the verdicts a finished run may have.
var runVerdicts = []specs.Verdict{specs.VerdictPass, specs.VerdictFail, specs.VerdictInconclusive, specs.VerdictError, specs.VerdictCanceled}

// The record of finished runs (issue 19): at 10^5 runs a restart that
// reads every finished run of its cluster from the evidence branch works
// through the whole pack (1.4 GB) and thrashes under a 256 MiB memory
// limit. A finished run that retains no node without a durable release
// never changes again (the branch is append-only), so the reconciler
// keeps what start-up keeps of it (finishedRun) in a file in its state
// directory, with the tip it was taken at. Recover uses the record only
// when every one of these holds, and otherwise reads every run as before:
//   - the file is whole (its last line holds the SHA-256 of the lines
//     before it) and strict JSON of this version;
//   - it was written for this evidence branch (Store.ID), cluster and
//     signing key (a run is read with this key: readOwn);
//   - the evidence tip descends from the record's tip (Store.Descends),
//     so every run it names is on the branch as it was read;
//   - every run it names is in the branch's run-ID index of the cluster.
// The record is as trusted as the rest of the state directory (the
// remembered tip, the mirror): the reconciler's own, mode 0700.
//
// It also keeps the standing pool's history of those runs: which runs'
// node runs were folded into Reconciler.latest (foldFinished), and the
// latest node runs themselves, so that the first standing pass after a
// restart does not read every run of its profile again either.
//
// Format, one JSON object a line: a header (finishedRecordHeader), one
// line a run (finishedRecordEntry) sorted by run ID, one line a latest
// node run (evidence.NodeRun, by profile and node), and a trailer
// (finishedRecordTrailer).

// finishedRecordFile is the record's file name in Config.StateDir.
const finishedRecordFile = "finished-runs.jsonl"

// finishedRecordVersion is the record format's version. Version 2 added
// each run's request digest and verdict (a request's condition is read
// from them, not from the run read again); a record of version 1 is
// refused, so the first start of a newer signet reads every run once.
const finishedRecordVersion = 2

// finishedRecordEvery is how many receipts the reconciler writes between
// two records while it runs (besides one after recovery, one after a pass
// that folded runs into the standing pool's history, and one at Close): a
// restart after a crash reads at most about that many finished runs from
// the branch again.
const finishedRecordEvery = 1024

type finishedRecordHeader struct {
	Version int    `json:"signetFinishedRuns"`
	Store   string `json:"store"`
	Cluster string `json:"cluster"`
	Key     string `json:"key"`
	Tip     string `json:"tip"`
	Runs    int    `json:"runs"`
	// NodeRuns: how many latest node runs follow the runs.
	NodeRuns int `json:"nodeRuns"`
}

type finishedRecordEntry struct {
	Run      string   `json:"run"`
	Dir      string   `json:"dir"`
	Profile  string   `json:"profile"`
	Released []string `json:"released"`
	// Request is the admitted request's digest; Verdict the run's.
	Request specs.Digest  `json:"request"`
	Verdict specs.Verdict `json:"verdict"`
	// Folded: its node runs are in the record's latest node runs.
	Folded bool `json:"folded,omitempty"`
}

type finishedRecordTrailer struct {
	SHA256 string `json:"sha256"`
}

// finishedRecordPath is where the record lives, "" without a state
// directory.
func (r *Reconciler) finishedRecordPath() string {
	if r.cfg.StateDir == "" {
		return ""
	}
	return filepath.Join(r.cfg.StateDir, finishedRecordFile)
}

// finishedRecord is a record of finished runs as read.
type finishedRecord struct {
	runs   map[string]*finishedRun
	latest []evidence.NodeRun
}

// readFinishedRecord reads the record for this reconciler. It returns an
// empty record and no error when there is none, and an error saying why
// when the record cannot be used (Recover then reads every run).
func (r *Reconciler) readFinishedRecord() (finishedRecord, error) {
	p := r.finishedRecordPath()
	if p == "" {
		return finishedRecord{}, nil
	}
	f, err := os.Open(p)
	if errors.Is(err, os.ErrNotExist) {
		return finishedRecord{}, nil
	}
	if err != nil {
		return finishedRecord{}, err
	}
	defer f.Close()
	return r.parseFinishedRecord(p, f)
}

// parseFinishedRecord reads the record at p from f and checks it against
// this reconciler and its evidence branch.
func (r *Reconciler) parseFinishedRecord(p string, f io.Reader) (finishedRecord, error) {
	sum := sha256.New()
	br := bufio.NewReaderSize(f, 64<<10)
	var hdr finishedRecordHeader
	if err := readRecordLine(br, sum, &hdr); err != nil {
		return finishedRecord{}, fmt.Errorf("%s: header: %w", p, err)
	}
	want := finishedRecordHeader{
		Version: finishedRecordVersion, Store: r.store.ID(), Cluster: r.cfg.Cluster, Key: r.key.KeyID(),
		Tip: hdr.Tip, Runs: hdr.Runs, NodeRuns: hdr.NodeRuns,
	}
	if hdr != want {
		return finishedRecord{}, fmt.Errorf("%s: written for version %d, evidence branch %s, cluster %q, key %s; this reconciler is version %d, %s, %q, %s",
			p, hdr.Version, hdr.Store, hdr.Cluster, hdr.Key, want.Version, want.Store, want.Cluster, want.Key)
	}
	if !evidence.IsCommitHash(hdr.Tip) || hdr.Runs < 0 || hdr.NodeRuns < 0 {
		return finishedRecord{}, fmt.Errorf("%s: header: tip %q, runs %d, node runs %d", p, hdr.Tip, hdr.Runs, hdr.NodeRuns)
	}
	// The counts are not trusted before the trailer's hash is: they
	// size nothing.
	runs := map[string]*finishedRun{}
	prev := ""
	for i := range hdr.Runs {
		var e finishedRecordEntry
		if err := readRecordLine(br, sum, &e); err != nil {
			return finishedRecord{}, fmt.Errorf("%s: run %d: %w", p, i+1, err)
		}
		rp, ok := evidence.ParsePath(e.Dir)
		switch {
		case e.Run <= prev:
			return finishedRecord{}, fmt.Errorf("%s: run %d: %q is not after %q (runs are sorted, each once)", p, i+1, e.Run, prev)
		case !ok || rp.Kind != evidence.KindRunDir || rp.Cluster != r.cfg.Cluster || rp.Run != e.Run:
			return finishedRecord{}, fmt.Errorf("%s: run %s: %q is not a run directory of run %s in cluster %q", p, e.Run, e.Dir, e.Run, r.cfg.Cluster)
		case e.Profile == "":
			return finishedRecord{}, fmt.Errorf("%s: run %s: no profile", p, e.Run)
		case !slices.Contains(runVerdicts, e.Verdict):
			return finishedRecord{}, fmt.Errorf("%s: run %s: verdict %q is not one of %v", p, e.Run, e.Verdict, runVerdicts)
		}
		if _, err := specs.ParseDigest(string(e.Request)); err != nil {
			return finishedRecord{}, fmt.Errorf("%s: run %s: request: %w", p, e.Run, err)
		}
		prev = e.Run
		r.mu.Lock()
		fr := r.compact(e.Dir, e.Profile, e.Request, e.Verdict, e.Released)
		r.mu.Unlock()
		fr.folded = e.Folded
		runs[e.Run] = fr
	}
	var latest []evidence.NodeRun
	for i := range hdr.NodeRuns {
		var nr evidence.NodeRun
		if err := readRecordLine(br, sum, &nr); err != nil {
			return finishedRecord{}, fmt.Errorf("%s: node run %d: %w", p, i+1, err)
		}
		if fr := runs[nr.Run]; fr == nil || !fr.folded || fr.profile != nr.Profile {
			return finishedRecord{}, fmt.Errorf("%s: node run %d: run %s of profile %q is not a folded run of the record", p, i+1, nr.Run, nr.Profile)
		}
		latest = append(latest, nr)
	}
	got := hex.EncodeToString(sum.Sum(nil))
	var tr finishedRecordTrailer
	if err := readRecordLine(br, nil, &tr); err != nil {
		return finishedRecord{}, fmt.Errorf("%s: trailer: %w", p, err)
	}
	if tr.SHA256 != got {
		return finishedRecord{}, fmt.Errorf("%s: its lines hash to sha256 %s, its trailer says %s", p, got, tr.SHA256)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		return finishedRecord{}, fmt.Errorf("%s: data after the trailer", p)
	}
	ok, err := r.store.Descends(hdr.Tip)
	if err != nil {
		return finishedRecord{}, fmt.Errorf("%s: tip %s: %w", p, hdr.Tip, err)
	}
	if !ok {
		return finishedRecord{}, fmt.Errorf("%s: taken at %s, which the evidence branch at %s does not descend from", p, hdr.Tip, r.store.Tip())
	}
	return finishedRecord{runs: runs, latest: latest}, nil
}

// readRecordLine reads one line of the record into v, strictly, adding
// its bytes to sum when sum is not nil.
func readRecordLine(br *bufio.Reader, sum hash.Hash, v any) error {
	line, err := br.ReadBytes('\n')
	if err == io.EOF {
		return errors.New("the file ends early")
	}
	if err != nil {
		return err
	}
	if sum != nil {
		sum.Write(line)
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("more than one JSON value on a line")
	}
	return nil
}

// writeFinishedRecord writes the record of the finished runs this
// reconciler knows of that retain no node without a durable release: those
// kept compact (finished) and those of this cluster held in full. It
// replaces the file atomically.
func (r *Reconciler) writeFinishedRecord() error {
	p := r.finishedRecordPath()
	if p == "" {
		return nil
	}
	var entries []finishedRecordEntry
	r.mu.Lock()
	for id, fr := range r.finished {
		entries = append(entries, finishedRecordEntry{
			Run: id, Dir: fr.dir, Profile: fr.profile, Released: fr.released,
			Request: fr.request, Verdict: fr.verdict, Folded: fr.folded,
		})
	}
	latest := r.latest.All()
	held := make([]*runState, 0, len(r.runs))
	for id, rs := range r.runs {
		if _, ok := r.finished[id]; !ok { // read in full again (loadRun)
			held = append(held, rs)
		}
	}
	r.mu.Unlock()
	for _, rs := range held {
		rs.mu.Lock()
		if rs.receipt != nil && len(rs.retained) == 0 && rs.adm.Cluster == r.cfg.Cluster {
			entries = append(entries, finishedRecordEntry{
				Run: rs.id, Dir: rs.dir, Profile: rs.adm.Profile.Name, Released: slices.Clone(rs.released),
				Request: rs.adm.Request.Digest, Verdict: rs.verdict,
			})
		}
		rs.mu.Unlock()
	}
	// Taken after the runs: each receipt read above is durable, so on
	// the branch at this tip.
	tip := r.store.Tip()
	if tip == "" {
		return nil
	}
	slices.SortFunc(entries, func(a, b finishedRecordEntry) int { return strings.Compare(a.Run, b.Run) })
	pf, err := renameio.NewPendingFile(p, renameio.WithTempDir(filepath.Dir(p)), renameio.WithStaticPermissions(0o600))
	if err != nil {
		return err
	}
	defer pf.Cleanup()
	sum := sha256.New()
	bw := bufio.NewWriterSize(io.MultiWriter(pf, sum), 64<<10)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(finishedRecordHeader{
		Version: finishedRecordVersion, Store: r.store.ID(), Cluster: r.cfg.Cluster, Key: r.key.KeyID(),
		Tip: tip, Runs: len(entries), NodeRuns: len(latest),
	}); err != nil {
		return err
	}
	for _, e := range entries {
		if e.Released == nil {
			e.Released = []string{}
		}
		if err := enc.Encode(e); err != nil {
			return err
		}
	}
	for _, nr := range latest {
		if err := enc.Encode(nr); err != nil {
			return err
		}
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if err := json.NewEncoder(pf).Encode(finishedRecordTrailer{SHA256: hex.EncodeToString(sum.Sum(nil))}); err != nil {
		return err
	}
	return pf.CloseAtomicallyReplace()
}
