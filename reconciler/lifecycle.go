package reconciler

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"slices"
	"sort"
	"time"

	"signet.dev/signet/evidence"
	"signet.dev/signet/internal/crash"
	"signet.dev/signet/reconciler/backend"
	"signet.dev/signet/signing"
	"signet.dev/signet/specs"
)

// step is one stage of a run's lifecycle after admission. Its precondition
// is the durable record of the step before it; it reads the evidence branch
// first and does nothing when its own record is already there, so that the
// list can be re-run from the start after any failure or restart.
type step struct {
	name string
	fn   func(ctx context.Context, rs *runState) error
}

func (r *Reconciler) steps() []step {
	return []step{
		{"checks", r.runChecks},       // reads: admission, intents, check evidence; writes: intents, check evidence, logs
		{"evidence", r.writeEvidence}, // reads: check evidence; writes: evidence.json
		{"release", r.releasePassing}, // reads: evidence.json; writes: in-memory holds
		{"receipt", r.writeReceipt},   // reads: evidence.json, the chain head; writes: receipt.json + chain link
	}
}

// drive takes an admitted run to its receipt. It retries the step list with
// backoff until it succeeds or ctx ends; every step is idempotent against
// the evidence branch, so a retry never repeats an effect.
func (r *Reconciler) drive(ctx context.Context, rs *runState) {
	defer r.runFinished(rs)
	backoff := time.Second
	for {
		err := r.driveOnce(ctx, rs)
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			r.log.Info("run paused by shutdown; it resumes on restart", "run", rs.id, "phase", rs.phase)
			return
		}
		r.log.Error("run step failed; retrying", "run", rs.id, "phase", rs.phase, "error", err, "retryIn", backoff.String())
		r.metrics.errors.WithLabelValues("run").Inc()
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 30*time.Second)
	}
}

func (r *Reconciler) driveOnce(ctx context.Context, rs *runState) error {
	for _, s := range r.steps() {
		if err := s.fn(ctx, rs); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
	}
	return nil
}

// runChecks runs every check of the frozen profile in order, each as
// intent → backend → observe → check evidence → cleanup.
func (r *Reconciler) runChecks(ctx context.Context, rs *runState) error {
	rs.setPhase(evidence.PhaseChecking)
	prof := rs.adm.ProfileObject
	rs.mu.Lock()
	rs.summaries = rs.summaries[:0]
	rs.checkDocs = map[int]*evidence.CheckDoc{}
	rs.mu.Unlock()
	failed := false
	for i, ck := range prof.Spec.Checks {
		sum, err := r.runCheck(ctx, rs, i, ck, failed && prof.Spec.OnFailure == specs.OnFailureStop)
		if err != nil {
			return fmt.Errorf("check %s: %w", ck.Name, err)
		}
		if sum.Verdict == specs.VerdictFail || sum.Verdict == specs.VerdictError {
			failed = true
		}
		rs.mu.Lock()
		rs.summaries = append(rs.summaries, sum)
		rs.mu.Unlock()
		r.observe(Event{Run: rs.id, Check: ck.Name, Index: i, Total: len(prof.Spec.Checks), Verdict: sum.Verdict, Skipped: sum.Skipped, Done: true})
	}
	return nil
}

func (r *Reconciler) runCheck(ctx context.Context, rs *runState, i int, ck specs.Check, stopped bool) (evidence.CheckSummary, error) {
	log := r.log.With("run", rs.id, "check", ck.Name)
	evPath := evidence.CheckPath(rs.dir, i, ck.Name)
	intentPath := evidence.CheckIntentPath(rs.dir, i, ck.Name)

	// Already durable: take the recorded verdict.
	if b, err := r.store.Read(ctx, evPath); err == nil {
		var ce evidence.CheckEvidence
		if err := r.readOwn(b, evidence.PredicateCheck, &ce); err != nil {
			return evidence.CheckSummary{}, fmt.Errorf("%s: %w", evPath, err)
		}
		return noteCheck(rs, i, evidence.FileRef{Path: evPath, Digest: specs.DigestOf(b)}, ce), nil
	} else if !errors.Is(err, evidence.ErrNotFound) {
		return evidence.CheckSummary{}, err
	}

	intentBytes, err := r.store.Read(ctx, intentPath)
	intentExists := err == nil
	if err != nil && !errors.Is(err, evidence.ErrNotFound) {
		return evidence.CheckSummary{}, err
	}
	if !intentExists && (stopped || rs.isCanceled()) {
		return evidence.CheckSummary{Index: i, Check: ck.Name, Verdict: skippedVerdict(rs), Skipped: true}, nil
	}

	be, err := r.backendFor(ck.Backend)
	if err != nil {
		return evidence.CheckSummary{}, err
	}
	cr, err := r.checkRun(ctx, rs, i, ck)
	if err != nil {
		return evidence.CheckSummary{}, err
	}

	var report *CheckReport
	interrupted := ""
	rs.mu.Lock()
	cached := rs.reports[i]
	rs.mu.Unlock()
	var intentRef evidence.FileRef
	switch {
	case intentExists:
		var in evidence.CheckIntent
		if err := r.readOwn(intentBytes, evidence.PredicateCheckIntent, &in); err != nil {
			return evidence.CheckSummary{}, fmt.Errorf("%s: %w", intentPath, err)
		}
		cr.Nonce, cr.Deadline, cr.IntentAt = in.Nonce, in.Deadline, in.CreatedAt
		intentRef = evidence.FileRef{Path: intentPath, Digest: specs.DigestOf(intentBytes)}
		if cached != nil {
			report = cached
			break
		}
		// The intent is durable but this process holds no report: it was
		// written before a restart. Adopt what is left; never create again.
		rep, found, err := be.Adopt(ctx, cr)
		if err != nil {
			return evidence.CheckSummary{}, fmt.Errorf("adopt: %w", err)
		}
		if found {
			r.holdIdentity(ctx, rs, cr, rep)
			report = rep
		} else {
			interrupted = "interrupted: the reconciler restarted after the check's intent was recorded and no backend was found to adopt; the check is not run again"
			log.Warn("check interrupted by a restart; recorded as Error", "reason", interrupted)
		}
	default:
		nonce, err := newNonce()
		if err != nil {
			return evidence.CheckSummary{}, err
		}
		cr.Nonce = nonce
		cr.Deadline = r.now().Add(ck.Deadline.Duration())
		names, rendered, err := be.Describe(cr)
		if err != nil {
			return evidence.CheckSummary{}, err
		}
		intent := evidence.CheckIntent{
			Run: rs.id, Check: ck.Name, Index: i, Backend: string(ck.Backend), BackendNames: names,
			RenderedDigest: rendered, ScriptDigest: cr.ScriptDigest, Nonce: nonce, Deadline: cr.Deadline, CreatedAt: r.now(),
		}
		cr.IntentAt = intent.CreatedAt
		f, err := r.document(intentPath, evidence.PredicateCheckIntent, rs.snapshotSubjects(), intent)
		if err != nil {
			return evidence.CheckSummary{}, err
		}
		if _, err := r.appendEvidence(ctx, fmt.Sprintf("signet: %s/%s intent of check %s", r.cfg.Cluster, rs.id, ck.Name), []evidence.File{f}); err != nil {
			// Whether another writer won or the remote failed, the backend
			// must not be created without a durable intent of our own.
			return evidence.CheckSummary{}, fmt.Errorf("intent: %w", err)
		}
		intentRef = evidence.FileRef{Path: intentPath, Digest: specs.DigestOf(f.Data)}
		crash.Point("after-intent")
		r.observe(Event{Run: rs.id, Check: ck.Name, Index: i, Total: len(rs.adm.ProfileObject.Spec.Checks), Started: true})
		checkCtx, stop := context.WithCancel(ctx)
		rs.mu.Lock()
		rs.stopCheck = stop
		canceled := rs.canceled
		rs.mu.Unlock()
		if canceled {
			stop()
		}
		rep, err := be.Run(checkCtx, cr)
		rs.mu.Lock()
		rs.stopCheck = nil
		rs.mu.Unlock()
		stop()
		if err != nil {
			// The backend was (perhaps) created: never create it again.
			// Record the check as Error with the reason.
			interrupted = "backend failed: " + err.Error()
			log.Error("backend failed; check recorded as Error", "error", err)
		} else {
			r.holdIdentity(ctx, rs, cr, rep)
			report = rep
		}
		rs.mu.Lock()
		rs.reports[i] = report
		rs.mu.Unlock()
		if ctx.Err() != nil {
			// Shutting down: leave the intent without evidence; recovery
			// adopts or records it.
			return evidence.CheckSummary{}, ctx.Err()
		}
	}

	ce, logs := evaluateCheck(rs, cr, intentRef, report, interrupted)
	files := append(logs, evidence.File{})
	f, err := r.document(evPath, evidence.PredicateCheck, rs.snapshotSubjects(), ce)
	if err != nil {
		return evidence.CheckSummary{}, err
	}
	files[len(files)-1] = f
	if _, err := r.appendEvidence(ctx, fmt.Sprintf("signet: %s/%s check %s: %s", r.cfg.Cluster, rs.id, ck.Name, ce.Verdict), files); err != nil {
		if errors.Is(err, evidence.ErrExists) {
			log.Warn("check evidence already written by another writer; taking theirs")
			return r.runCheck(ctx, rs, i, ck, stopped)
		}
		return evidence.CheckSummary{}, fmt.Errorf("check evidence: %w", err)
	}
	crash.Point("after-check-evidence")
	r.observe(Event{Run: rs.id, Check: ck.Name, Index: i, Total: len(rs.adm.ProfileObject.Spec.Checks), Verdict: ce.Verdict, Recorded: true})
	r.metrics.checks.WithLabelValues(string(ce.Verdict)).Inc()
	if err := be.Cleanup(ctx, cr); err != nil {
		log.Warn("backend cleanup failed", "error", err)
	}
	rs.mu.Lock()
	delete(rs.reports, i)
	rs.mu.Unlock()
	log.Info("check done", "verdict", ce.Verdict, "reason", ce.Reason)
	return noteCheck(rs, i, evidence.FileRef{Path: evPath, Digest: specs.DigestOf(f.Data)}, ce), nil
}

// skippedVerdict is what a check that never ran counts as for its nodes:
// it did not cover them, so they cannot pass (fail-closed).
func skippedVerdict(rs *runState) specs.Verdict {
	if rs.isCanceled() {
		return specs.VerdictCanceled
	}
	return specs.VerdictError
}

// noteCheck keeps check i's durable evidence ce (at ref) for the run
// evidence and returns its line in the run's status.
func noteCheck(rs *runState, i int, ref evidence.FileRef, ce evidence.CheckEvidence) evidence.CheckSummary {
	rs.mu.Lock()
	rs.checkDocs[i] = &evidence.CheckDoc{File: ref, Evidence: ce}
	rs.mu.Unlock()
	return evidence.CheckSummary{Index: i, Check: rs.adm.ProfileObject.Spec.Checks[i].Name, Verdict: ce.Verdict, Evidence: &ref}
}

// evaluateCheck applies DESIGN §4 to a backend report: each expected
// participant must be identified (workload id, node name and node UID as
// snapshotted) and have a valid, fresh result matching its exit.
func evaluateCheck(rs *runState, cr *CheckRun, intent evidence.FileRef, report *CheckReport, interrupted string) (evidence.CheckEvidence, []evidence.File) {
	ce := evidence.CheckEvidence{Run: rs.id, Check: cr.Check.Name, Index: cr.Index, Intent: intent, Covered: true}
	var files []evidence.File
	exp := specs.Expect{Run: rs.id, Check: cr.Check.Name, Nonce: cr.Nonce}
	byNode := map[string]*ParticipantReport{}
	if report != nil {
		ce.StartedAt, ce.EndedAt = report.StartedAt, report.EndedAt
		for j := range report.Participants {
			p := &report.Participants[j]
			if _, dup := byNode[p.Node]; dup || !slices.ContainsFunc(cr.Participants, func(q evidence.Participant) bool { return q.Node == p.Node }) {
				ce.Covered = false
				ce.Reason = fmt.Sprintf("coverage: a workload reported for node %q, which is not an expected participant or is reported twice", p.Node)
				continue
			}
			byNode[p.Node] = p
		}
	}
	var verdicts []specs.Verdict
	for _, part := range cr.Participants {
		po := evidence.ParticipantOutcome{Node: part.Node}
		p := byNode[part.Node]
		switch {
		case interrupted != "":
			po.Verdict, po.Reason = specs.VerdictError, interrupted
			ce.Covered = false
		case p == nil:
			po.Verdict, po.Reason = specs.VerdictError, "coverage: no workload was observed for this participant"
			ce.Covered = false
		case !p.Termination.Started:
			// Nothing ran, so there is no workload to identify: say why
			// it never started rather than report a coverage mismatch.
			po.Identity = p.Identity
			po.Verdict, po.Reason = specs.VerdictError, specs.Evaluate(exp, p.Termination, nil).Reason
			ce.Covered = false
		case p.Identity.Workload == "" || p.Identity.Node != part.Node || p.Identity.NodeUID != part.UID:
			po.Identity = p.Identity
			po.Verdict = specs.VerdictError
			po.Reason = fmt.Sprintf("coverage: workload %q ran on node %q (uid %q), expected node %q (uid %q)", p.Identity.Workload, p.Identity.Node, p.Identity.NodeUID, part.Node, part.UID)
			ce.Covered = false
		default:
			po.Identity = p.Identity
			out := specs.Evaluate(exp, p.Termination, p.Result)
			po.Verdict, po.Reason, po.Result = out.Verdict, out.Reason, out.Result
			if p.Termination.Exited {
				code := p.Termination.ExitCode
				po.ExitCode = &code
			}
			po.Signal = p.Termination.Signal
			if out.Verdict == specs.VerdictError {
				ce.Covered = ce.Covered && out.Result != nil
			}
		}
		if p != nil {
			for _, s := range []struct {
				name string
				data []byte
			}{{"stdout", p.Stdout}, {"stderr", p.Stderr}} {
				if len(s.data) == 0 {
					continue
				}
				lp := evidence.LogPath(rs.dir, cr.Index, cr.Check.Name, part.Node, s.name)
				files = append(files, evidence.File{Path: lp, Data: s.data})
				po.Logs = append(po.Logs, evidence.FileRef{Path: lp, Digest: specs.DigestOf(s.data)})
			}
		}
		verdicts = append(verdicts, po.Verdict)
		ce.Participants = append(ce.Participants, po)
	}
	if !ce.Covered && ce.Reason != "" {
		verdicts = append(verdicts, specs.VerdictError)
	}
	ce.Verdict = specs.RunVerdict(false, verdicts)
	if ce.Reason == "" {
		for _, po := range ce.Participants {
			if po.Verdict == ce.Verdict && po.Reason != "" {
				ce.Reason = po.Node + ": " + po.Reason
				break
			}
		}
	}
	return ce, files
}

// writeEvidence writes the run evidence: evidence.Summarize of the
// durable check evidence and of whether a cancel is durable.
func (r *Reconciler) writeEvidence(ctx context.Context, rs *runState) error {
	rs.setPhase(evidence.PhaseEvidence)
	p := path.Join(rs.dir, evidence.EvidenceFile)
	if found, err := r.loadEvidence(ctx, rs, p); err != nil || found {
		return err
	}
	// A cancel and the run evidence are serialized: cancel.json lands
	// before evidence.json (and the evidence says canceled) or not at all.
	rs.docMu.Lock()
	defer rs.docMu.Unlock()
	canceled, err := r.store.Exists(ctx, path.Join(rs.dir, evidence.CancelFile))
	if err != nil {
		return err
	}
	docs := make([]*evidence.CheckDoc, len(rs.adm.ProfileObject.Spec.Checks))
	rs.mu.Lock()
	for i := range docs {
		docs[i] = rs.checkDocs[i]
	}
	rs.mu.Unlock()
	ev := evidence.Summarize(&rs.adm, docs, canceled)
	ev.Admission, ev.EndedAt = rs.admRef, r.now()
	f, err := r.document(p, evidence.PredicateEvidence, rs.snapshotSubjects(), ev)
	if err != nil {
		return err
	}
	commit, err := r.appendEvidence(ctx, fmt.Sprintf("signet: %s/%s evidence: %s", r.cfg.Cluster, rs.id, ev.Verdict), []evidence.File{f})
	if errors.Is(err, evidence.ErrExists) {
		// Another writer won this step: take what it wrote.
		_, err := r.loadEvidence(ctx, rs, p)
		return err
	}
	if err != nil {
		return err
	}
	crash.Point("after-run-evidence")
	rs.mu.Lock()
	rs.evidence = &evidence.FileRef{Path: p, Digest: specs.DigestOf(f.Data)}
	rs.evCommit = commit
	rs.verdict, rs.nodes, rs.endedAt = ev.Verdict, ev.Nodes, ev.EndedAt
	// The check documents (log tails and all) are summarized and durable:
	// a finished run, which the reconciler keeps until it stops, holds
	// only its summaries (issue 19: memory by the work in flight).
	rs.checkDocs = nil
	rs.mu.Unlock()
	r.metrics.runs.WithLabelValues(string(ev.Verdict)).Inc()
	r.log.Info("run evidence written", "run", rs.id, "verdict", ev.Verdict)
	return nil
}

// loadEvidence reads the run evidence at p into rs when it exists.
func (r *Reconciler) loadEvidence(ctx context.Context, rs *runState, p string) (bool, error) {
	b, err := r.store.Read(ctx, p)
	if errors.Is(err, evidence.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var ev evidence.RunEvidence
	if err := r.readOwn(b, evidence.PredicateEvidence, &ev); err != nil {
		return false, fmt.Errorf("%s: %w", p, err)
	}
	rs.mu.Lock()
	commit := rs.evCommit
	rs.mu.Unlock()
	if commit == "" {
		// Written before a restart: the receipt binds the commit where
		// evidence.json landed, not the current tip.
		if commit, err = r.store.AddedIn(ctx, p); err != nil {
			return false, fmt.Errorf("%s: %w", p, err)
		}
	}
	rs.mu.Lock()
	rs.evidence = &evidence.FileRef{Path: p, Digest: specs.DigestOf(b)}
	rs.verdict, rs.nodes, rs.endedAt = ev.Verdict, ev.Nodes, ev.EndedAt
	rs.evCommit = commit
	rs.mu.Unlock()
	return true, nil
}

// releasePassing releases every node whose verdict is Pass and retains the
// others until an approved release. The Fleet of the run's family lifts
// each passing node's reservation (a cluster's cordon and taints), only
// while the node's UID is the one admitted and its reservation still names
// the run; a node that no longer matches is left untouched and the receipt
// says why.
func (r *Reconciler) releasePassing(ctx context.Context, rs *runState) error {
	rs.setPhase(evidence.PhaseReleasing)
	rs.mu.Lock()
	var released, retained []string
	for _, n := range rs.nodes {
		if n.Verdict == specs.VerdictPass {
			released = append(released, n.Node)
		} else {
			retained = append(retained, n.Node)
		}
	}
	rs.mu.Unlock()
	var notes []evidence.NodeNote
	if fleet := r.fleetFor(&rs.adm.ProfileObject); fleet != nil {
		var err error
		if notes, err = r.releaseNodes(ctx, fleet, rs, released); err != nil {
			return err
		}
		if err := r.certify(ctx, fleet, rs, released, retained); err != nil {
			return err
		}
	}
	rs.mu.Lock()
	rs.released, rs.retained, rs.releaseNotes = released, retained, notes
	rs.mu.Unlock()
	r.holds.release(rs.id, released)
	r.holds.retain(rs.id, retained, rs.releasedBy())
	crash.Point("after-release")
	return nil
}

// releaseNodes lifts the run's reservation of nodes in the cluster. A node
// that is no longer the run's (ErrNotOurs) gets a note and is left alone;
// any other failure is returned so the step is retried.
func (r *Reconciler) releaseNodes(ctx context.Context, fleet backend.Fleet, rs *runState, nodes []string) ([]evidence.NodeNote, error) {
	var notes []evidence.NodeNote
	for _, name := range nodes {
		n := backend.Node{Name: name, UID: rs.participantUID(name)}
		err := fleet.Release(ctx, rs.id, n)
		switch {
		case errors.Is(err, backend.ErrNotOurs):
			r.log.Warn("node not released: it no longer matches the run's reservation", "run", rs.id, "node", name, "error", err)
			notes = append(notes, evidence.NodeNote{Node: name, Note: "not restored: " + err.Error()})
		case err != nil:
			return nil, fmt.Errorf("releasing node %s: %w", name, err)
		}
	}
	return notes, nil
}

// certify labels the passing nodes with their certification and removes
// the labels of the others, when labelling is on (the Fleet decides). The
// expiry is certifiedUntil, which the receipt records.
func (r *Reconciler) certify(ctx context.Context, fleet backend.Fleet, rs *runState, passed, failed []string) error {
	until := r.certifiedUntil(rs, passed)
	for _, name := range passed {
		if err := fleet.Certify(ctx, backend.Node{Name: name, UID: rs.participantUID(name)}, rs.adm.Profile.Name, rs.id, until); err != nil {
			return fmt.Errorf("labelling node %s: %w", name, err)
		}
	}
	for _, name := range failed {
		if err := fleet.Uncertify(ctx, backend.Node{Name: name, UID: rs.participantUID(name)}); err != nil {
			return fmt.Errorf("removing the certification labels of node %s: %w", name, err)
		}
	}
	return nil
}

// certifiedUntil is the expiry of the certification a run gives its
// passed nodes: the run evidence's endedAt plus the configured
// certification TTL, so that a restart computes the same expiry for the
// labels and the receipt. Zero when no node passed, labelling is off or
// the profile is local (the local backend labels nothing).
func (r *Reconciler) certifiedUntil(rs *runState, passed []string) time.Time {
	ttl := time.Duration(r.cfg.Kubernetes.CertifyTTL) * time.Second
	rs.mu.Lock()
	ended := rs.endedAt
	rs.mu.Unlock()
	if ttl <= 0 || len(passed) == 0 || ended.IsZero() || rs.adm.ProfileObject.IsLocal() {
		return time.Time{}
	}
	return ended.Add(ttl)
}

// writeReceipt writes the terminal receipt and links it into the cluster's
// receipt chain. Receipts of one cluster are written one at a time.
func (r *Reconciler) writeReceipt(ctx context.Context, rs *runState) error {
	p := path.Join(rs.dir, evidence.ReceiptFile)
	r.receiptMu.Lock()
	defer r.receiptMu.Unlock()
	for attempt := 0; ; attempt++ {
		if b, err := r.store.Read(ctx, p); err == nil {
			rs.mu.Lock()
			rs.receipt = &evidence.FileRef{Path: p, Digest: specs.DigestOf(b)}
			rs.phase = evidence.PhaseDone
			rs.mu.Unlock()
			r.receipts.Add(1)
			return nil
		} else if !errors.Is(err, evidence.ErrNotFound) {
			return err
		}
		head, err := r.chainHead(ctx)
		if err != nil {
			return err
		}
		rs.mu.Lock()
		rc := evidence.Receipt{
			Cluster: r.cfg.Cluster, Run: rs.id, Sequence: head.seq + 1, Previous: head.ref,
			Verdict: rs.verdict, Evidence: *rs.evidence, EvidenceCommit: rs.evCommit, Cleanup: "done",
			Released: nonNil(rs.released), Retained: nonNil(rs.retained), ReleaseNotes: rs.releaseNotes, At: r.now(),
		}
		released := rs.released
		rs.mu.Unlock()
		rc.CertifiedUntil = r.certifiedUntil(rs, released)
		f, err := r.document(p, evidence.PredicateReceipt, []signing.Subject{signing.SubjectFor(rc.Evidence.Path, rc.Evidence.Digest)}, rc)
		if err != nil {
			return err
		}
		link, _ := json.Marshal(evidence.ChainLink{Run: rs.id, Receipt: evidence.FileRef{Path: p, Digest: specs.DigestOf(f.Data)}})
		_, err = r.appendEvidence(ctx, fmt.Sprintf("signet: %s/%s receipt #%d", r.cfg.Cluster, rs.id, rc.Sequence),
			[]evidence.File{f, {Path: evidence.ChainPath(r.cfg.Cluster, rc.Sequence), Data: link}})
		if errors.Is(err, evidence.ErrExists) && attempt < 5 {
			r.chain.invalidate()
			continue
		}
		if err != nil {
			return err
		}
		r.chain.set(rc.Sequence, &evidence.FileRef{Path: p, Digest: specs.DigestOf(f.Data)})
		crash.Point("after-receipt")
		rs.mu.Lock()
		rs.receipt = &evidence.FileRef{Path: p, Digest: specs.DigestOf(f.Data)}
		rs.phase = evidence.PhaseDone
		rs.mu.Unlock()
		r.receipts.Add(1)
		r.log.Info("receipt written", "run", rs.id, "sequence", rc.Sequence, "verdict", rc.Verdict)
		return nil
	}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	sort.Strings(s)
	return s
}

// snapshotSubjects are the in-toto subjects of check and run evidence: the
// participants' node snapshot files (DESIGN §6).
func (rs *runState) snapshotSubjects() []signing.Subject {
	out := make([]signing.Subject, 0, len(rs.adm.Participants))
	for _, p := range rs.adm.Participants {
		out = append(out, signing.SubjectFor(p.Snapshot.Path, p.Snapshot.Digest))
	}
	return out
}

// document signs predicate as an in-toto statement and returns it as the
// evidence file at p.
func (r *Reconciler) document(p, predicateType string, subjects []signing.Subject, predicate any) (evidence.File, error) {
	st, err := signing.NewStatement(predicateType, subjects, predicate)
	if err != nil {
		return evidence.File{}, err
	}
	b, err := signing.SignStatement(st, r.key)
	if err != nil {
		return evidence.File{}, fmt.Errorf("sign %s: %w", p, err)
	}
	return evidence.File{Path: p, Data: b}, nil
}

// readOwn verifies a document this cluster's reconciler signed and decodes
// its predicate. A document that does not verify is never trusted.
func (r *Reconciler) readOwn(b []byte, predicateType string, v any) error {
	ver, err := signing.VerifyDSSE(b, signing.KeySigners("this reconciler's key", r.key.Public()), r.now())
	if err != nil {
		return err
	}
	st := ver.Statement
	if st.PredicateType != predicateType {
		return fmt.Errorf("predicate type %q, want %q", st.PredicateType, predicateType)
	}
	return signing.StrictUnmarshal(st.Predicate, v)
}

func newNonce() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}
