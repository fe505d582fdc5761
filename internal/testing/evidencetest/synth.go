package evidencetest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"signet.dev/signet/evidence"
	"signet.dev/signet/internal/gitobj"
	"signet.dev/signet/signing"
	"signet.dev/signet/specs"
)

// Run says how Build writes one run.
type Run struct {
	// Name is the request's name, which is the run ID.
	Name string
	// Canceled: an approved cancel lands after the first check's
	// evidence, so the other checks never start (skipped), and the run
	// evidence says canceled.
	Canceled bool
	// Fired: the run is a firing of the fixture's standing certification
	// Standing (Name is specs.FiringRunID(Standing, seq)): its firing
	// record lands first (evidence.Store.AppendFiring, with the index
	// entry), and its admission names it. Until the admission of firings
	// is built, that admission is a request's, of a request named Name.
	Fired bool
	// FiredOnly: the run stops after its firing record, never admitted.
	FiredOnly bool
	// Reason is the due reason the run's firing records for its node.
	// When Kind is empty it is the reason the fixture's own history shows:
	// joined when no earlier run of the fixture finished, otherwise
	// identity naming the latest finished run (every run sees the node
	// with a new UID), or schedule with SameUID. A Run or Detail left
	// empty is filled in the same way.
	Reason evidence.DueReason
	// Ago dates the run this long before it is written: its firing,
	// admission, checks, evidence and receipt state that time (commits
	// are dated when they are made), so that a history of days is built
	// at once.
	Ago time.Duration
	// TTL: the receipt's certifiedUntil is the run's end plus TTL when
	// the node passed; zero records none.
	TTL time.Duration
	// SameUID: the node keeps the UID it had in the run before.
	SameUID bool
	// Open: the run stops after its checks, without run evidence or
	// receipt: it still holds its node.
	Open bool
	// Released: an approved release (release.json) follows the receipt,
	// releasing the nodes it retained.
	Released bool
}

// Standing is the name of the standing certification of Fired runs: the
// pool is node localhost (the profile is local), one node per run, budget
// one node (DefaultStandingSpec).
const Standing = "pool"

// DefaultStandingSpec is the spec of the standing certification of
// BuildRuns, after its profile (quick) and pool (localhost): due every
// 24h (and so when joined) and on identity changes, budget one node.
const DefaultStandingSpec = "  nodesPerRun: 1\n  every: 24h\n  triggers: [identity]\n  budget: {maxNodes: 1}\n"

// Build writes a fixture under dir whose evidence branch holds runs
// (request names) of a profile of two local checks ("first", "second")
// on one node, each to its receipt, one after the other. It goes through
// evidence.Store and the shared protocol (layout, Summarize), never the
// reconciler: the documents are shaped as the reconciler writes them, one
// commit per lifecycle step. Repo is a bare repository.
func Build(ctx context.Context, dir string, runs ...string) (*Fixture, error) {
	rs := make([]Run, len(runs))
	for i, name := range runs {
		rs[i] = Run{Name: name}
	}
	return BuildRuns(ctx, dir, rs...)
}

// BuildRuns is Build with each run's course spelled out.
func BuildRuns(ctx context.Context, dir string, runs ...Run) (*Fixture, error) {
	return BuildStanding(ctx, dir, DefaultStandingSpec, runs...)
}

// BuildStanding is BuildRuns with the standing certification's spec
// (YAML lines of its spec after profile and nodes, as in
// DefaultStandingSpec).
func BuildStanding(ctx context.Context, dir, standingSpec string, runs ...Run) (*Fixture, error) {
	f, err := NewFixture(dir)
	if err != nil {
		return nil, err
	}
	f.Repo = filepath.Join(dir, "evidence.git")
	var yaml strings.Builder
	fmt.Fprintf(&yaml, "apiVersion: signet.dev/v1alpha1\nkind: CertificationProfile\nmetadata:\n  name: quick\nspec:\n  bundle:\n    path: bundles/quick\n    digest: %s\n  participants:\n    min: 1\n    max: 1\n  checks:\n", synthBundleDigest())
	for _, ck := range []string{"first", "second"} {
		fmt.Fprintf(&yaml, "  - name: %s\n    script: ok.sh\n    backend: local\n    deadline: 20s\n", ck)
	}
	if slices.ContainsFunc(runs, func(r Run) bool { return r.Fired || r.FiredOnly }) {
		fmt.Fprintf(&yaml, "---\napiVersion: signet.dev/v1alpha1\nkind: StandingCertification\nmetadata:\n  name: %s\nspec:\n  profile: quick\n  nodes: [localhost]\n%s", Standing, standingSpec)
	}
	for _, r := range runs {
		if r.FiredOnly {
			continue
		}
		fmt.Fprintf(&yaml, "---\napiVersion: signet.dev/v1alpha1\nkind: CertificationRequest\nmetadata:\n  name: %s\nspec:\n  profile: quick\n  nodes: [localhost]\n", r.Name)
	}
	w, err := newWriter(ctx, f.Repo, filepath.Join(dir, "state"), Cluster, "localhost", yaml.String(), f.Reconciler, f.Approver)
	if err != nil {
		return nil, err
	}
	defer w.store.Close()
	f.Policy = w.policy
	reqs := map[string]*specs.Object{}
	for _, req := range w.requests {
		reqs[req.Name] = req
	}
	for _, r := range runs {
		now := time.Now().UTC().Add(-r.Ago)
		w.cur = fmt.Sprintf("uid-%d", w.seq)
		if r.SameUID && w.lastUID != "" {
			w.cur = w.lastUID
		}
		var firing *evidence.FileRef
		if r.Fired || r.FiredOnly {
			if firing, err = w.fire(ctx, r.Name, now, r.Reason); err != nil {
				return nil, fmt.Errorf("run %s: %w", r.Name, err)
			}
		}
		if !r.FiredOnly {
			if err := w.runAt(ctx, reqs[r.Name], r, now, firing); err != nil {
				return nil, fmt.Errorf("run %s: %w", r.Name, err)
			}
		}
		w.lastUID = w.cur
		f.Runs = append(f.Runs, r.Name)
	}
	y, err := f.Policy.MarshalYAML()
	if err != nil {
		return nil, err
	}
	return f, os.WriteFile(f.TrustFile, y, 0o600)
}

// Synthetic is an evidence branch written through evidence.Store with
// documents shaped exactly as the reconciler writes them (one commit per
// lifecycle step), without running any check: for benchmarks at sizes the
// real reconciler would take minutes to reach.
type Synthetic struct {
	// Remote is the bare repository holding the branch.
	Remote     string
	Policy     *signing.TrustPolicy
	Reconciler *signing.PrivateKey
	Runs       int
	Documents  int
}

// Synthesize writes runs runs of a profile with checks checks (about
// 2*checks+4 signed documents each) to a new bare repository under dir,
// signed by key, approved by approver.
func Synthesize(ctx context.Context, dir string, runs, checks int, key, approver *signing.PrivateKey) (*Synthetic, error) {
	return synthesize(ctx, dir, filepath.Join(dir, "state"), runs, checks, key, approver)
}

// synthesize is Synthesize with the writer's state directory (its mirror
// of the branch) at stateDir.
func synthesize(ctx context.Context, dir, stateDir string, runs, checks int, key, approver *signing.PrivateKey) (*Synthetic, error) {
	var yaml strings.Builder
	fmt.Fprintf(&yaml, "apiVersion: signet.dev/v1alpha1\nkind: CertificationProfile\nmetadata:\n  name: synthetic\nspec:\n  bundle:\n    path: bundles/synthetic\n    digest: %s\n  participants:\n    min: 1\n    max: 1\n  checks:\n", synthBundleDigest())
	for i := range checks {
		fmt.Fprintf(&yaml, "  - name: check-%d\n    script: ok.sh\n    backend: local\n    deadline: 60s\n", i)
	}
	w, err := newWriter(ctx, filepath.Join(dir, "remote.git"), stateDir, "synthetic", "node-1", yaml.String(), key, approver)
	if err != nil {
		return nil, err
	}
	defer w.store.Close()
	// Each run has its own request and an approval of it and the
	// profile, as a real run does: one approval of every request would
	// make each run's copy grow with the branch.
	w.perRun = true
	// The runs are spread over the days before now, synthRunsPerDay a
	// day, the oldest first, as a fleet's history is: a day's shard of
	// the branch holds that day's runs, not the whole branch's (with every
	// run on one day, each append rewrites a shard tree that grows with
	// the branch, and the writer's mirror, whose trees are stored whole,
	// passed 15 GB before 50,000 runs).
	start, spacing := time.Now().UTC(), 24*time.Hour/synthRunsPerDay
	for i := range runs {
		doc := fmt.Sprintf("apiVersion: signet.dev/v1alpha1\nkind: CertificationRequest\nmetadata:\n  name: run-%06d\nspec:\n  profile: synthetic\n  nodes: [localhost]\n", i)
		objs, findings := specs.ParseDocuments("request.yaml", []byte(doc))
		if len(findings) > 0 || len(objs) != 1 {
			return nil, fmt.Errorf("specs: %v", findings)
		}
		if err := w.runAt(ctx, objs[0], Run{}, start.Add(-time.Duration(runs-1-i)*spacing), nil); err != nil {
			return nil, err
		}
		// Every append leaves a pack on the remote; past some 10^5 of
		// them git cannot map them all.
		if (i+1)%synthRepackEvery == 0 {
			if err := packBatch(filepath.Join(dir, "remote.git")); err != nil {
				return nil, err
			}
		}
	}
	return &Synthetic{Remote: filepath.Join(dir, "remote.git"), Policy: w.policy, Reconciler: key, Runs: int(w.seq), Documents: w.docs}, nil
}

// packBatch merges the packs the appends since the last call left on the
// bare repository remote into one, in process (gitobj's consolidation:
// objects copied as stored, trees written as deltas against other
// versions of their directory), and never rewrites a pack of more than
// synthPackObjects objects. The remote then keeps about one pack a batch,
// and a batch costs the same at the last run as at the first. `git repack
// --geometric=2`, used before, rewrote ever larger packs: 9–23 s a batch
// past 50,000 runs, most of the two and a half hours the 10^5-run branch
// took to write; `git pack-objects --stdin-packs` over a batch's 2,750
// packs took 10 s of lookups among them at 13,000 runs, against 2.3 s
// here (docs/performance.md). The cache's final clone packs the branch as
// one.
func packBatch(remote string) error {
	d, err := gitobj.OpenDir(remote)
	if err != nil {
		return err
	}
	defer d.Close()
	// Nothing else reads the remote between appends.
	return d.Consolidate(synthPackObjects, func(remove func() error) error { return remove() })
}

// synthPackObjects bounds the packs packBatch writes: about two batches'
// objects (synthRepackEvery runs of about 120 objects each).
const synthPackObjects = 1 << 16

// synthRunsPerDay is how many runs of a synthetic branch are dated each
// day.
const synthRunsPerDay = 1000

// synthRepackEvery is how many runs Synthesize appends between
// repacks of its remote.
const synthRepackEvery = 250

// synthScript is the one file, ok.sh, of the synthetic profiles' bundle.
var synthScript = []byte("#!/bin/sh\nexit 0\n")

// synthBundleDigest is the aggregate digest of the synthetic bundle, so
// that the admissions' file list hashes to the profile's pin as the
// auditor requires.
func synthBundleDigest() specs.Digest {
	d, err := specs.BundleListingDigest([]specs.BundleFile{{Path: "ok.sh", Digest: specs.DigestOf(synthScript)}})
	if err != nil {
		panic(err) // a constant listing
	}
	return d
}

// writer appends runs of one profile on one node to an evidence branch.
type writer struct {
	store         *evidence.Store
	policy        *signing.TrustPolicy
	key, approver *signing.PrivateKey
	cluster, node string
	prof          *specs.Object
	requests      []*specs.Object
	standing      *specs.Object
	// approval approves every spec object.
	approval []byte
	// perRun: each run copies an approval of its own request and the
	// profile instead of approval.
	perRun bool
	script []byte
	seq    int64
	prev   *evidence.FileRef
	docs   int
	// last is the latest run that finished (none yet when Run is
	// empty); cur and lastUID the node's UID in the run being written
	// (BuildStanding) and in the one before.
	last         evidence.NodeRun
	cur, lastUID string
}

// newWriter creates the bare repository remote, a trust policy of key
// (evidence signer) and approver, and the spec objects of yaml (one
// profile, its requests), approved by approver.
func newWriter(ctx context.Context, remote, stateDir, cluster, node, yaml string, key, approver *signing.PrivateKey) (*writer, error) {
	if _, err := Git("", nil, "init", "-q", "--bare", remote); err != nil {
		return nil, err
	}
	w := &writer{key: key, approver: approver, cluster: cluster, node: node, script: synthScript}
	var err error
	w.policy, err = signing.NewTrustPolicy(cluster, signing.TrustPolicySpec{
		Keys:            []signing.TrustedKeySpec{signing.KeySpec(approver.Public()), signing.KeySpec(key.Public())},
		Approvers:       []string{approver.KeyID()},
		EvidenceSigners: []string{key.KeyID()},
	})
	if err != nil {
		return nil, err
	}
	objs, findings := specs.ParseDocuments("specs.yaml", []byte(yaml))
	if len(findings) > 0 {
		return nil, fmt.Errorf("specs: %v", findings)
	}
	var subjects []signing.Subject
	for _, o := range objs {
		subjects = append(subjects, signing.SubjectFor(o.Ref(), o.Digest))
		switch o.Kind {
		case specs.KindProfile:
			w.prof = o
		case specs.KindRequest:
			w.requests = append(w.requests, o)
		case specs.KindStanding:
			w.standing = o
		}
	}
	if w.approval, err = w.approve(subjects); err != nil {
		return nil, err
	}
	signer, err := key.SSHSigner()
	if err != nil {
		return nil, err
	}
	w.store, err = evidence.Open(ctx, evidence.StoreOptions{URL: remote, CommitSigner: signer, Author: "synthetic", Email: "synthetic@signet.invalid", StateDir: stateDir})
	return w, err
}

// approve returns an approval of subjects signed by the approver.
func (w *writer) approve(subjects []signing.Subject) ([]byte, error) {
	st, err := signing.NewApprovalStatement(subjects, signing.ApprovalPredicate{SignedAt: time.Now().UTC().Format(time.RFC3339)})
	if err != nil {
		return nil, err
	}
	return signing.SignStatement(st, w.approver)
}

// sign returns the document at p: predicate pred of type typ about
// subjects, signed by the evidence key.
func (w *writer) sign(p, typ string, subjects []signing.Subject, pred any) (evidence.File, error) {
	st, err := signing.NewStatement(typ, subjects, pred)
	if err != nil {
		return evidence.File{}, err
	}
	b, err := signing.SignStatement(st, w.key)
	w.docs++
	return evidence.File{Path: p, Data: b}, err
}

// ref is the reference to f by path and digest.
func ref(f evidence.File) evidence.FileRef {
	return evidence.FileRef{Path: f.Path, Digest: specs.DigestOf(f.Data)}
}

// uid is the node's UID in the run the writer writes: cur, or a new one
// after every receipt.
func (w *writer) uid() string {
	if w.cur != "" {
		return w.cur
	}
	return fmt.Sprintf("uid-%d", w.seq)
}

// reason fills in the due reason of the writer's node from what the
// writer wrote before (Run.Reason).
func (w *writer) reason(r evidence.DueReason) evidence.DueReason {
	if r.Kind == "" {
		switch {
		case w.last.Run == "":
			r.Kind = evidence.DueJoined
		case w.uid() != w.last.Identity.UID:
			r.Kind = evidence.DueIdentity
		default:
			r.Kind = evidence.DueSchedule
		}
	}
	if r.Run == "" && r.Kind != evidence.DueJoined {
		r.Run = w.last.Run
	}
	if r.Detail == "" {
		switch r.Kind {
		case evidence.DueJoined:
			r.Detail = "no run of the profile covers the node"
		case evidence.DueIdentity:
			r.Detail = fmt.Sprintf("identity changed since run %s: uid: %q → %q", r.Run, w.last.Identity.UID, w.uid())
		default:
			r.Detail = fmt.Sprintf("%s since run %s", r.Kind, r.Run)
		}
	}
	return r
}

// fire writes firing record run of the standing certification (chosen:
// the writer's node, for reason filled in by w.reason) at now, decided on
// the store's tip, with the index entry and its approval copy, and returns
// its reference.
func (w *writer) fire(ctx context.Context, run string, now time.Time, reason evidence.DueReason) (*evidence.FileRef, error) {
	seq, ok := specs.FiringSequence(w.standing.Name, run)
	if !ok {
		return nil, fmt.Errorf("%s is not a firing of %s", run, w.standing.Name)
	}
	dir := evidence.RunDir(w.cluster, run, now)
	apF := evidence.File{Path: evidence.ApprovalPath(dir, "standing.json"), Data: w.approval}
	st := evidence.ObjectRef{Kind: w.standing.Kind, Name: w.standing.Name, Digest: w.standing.Digest}
	fr := evidence.Firing{Cluster: w.cluster, Run: run, Standing: st, StandingObject: *w.standing.Standing, Sequence: seq, FiredAt: now, Tip: w.store.Tip(),
		Approvals: []evidence.FileRef{ref(apF)},
		Pool:      []evidence.PoolNode{{Node: w.node, UID: w.uid()}}, InUse: []string{},
		Chosen: []evidence.ChosenNode{{Node: w.node, UID: w.uid(),
			Reason: w.reason(reason)}},
	}
	frF, err := w.sign(path.Join(dir, evidence.FiringFile), evidence.PredicateFiring, []signing.Subject{signing.SubjectFor(w.standing.Ref(), w.standing.Digest)}, fr)
	if err != nil {
		return nil, err
	}
	w.docs++ // the approval copy
	if _, err := w.store.AppendFiring(ctx, fr.Tip, w.cluster, run, now, frF.Data, []evidence.File{apF}); err != nil {
		return nil, err
	}
	r := ref(frF)
	return &r, nil
}

// runAt writes request req's run, dated now, to its receipt: admission
// (with the node snapshot, the approval copy and, unless firing names the
// run's firing record, whose index entry landed with it, the index
// entry), then per check its intent and its evidence (with a log), a
// cancel when r.Canceled (after the first check), the run evidence
// (Summarize of the checks), and the receipt with its chain link.
func (w *writer) runAt(ctx context.Context, req *specs.Object, r Run, now time.Time, firing *evidence.FileRef) error {
	run, prof, canceled := req.Name, w.prof.Profile, r.Canceled
	dir := evidence.RunDir(w.cluster, run, now)
	uid := w.uid()
	snap, _ := json.MarshalIndent(evidence.NodeSnapshot{Cluster: w.cluster, Run: run, Name: w.node, UID: uid, BootID: "boot", Kernel: "6.1"}, "", "  ")
	snapF := evidence.File{Path: evidence.NodePath(dir, w.node), Data: snap}
	snapSubj := []signing.Subject{signing.SubjectFor(snapF.Path, specs.DigestOf(snap))}
	approval := w.approval
	if w.perRun {
		var err error
		if approval, err = w.approve([]signing.Subject{signing.SubjectFor(w.prof.Ref(), w.prof.Digest), signing.SubjectFor(req.Ref(), req.Digest)}); err != nil {
			return err
		}
	}
	apF := evidence.File{Path: evidence.ApprovalPath(dir, "approval.json"), Data: approval}
	reqRef := evidence.ObjectRef{Kind: req.Kind, Name: req.Name, Digest: req.Digest}
	adm := evidence.Admission{
		Cluster: w.cluster, Run: run, AdmittedAt: now, SpecCommit: strings.Repeat("a", 40), SpecPath: ".",
		TrustPolicyDigest: w.policy.Digest(),
		Request:           reqRef, RequestObject: *req.Request,
		Profile: evidence.ObjectRef{Kind: w.prof.Kind, Name: w.prof.Name, Digest: w.prof.Digest}, ProfileObject: *prof,
		Bundle:       evidence.BundleRecord{Path: prof.Spec.Bundle.Path, Digest: specs.Digest(prof.Spec.Bundle.Digest), Files: []evidence.FileRef{{Path: "ok.sh", Digest: specs.DigestOf(w.script)}}},
		Participants: []evidence.Participant{{Index: 0, Node: w.node, UID: uid, Snapshot: ref(snapF)}},
		Approvals:    []evidence.FileRef{ref(apF)},
		RunDeadline:  now.Add(prof.RunDeadline()),
		Firing:       firing,
	}
	admF, err := w.sign(path.Join(dir, evidence.AdmissionFile), evidence.PredicateAdmission, append([]signing.Subject{signing.SubjectFor(req.Ref(), req.Digest)}, snapSubj...), adm)
	if err != nil {
		return err
	}
	w.docs++ // the approval copy
	admFiles := []evidence.File{snapF, apF, admF}
	if firing == nil {
		admFiles = append(admFiles, evidence.IndexEntry(w.cluster, run, now))
	}
	if _, err := w.store.Append(ctx, "admitted "+run, admFiles); err != nil {
		return err
	}
	var docs []*evidence.CheckDoc
	for i, ck := range prof.Spec.Checks {
		if canceled && i > 0 {
			break
		}
		doc, err := w.check(ctx, dir, run, uid, i, ck.Name, snapSubj, now)
		if err != nil {
			return err
		}
		docs = append(docs, doc)
	}
	if canceled {
		if err := w.cancel(ctx, dir, reqRef, run, now); err != nil {
			return err
		}
	}
	if r.Open {
		return nil
	}
	ev := evidence.Summarize(&adm, docs, canceled)
	ev.Admission, ev.EndedAt = ref(admF), now
	evF, err := w.sign(path.Join(dir, evidence.EvidenceFile), evidence.PredicateEvidence, snapSubj, ev)
	if err != nil {
		return err
	}
	evCommit, err := w.store.Append(ctx, "evidence", []evidence.File{evF})
	if err != nil {
		return err
	}
	w.seq++
	rc := evidence.Receipt{Cluster: w.cluster, Run: run, Sequence: w.seq, Previous: w.prev, Verdict: ev.Verdict,
		Evidence: ref(evF), EvidenceCommit: evCommit, Cleanup: "done", Released: []string{}, Retained: []string{}, At: now}
	for _, n := range ev.Nodes {
		if n.Verdict == specs.VerdictPass {
			rc.Released = append(rc.Released, n.Node)
		} else {
			rc.Retained = append(rc.Retained, n.Node)
		}
	}
	if len(rc.Released) > 0 && r.TTL > 0 {
		rc.CertifiedUntil = now.Add(r.TTL)
	}
	rcF, err := w.sign(path.Join(dir, evidence.ReceiptFile), evidence.PredicateReceipt, []signing.Subject{signing.SubjectFor(evF.Path, rc.Evidence.Digest)}, rc)
	if err != nil {
		return err
	}
	rcRef := ref(rcF)
	link, _ := json.Marshal(evidence.ChainLink{Run: run, Receipt: rcRef})
	if _, err := w.store.Append(ctx, "receipt", []evidence.File{rcF, {Path: evidence.ChainPath(w.cluster, rc.Sequence), Data: link}}); err != nil {
		return err
	}
	w.prev = &rcRef
	w.last = evidence.NodeRun{Run: run, Profile: w.prof.Name, EndedAt: now, Verdict: ev.Verdict, CertifiedUntil: rc.CertifiedUntil,
		Identity: evidence.NodeSnapshot{Cluster: w.cluster, Run: run, Name: w.node, UID: uid}}
	if r.Released {
		return w.action(ctx, dir, reqRef, run, signing.ActionRelease, rc.Retained, now)
	}
	return nil
}

// check writes check i's intent, then its evidence (a Pass on the node)
// with its log, and returns the evidence as the run directory holds it.
func (w *writer) check(ctx context.Context, dir, run, uid string, i int, name string, snapSubj []signing.Subject, now time.Time) (*evidence.CheckDoc, error) {
	nonce := fmt.Sprintf("%032x", i)
	in, err := w.sign(evidence.CheckIntentPath(dir, i, name), evidence.PredicateCheckIntent, snapSubj, evidence.CheckIntent{Run: run, Check: name, Index: i, Backend: "local", BackendNames: []string{"pid"},
		RenderedDigest: specs.DigestOf([]byte(name)), ScriptDigest: specs.DigestOf(w.script), Nonce: nonce, Deadline: now.Add(time.Minute), CreatedAt: now})
	if err != nil {
		return nil, err
	}
	if _, err := w.store.Append(ctx, "intent", []evidence.File{in}); err != nil {
		return nil, err
	}
	logF := evidence.File{Path: evidence.LogPath(dir, i, name, w.node, "stdout"), Data: []byte(strings.Repeat("measurement line of a check's output\n", 20))}
	code := 0
	ce := evidence.CheckEvidence{Run: run, Check: name, Index: i, Intent: ref(in), Verdict: specs.VerdictPass, Covered: true,
		Participants: []evidence.ParticipantOutcome{{Node: w.node, Identity: evidence.Identity{Workload: "pid-1", Node: w.node, NodeUID: uid}, Verdict: specs.VerdictPass,
			ExitCode: &code, Result: &specs.Result{Run: run, Check: name, Nonce: nonce, Verdict: specs.VerdictPass, Summary: "ok", Measurements: map[string]json.RawMessage{"bandwidthGBs": json.RawMessage("812.5"), "errors": json.RawMessage("0")}},
			Logs: []evidence.FileRef{ref(logF)}}},
		StartedAt: now, EndedAt: now}
	cf, err := w.sign(evidence.CheckPath(dir, i, name), evidence.PredicateCheck, snapSubj, ce)
	if err != nil {
		return nil, err
	}
	if _, err := w.store.Append(ctx, "check", []evidence.File{logF, cf}); err != nil {
		return nil, err
	}
	return &evidence.CheckDoc{File: ref(cf), Evidence: ce}, nil
}

// cancel writes an approved cancel of the run, with its approval copy.
func (w *writer) cancel(ctx context.Context, dir string, req evidence.ObjectRef, run string, now time.Time) error {
	return w.action(ctx, dir, req, run, signing.ActionCancel, []string{w.node}, now)
}

// action writes an approved cancel or release (action) of the run's
// nodes, with its approval copy.
func (w *writer) action(ctx context.Context, dir string, req evidence.ObjectRef, run, action string, nodes []string, now time.Time) error {
	subject := signing.SubjectName(specs.KindRequest, run, action)
	approval, err := w.approve([]signing.Subject{signing.SubjectFor(subject, req.Digest)})
	if err != nil {
		return err
	}
	apF := evidence.File{Path: evidence.ApprovalPath(dir, action+"-approval.json"), Data: approval}
	w.docs++
	act := evidence.Action{Run: run, Action: action, Request: req, Approvals: []evidence.FileRef{ref(apF)}, Nodes: nodes, At: now}
	file, pred := evidence.CancelFile, evidence.PredicateCancel
	if action == signing.ActionRelease {
		file, pred = evidence.ReleaseFile, evidence.PredicateRelease
	}
	f, err := w.sign(path.Join(dir, file), pred, []signing.Subject{signing.SubjectFor(subject, req.Digest)}, act)
	if err != nil {
		return err
	}
	_, err = w.store.Append(ctx, action, []evidence.File{apF, f})
	return err
}
