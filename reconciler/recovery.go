package reconciler

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"path"
	"slices"
	"sync/atomic"
	"time"

	"signet.dev/signet/evidence"
	"signet.dev/signet/reconciler/backend"
	"signet.dev/signet/specs"
)

// Recover reads the evidence branch and resumes every admitted run of this
// cluster that has no receipt, and re-establishes the holds of runs that
// retain nodes. It reads only the evidence branch (DESIGN §5), and the
// record of finished runs in the state directory, checked against it
// (finishedrecord.go): a run the record names is not read again.
func (r *Reconciler) Recover(ctx context.Context) error {
	if err := r.store.Refresh(ctx); err != nil {
		return fmt.Errorf("evidence branch: %w", err)
	}
	recorded, err := r.readFinishedRecord()
	if err != nil {
		r.log.Warn("not using the record of finished runs: reading every run from the evidence branch", "error", err)
		recorded = finishedRecord{}
	}
	ids, err := r.indexedRuns(ctx)
	if err != nil {
		return err
	}
	if missing := notIndexed(recorded.runs, ids); missing != "" {
		r.log.Warn("not using the record of finished runs: reading every run from the evidence branch",
			"error", fmt.Sprintf("%s names run %s, which is not in the evidence branch's index %s", r.finishedRecordPath(), missing, evidence.IndexDir(r.cfg.Cluster)))
		recorded = finishedRecord{}
	}
	r.mu.Lock()
	for _, nr := range recorded.latest {
		r.latest.Add(nr)
	}
	r.mu.Unlock()
	resumed, read := 0, 0
	toRead, logged := len(ids)-len(recorded.runs), time.Now()
	r.log.Info("recovering runs", "cluster", r.cfg.Cluster, "indexed", len(ids), "recorded", len(recorded.runs), "toRead", toRead)
	for _, id := range ids {
		if fr, ok := recorded.runs[id]; ok {
			r.mu.Lock()
			r.finished[id] = fr
			r.mu.Unlock()
			continue
		}
		if time.Since(logged) >= time.Duration(recoverProgressEvery.Load()) {
			// At 10^5 runs a new pod reads every run: minutes.
			r.log.Info("recovering runs", "read", read, "of", toRead)
			logged = time.Now()
		}
		read++
		rs, err := r.readRun(ctx, id)
		var fo *firedOnlyError
		if errors.As(err, &fo) {
			// Admitted by the first pass that reads its standing
			// certification; never decided again.
			r.claim(fo.fired)
			r.log.Info("fired run awaits admission", "run", id)
			continue
		}
		if err != nil {
			return fmt.Errorf("run %s: %w", id, err)
		}
		if rs.receipt != nil {
			r.keepFinished(rs)
			continue
		}
		if err := r.holds.reserve(rs.id, rs.nodeNames()); err != nil {
			return fmt.Errorf("run %s: %w", id, err)
		}
		r.log.Info("resuming run", "run", rs.id)
		r.startRun(rs)
		resumed++
	}
	r.mu.Lock()
	r.recovered = RecoveryCounts{Recorded: len(recorded.runs), Read: read}
	r.mu.Unlock()
	if err := r.repairReservations(ctx); err != nil {
		return err
	}
	r.store.DropResident()
	r.mu.Lock()
	kept := len(r.finished)
	r.mu.Unlock()
	// The record holds the finished runs kept compact (a superset of what
	// it was read from): written again only when it lacks some.
	if kept != len(recorded.runs) {
		if err := r.writeFinishedRecord(); err != nil {
			r.log.Warn("writing the record of finished runs", "error", err)
		}
	}
	r.recordedAt.Store(r.receipts.Load())
	r.log.Info("recovery done", "resumed", resumed, "recorded", len(recorded.runs), "read", read)
	r.setReady()
	return nil
}

// RecoveryCounts says how Recover found the runs of its cluster: from the
// record of finished runs, or read from the evidence branch.
type RecoveryCounts struct {
	Recorded, Read int
}

// indexedRuns lists the run IDs in the cluster's run-ID index, shard by
// shard; none when the cluster has no index yet.
func (r *Reconciler) indexedRuns(ctx context.Context) ([]string, error) {
	base := evidence.IndexDir(r.cfg.Cluster)
	shards, err := r.store.ReadDir(ctx, base)
	if errors.Is(err, evidence.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, shard := range shards {
		in, err := r.store.ReadDir(ctx, path.Join(base, shard))
		if err != nil {
			return nil, err
		}
		ids = append(ids, in...)
	}
	return ids, nil
}

// notIndexed returns a run of recorded that ids lacks, "" when none does.
func notIndexed(recorded map[string]*finishedRun, ids []string) string {
	if len(recorded) == 0 {
		return ""
	}
	in := make(map[string]struct{}, len(ids))
	for _, id := range ids {
		in[id] = struct{}{}
	}
	missing := ""
	for id := range recorded {
		if _, ok := in[id]; !ok && (missing == "" || id < missing) {
			missing = id
		}
	}
	return missing
}

// recoverProgressEvery is how often recovery logs how many runs it read
// (a time.Duration; tests set it).
var recoverProgressEvery atomic.Int64

func init() { recoverProgressEvery.Store(int64(10 * time.Second)) }

// repairReservations lifts the cluster reservations that no unfinished or
// retaining run accounts for (DESIGN §5: abandoned groups release or
// retain per verdict): a reservation naming a run the evidence branch does
// not know (a crash between reservation and admission), a passing node of
// a finished run, and a retained node whose release document is durable.
// It runs at start-up, after every run of the cluster has been loaded,
// once for the Fleet of each family.
func (r *Reconciler) repairReservations(ctx context.Context) error {
	for _, fam := range r.families {
		if err := r.repairFleet(ctx, fam.Fleet); err != nil {
			return err
		}
	}
	return nil
}

// repairFleet is repairReservations for one family's Fleet: it sweeps its
// stale certifications (logged, never fatal) and lifts the reservations no
// run accounts for.
func (r *Reconciler) repairFleet(ctx context.Context, fleet backend.Fleet) error {
	if err := fleet.SweepCertified(ctx, r.vouched); err != nil {
		r.log.Warn("sweeping certification labels", "error", err)
	}
	res, err := fleet.Reservations(ctx)
	if err != nil {
		return fmt.Errorf("reading node reservations: %w", err)
	}
	for _, rv := range res {
		r.mu.Lock()
		rs, fr := r.runs[rv.Run], r.finished[rv.Run]
		r.mu.Unlock()
		// Runs resumed above are already running: read their state under
		// their lock.
		known, finished, passed, dir := false, false, false, ""
		switch {
		case rs != nil:
			rs.mu.Lock()
			known, finished, passed, dir = true, rs.receipt != nil, slices.Contains(rs.released, rv.Node.Name), rs.dir
			rs.mu.Unlock()
		case fr != nil:
			known, finished, passed, dir = true, true, slices.Contains(fr.released, rv.Node.Name), fr.dir
		}
		why := ""
		switch {
		case !known:
			why = "the run was never admitted (the reconciler stopped between reservation and admission)"
		case !finished:
			continue // the run resumes and releases per verdict
		case passed:
			why = "the node passed; the run finished"
		default:
			released, err := r.store.Exists(ctx, path.Join(dir, evidence.ReleaseFile))
			if err != nil {
				return err
			}
			if !released {
				continue // retained until an approved release
			}
			why = "an approved release is recorded"
		}
		if err := fleet.Release(ctx, rv.Run, rv.Node); err != nil && !errors.Is(err, backend.ErrNotOurs) {
			return fmt.Errorf("repairing the reservation of node %s by run %s: %w", rv.Node.Name, rv.Run, err)
		}
		if rs != nil {
			r.holds.release(rs.id, []string{rv.Node.Name})
		}
		r.log.Warn("stale reservation repaired", "node", rv.Node.Name, "run", rv.Run, "reason", why)
	}
	return nil
}

// loadRun rebuilds a run's state from the evidence branch (readRun). A
// finished run is kept in r.runs.
func (r *Reconciler) loadRun(ctx context.Context, id string) (*runState, error) {
	rs, err := r.readRun(ctx, id)
	if err != nil || rs.receipt == nil {
		return rs, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if cur, ok := r.runs[id]; ok {
		return cur, nil
	}
	r.runs[id] = rs
	return rs, nil
}

// readFinished reads a finished run kept compact again in full, with its
// run evidence's check summaries, node summaries and end (what Wait and
// /status show), for one caller: it is not kept.
func (r *Reconciler) readFinished(ctx context.Context, id string) (*runState, error) {
	rs, err := r.readRun(ctx, id)
	if err != nil {
		return nil, err
	}
	rs.mu.Lock()
	ref := rs.evidence
	rs.mu.Unlock()
	if ref == nil {
		return nil, errors.New("finished without a receipt")
	}
	var ev evidence.RunEvidence
	if err := r.readRef(ctx, *ref, evidence.PredicateEvidence, &ev); err != nil {
		return nil, err
	}
	rs.mu.Lock()
	rs.summaries, rs.nodes, rs.endedAt = ev.Checks, ev.Nodes, ev.EndedAt
	rs.mu.Unlock()
	return rs, nil
}

// finishedRun is what the reconciler keeps of a finished run of its
// cluster that retains no node without a durable release: its directory,
// profile and released nodes (receipt order, with those an approved
// release freed last), for vouched, repairFleet and the standing pool's
// history (foldFinished); the admitted request's digest and the run's
// verdict, for its request's condition (pass.request).
type finishedRun struct {
	dir, profile string
	released     []string
	request      specs.Digest
	verdict      specs.Verdict
	// folded: its node runs are in Reconciler.latest.
	folded bool
}

// keepFinished keeps rs, a finished run read at start-up, in full when it
// retains nodes that no durable release freed (its holds were taken by
// applyReceipt, and a standing release may act on it), else as a
// finishedRun.
func (r *Reconciler) keepFinished(rs *runState) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.runs[rs.id]; ok {
		return
	}
	if len(rs.retained) > 0 {
		r.runs[rs.id] = rs
		return
	}
	r.finished[rs.id] = r.compact(rs.dir, rs.adm.Profile.Name, rs.adm.Request.Digest, rs.verdict, rs.released)
}

// compact returns the finishedRun of a run, its names interned; r.mu is
// held.
func (r *Reconciler) compact(dir, profile string, request specs.Digest, verdict specs.Verdict, released []string) *finishedRun {
	fr := &finishedRun{
		dir: dir, profile: r.intern(profile), request: request,
		verdict: specs.Verdict(r.intern(string(verdict))), released: make([]string, len(released)),
	}
	for i, n := range released {
		fr.released[i] = r.intern(n)
	}
	return fr
}

// retire keeps rs, a run of this cluster this reconciler took to its
// receipt (or whose retained nodes an approved release freed), as a
// finishedRun once it retains no node, its status among the recent ones
// /status lists, instead of in full: a daemon's memory is bounded by the
// work in flight, not by how many runs it finished since it started
// (issue 19). Whatever needs such a run in full reads it again from the
// evidence branch (readRun).
func (r *Reconciler) retire(rs *runState) {
	st := runStatus(rs)
	rs.mu.Lock()
	done := rs.receipt != nil && rs.phase == evidence.PhaseDone && len(rs.retained) == 0 && rs.adm.Cluster == r.cfg.Cluster
	dir, verdict, released, nrs := rs.dir, rs.verdict, slices.Clone(rs.released), rs.nodeRunsCache
	rs.mu.Unlock()
	if !done {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.runs[rs.id] != rs {
		return
	}
	fr := r.compact(dir, rs.adm.Profile.Name, rs.adm.Request.Digest, verdict, released)
	if nrs != nil {
		for _, nr := range nrs {
			r.latest.Add(nr)
		}
		fr.folded = true
		r.foldedSince.Store(true)
	}
	r.finished[rs.id] = fr
	delete(r.runs, rs.id)
	r.recent = append(r.recent, st)
	if over := len(r.recent) - recentRuns; over > 0 {
		r.recent = slices.Delete(r.recent, 0, over)
	}
}

// intern returns the one copy of s the reconciler keeps; r.mu is held.
func (r *Reconciler) intern(s string) string {
	if c, ok := r.names[s]; ok {
		return c
	}
	r.names[s] = s
	return s
}

// readRun rebuilds a run's state from the evidence branch, verifying its
// admission and receipt. A finished run (receipt present) is returned
// closed, with the nodes it still retains held.
func (r *Reconciler) readRun(ctx context.Context, id string) (*runState, error) {
	r.runReads.Add(1)
	idx, err := r.store.Read(ctx, evidence.IndexPath(r.cfg.Cluster, id))
	if err != nil {
		return nil, err
	}
	dir, ok := evidence.IndexTarget(r.cfg.Cluster, id, idx)
	if !ok {
		return nil, fmt.Errorf("%s: index points at %q, not a run directory of this cluster", evidence.IndexPath(r.cfg.Cluster, id), dir)
	}
	ap := path.Join(dir, evidence.AdmissionFile)
	b, err := r.store.Read(ctx, ap)
	if errors.Is(err, evidence.ErrNotFound) {
		if err := r.loadFired(ctx, id, dir); err != nil {
			return nil, err
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ap, err)
	}
	var adm evidence.Admission
	if err := r.readOwn(b, evidence.PredicateAdmission, &adm); err != nil {
		return nil, fmt.Errorf("%s: %w", ap, err)
	}
	if adm.Run != id || adm.Cluster != r.cfg.Cluster {
		return nil, fmt.Errorf("%s: admission names run %q of cluster %q", ap, adm.Run, adm.Cluster)
	}
	rs := newRunState(dir, adm, evidence.FileRef{Path: ap, Digest: specs.DigestOf(b)})
	if ok, err := r.store.Exists(ctx, path.Join(dir, evidence.CancelFile)); err != nil {
		return nil, err
	} else if ok {
		rs.canceled = true
	}
	if _, err := r.applyReceipt(ctx, rs); err != nil {
		return nil, err
	}
	return rs, nil
}

// applyReceipt reads the receipt of rs from the evidence branch, when there
// is one, into rs: verdict, released and retained nodes (the retained ones
// held here until a durable release), evidence; rs is then done. It
// reports whether there was one.
func (r *Reconciler) applyReceipt(ctx context.Context, rs *runState) (bool, error) {
	rp := path.Join(rs.dir, evidence.ReceiptFile)
	rb, err := r.store.Read(ctx, rp)
	if errors.Is(err, evidence.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var rc evidence.Receipt
	if err := r.readOwn(rb, evidence.PredicateReceipt, &rc); err != nil {
		return false, fmt.Errorf("%s: %w", rp, err)
	}
	ev := rc.Evidence
	rs.mu.Lock()
	rs.receipt = &evidence.FileRef{Path: rp, Digest: specs.DigestOf(rb)}
	rs.verdict, rs.released, rs.retained, rs.phase, rs.evidence = rc.Verdict, rc.Released, rc.Retained, evidence.PhaseDone, &ev
	rs.mu.Unlock()
	close(rs.done)
	if len(rc.Retained) > 0 {
		released, err := r.store.Exists(ctx, path.Join(rs.dir, evidence.ReleaseFile))
		if err != nil {
			return true, err
		}
		if released {
			rs.markReleased(rc.Retained)
		} else {
			r.holds.retain(rs.id, rc.Retained, rs.releasedBy())
		}
	}
	return true, nil
}

// checkRun builds a backend's input from the admission record, reading the
// script from the admitted spec commit and verifying it against the
// admitted per-file digest: a script that changed is never run.
func (r *Reconciler) checkRun(ctx context.Context, rs *runState, i int, ck specs.Check) (*CheckRun, error) {
	fsys, err := r.source.Checkout(ctx, rs.adm.SpecCommit)
	if err != nil {
		return nil, fmt.Errorf("spec commit %s: %w", short(rs.adm.SpecCommit), err)
	}
	want, ok := rs.adm.ScriptDigest(ck.Script)
	if !ok {
		return nil, fmt.Errorf("script %q is not in the admitted bundle", ck.Script)
	}
	// Bundle paths are relative to the repository root.
	p := path.Join(rs.adm.Bundle.Path, ck.Script)
	script, err := fs.ReadFile(fsys, p)
	if err != nil {
		return nil, fmt.Errorf("script %s: %w", p, err)
	}
	if got := specs.DigestOf(script); got != want {
		return nil, fmt.Errorf("script %s: digest %s does not match the admitted %s", p, got, want)
	}
	return &CheckRun{
		Cluster: r.cfg.Cluster, Run: rs.id, Index: i, Check: ck, Script: script, ScriptDigest: want,
		Participants: rs.adm.Participants,
	}, nil
}

// redactURL drops userinfo from a URL so no credential reaches evidence.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	u.User = nil
	return u.String()
}

// vouched is the evidence branch's word on a certification label: run is
// a run of this reconciler that passed on node under profile (its receipt
// lists node as released), or one still unfinished, which certifies or
// uncertifies its nodes itself.
func (r *Reconciler) vouched(run, node, profile string) bool {
	r.mu.Lock()
	rs, fr := r.runs[run], r.finished[run]
	r.mu.Unlock()
	if rs == nil {
		return fr != nil && fr.profile == profile && slices.Contains(fr.released, node)
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.receipt == nil {
		return true
	}
	return rs.adm.Profile.Name == profile && slices.Contains(rs.released, node)
}
