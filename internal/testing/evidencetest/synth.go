package evidencetest

import (
	"context"
	"encoding/json"
	"fmt"
	"path"
	"path/filepath"
	"strings"
	"time"

	"signet.dev/signet/evidence"
	"signet.dev/signet/signing"
	"signet.dev/signet/specs"
)

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
	remote := filepath.Join(dir, "remote.git")
	if _, err := Git("", nil, "init", "-q", "--bare", remote); err != nil {
		return nil, err
	}
	policy, err := signing.NewTrustPolicy("synthetic", signing.TrustPolicySpec{
		Keys:            []signing.TrustedKeySpec{signing.KeySpec(approver.Public()), signing.KeySpec(key.Public())},
		Approvers:       []string{approver.KeyID()},
		EvidenceSigners: []string{key.KeyID()},
	})
	if err != nil {
		return nil, err
	}
	signer, err := key.SSHSigner()
	if err != nil {
		return nil, err
	}
	store, err := evidence.Open(ctx, evidence.StoreOptions{URL: remote, CommitSigner: signer, Author: "synthetic", Email: "synthetic@signet.invalid", StateDir: filepath.Join(dir, "state")})
	if err != nil {
		return nil, err
	}
	defer store.Close()

	script := []byte("#!/bin/sh\nexit 0\n")
	var yaml strings.Builder
	fmt.Fprintf(&yaml, "apiVersion: signet.dev/v1alpha1\nkind: CertificationProfile\nmetadata:\n  name: synthetic\nspec:\n  bundle:\n    path: bundles/synthetic\n    digest: %s\n  participants:\n    min: 1\n    max: 1\n  checks:\n", specs.DigestOf([]byte("bundle")))
	for i := range checks {
		fmt.Fprintf(&yaml, "  - name: check-%d\n    script: ok.sh\n    backend: local\n    deadline: 60s\n", i)
	}
	for i := range runs {
		fmt.Fprintf(&yaml, "---\napiVersion: signet.dev/v1alpha1\nkind: CertificationRequest\nmetadata:\n  name: run-%06d\nspec:\n  profile: synthetic\n  nodes: [localhost]\n", i)
	}
	objs, findings := specs.ParseDocuments("synthetic.yaml", []byte(yaml.String()))
	if len(findings) > 0 {
		return nil, fmt.Errorf("synthetic specs: %v", findings)
	}
	var subjects []signing.Subject
	var prof *specs.Object
	for _, o := range objs {
		subjects = append(subjects, signing.SubjectFor(o.Ref(), o.Digest))
		if o.Kind == specs.KindProfile {
			prof = o
		}
	}
	st, err := signing.NewApprovalStatement(subjects, signing.ApprovalPredicate{SignedAt: time.Now().UTC().Format(time.RFC3339)})
	if err != nil {
		return nil, err
	}
	approval, err := signing.SignStatement(st, approver)
	if err != nil {
		return nil, err
	}
	sign := func(p, typ string, subjects []signing.Subject, pred any) (evidence.File, error) {
		st, err := signing.NewStatement(typ, subjects, pred)
		if err != nil {
			return evidence.File{}, err
		}
		b, err := signing.SignStatement(st, key)
		return evidence.File{Path: p, Data: b}, err
	}
	s := &Synthetic{Remote: remote, Policy: policy, Reconciler: key}
	var prev *evidence.FileRef
	for n, o := range objs {
		if o.Kind != specs.KindRequest {
			continue
		}
		run := o.Name
		now := time.Now().UTC()
		dir := evidence.RunDir("synthetic", run, now)
		snap, _ := json.MarshalIndent(evidence.NodeSnapshot{Cluster: "synthetic", Run: run, Name: "node-1", UID: fmt.Sprintf("uid-%d", n), BootID: "boot", Kernel: "6.1"}, "", "  ")
		np := evidence.NodePath(dir, "node-1")
		snapRef := evidence.FileRef{Path: np, Digest: specs.DigestOf(snap)}
		snapSubj := []signing.Subject{signing.SubjectFor(np, snapRef.Digest)}
		ap := evidence.ApprovalPath(dir, "approval.json")
		adm := evidence.Admission{
			Cluster: "synthetic", Run: run, AdmittedAt: now, SpecCommit: strings.Repeat("a", 40), SpecPath: ".",
			TrustPolicyDigest: policy.Digest(),
			Request:           evidence.ObjectRef{Kind: o.Kind, Name: o.Name, Digest: o.Digest}, RequestObject: *o.Request,
			Profile: evidence.ObjectRef{Kind: prof.Kind, Name: prof.Name, Digest: prof.Digest}, ProfileObject: *prof.Profile,
			Bundle:       evidence.BundleRecord{Path: "bundles/synthetic", Digest: specs.Digest(prof.Profile.Spec.Bundle.Digest), Files: []evidence.FileRef{{Path: "ok.sh", Digest: specs.DigestOf(script)}}},
			Participants: []evidence.Participant{{Index: 0, Node: "node-1", UID: fmt.Sprintf("uid-%d", n), Snapshot: snapRef}},
			Approvals:    []evidence.FileRef{{Path: ap, Digest: specs.DigestOf(approval)}},
			RunDeadline:  now.Add(prof.Profile.RunDeadline()),
		}
		admF, err := sign(path.Join(dir, evidence.AdmissionFile), evidence.PredicateAdmission, append([]signing.Subject{signing.SubjectFor(o.Ref(), o.Digest)}, snapSubj...), adm)
		if err != nil {
			return nil, err
		}
		if _, err := store.Append(ctx, "admitted "+run, []evidence.File{{Path: np, Data: snap}, {Path: ap, Data: approval}, admF, evidence.IndexEntry("synthetic", run, now)}); err != nil {
			return nil, err
		}
		s.Documents += 2
		ev := evidence.RunEvidence{Run: run, Cluster: "synthetic", Admission: evidence.FileRef{Path: admF.Path, Digest: specs.DigestOf(admF.Data)}, Verdict: specs.VerdictPass, Covered: true,
			Nodes: []evidence.NodeSummary{{Node: "node-1", Verdict: specs.VerdictPass}}}
		for i, ck := range prof.Profile.Spec.Checks {
			ip := evidence.CheckIntentPath(dir, i, ck.Name)
			in, err := sign(ip, evidence.PredicateCheckIntent, snapSubj, evidence.CheckIntent{Run: run, Check: ck.Name, Index: i, Backend: "local", BackendNames: []string{"pid"},
				RenderedDigest: specs.DigestOf([]byte(ck.Name)), ScriptDigest: specs.DigestOf(script), Nonce: fmt.Sprintf("%032x", i), Deadline: now.Add(time.Minute), CreatedAt: now})
			if err != nil {
				return nil, err
			}
			if _, err := store.Append(ctx, "intent", []evidence.File{in}); err != nil {
				return nil, err
			}
			logData := []byte(strings.Repeat("measurement line of a check's output\n", 20))
			lp := evidence.LogPath(dir, i, ck.Name, "node-1", "stdout")
			code := 0
			ce := evidence.CheckEvidence{Run: run, Check: ck.Name, Index: i, Intent: evidence.FileRef{Path: ip, Digest: specs.DigestOf(in.Data)}, Verdict: specs.VerdictPass, Covered: true,
				Participants: []evidence.ParticipantOutcome{{Node: "node-1", Identity: evidence.Identity{Workload: "pid-1", Node: "node-1", NodeUID: fmt.Sprintf("uid-%d", n)}, Verdict: specs.VerdictPass,
					ExitCode: &code, Result: &specs.Result{Run: run, Check: ck.Name, Nonce: fmt.Sprintf("%032x", i), Verdict: specs.VerdictPass, Summary: "ok", Measurements: map[string]json.RawMessage{"bandwidthGBs": json.RawMessage("812.5"), "errors": json.RawMessage("0")}},
					Logs: []evidence.FileRef{{Path: lp, Digest: specs.DigestOf(logData)}}}},
				StartedAt: now, EndedAt: now}
			cf, err := sign(evidence.CheckPath(dir, i, ck.Name), evidence.PredicateCheck, snapSubj, ce)
			if err != nil {
				return nil, err
			}
			if _, err := store.Append(ctx, "check", []evidence.File{{Path: lp, Data: logData}, cf}); err != nil {
				return nil, err
			}
			ev.Checks = append(ev.Checks, evidence.CheckSummary{Index: i, Check: ck.Name, Verdict: specs.VerdictPass, Evidence: &evidence.FileRef{Path: cf.Path, Digest: specs.DigestOf(cf.Data)}})
			s.Documents += 2
		}
		ev.EndedAt = now
		evF, err := sign(path.Join(dir, evidence.EvidenceFile), evidence.PredicateEvidence, snapSubj, ev)
		if err != nil {
			return nil, err
		}
		evCommit, err := store.Append(ctx, "evidence", []evidence.File{evF})
		if err != nil {
			return nil, err
		}
		s.Runs++
		rc := evidence.Receipt{Cluster: "synthetic", Run: run, Sequence: int64(s.Runs), Previous: prev, Verdict: specs.VerdictPass,
			Evidence: evidence.FileRef{Path: evF.Path, Digest: specs.DigestOf(evF.Data)}, EvidenceCommit: evCommit, Cleanup: "done",
			Released: []string{"node-1"}, Retained: []string{}, At: now}
		rcF, err := sign(path.Join(dir, evidence.ReceiptFile), evidence.PredicateReceipt, []signing.Subject{signing.SubjectFor(evF.Path, rc.Evidence.Digest)}, rc)
		if err != nil {
			return nil, err
		}
		ref := evidence.FileRef{Path: rcF.Path, Digest: specs.DigestOf(rcF.Data)}
		link, _ := json.Marshal(evidence.ChainLink{Run: run, Receipt: ref})
		if _, err := store.Append(ctx, "receipt", []evidence.File{rcF, {Path: evidence.ChainPath("synthetic", rc.Sequence), Data: link}}); err != nil {
			return nil, err
		}
		prev = &ref
		s.Documents += 2
	}
	return s, nil
}
