package evidence_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"signet.dev/signet/evidence"
	"signet.dev/signet/specs"
)

// TestPhaseOf: the phase is the furthest document present, Fired for a
// firing alone, and nothing else without an admission.
func TestPhaseOf(t *testing.T) {
	for _, tc := range []struct {
		files []evidence.FileKind
		want  evidence.Phase
	}{
		{nil, evidence.PhaseUnknown},
		{[]evidence.FileKind{evidence.KindReceipt, evidence.KindEvidence}, evidence.PhaseUnknown},
		{[]evidence.FileKind{evidence.KindAdmission}, evidence.PhaseAdmitted},
		{[]evidence.FileKind{evidence.KindAdmission, evidence.KindCancel}, evidence.PhaseAdmitted},
		{[]evidence.FileKind{evidence.KindAdmission, evidence.KindCheckIntent}, evidence.PhaseChecking},
		{[]evidence.FileKind{evidence.KindAdmission, evidence.KindCheck}, evidence.PhaseChecking},
		{[]evidence.FileKind{evidence.KindCheckIntent, evidence.KindAdmission, evidence.KindEvidence}, evidence.PhaseEvidence},
		{[]evidence.FileKind{evidence.KindAdmission, evidence.KindReceipt}, evidence.PhaseDone},
		{[]evidence.FileKind{evidence.KindFiring}, evidence.PhaseFired},
		{[]evidence.FileKind{evidence.KindFiring, evidence.KindAdmission}, evidence.PhaseAdmitted},
		{[]evidence.FileKind{evidence.KindFiring, evidence.KindAdmission, evidence.KindReceipt}, evidence.PhaseDone},
		{[]evidence.FileKind{evidence.KindFiring, evidence.KindReceipt}, evidence.PhaseUnknown},
		{[]evidence.FileKind{evidence.KindFiring, evidence.KindCheckIntent}, evidence.PhaseUnknown},
	} {
		assert.Equal(t, tc.want, evidence.PhaseOf(tc.files...), "%v", tc.files)
	}
}

// TestSummarize: DESIGN §4's folding of check documents into run
// evidence: check verdicts as recorded, a skipped check not covering any
// node, run and node verdicts by specs' precedence, a cancel overriding
// every node that did not pass.
func TestSummarize(t *testing.T) {
	adm := &evidence.Admission{Cluster: "c", Run: "r",
		Participants: []evidence.Participant{{Index: 0, Node: "n1"}, {Index: 1, Node: "n2"}}}
	adm.ProfileObject.Spec.Checks = []specs.Check{{Name: "a"}, {Name: "b"}}
	doc := func(i int, v1, v2 specs.Verdict) *evidence.CheckDoc {
		d := &evidence.CheckDoc{File: evidence.FileRef{Path: evidence.CheckPath("d", i, adm.ProfileObject.Spec.Checks[i].Name), Digest: "sha256:x"}}
		d.Evidence.Verdict = specs.RunVerdict(false, []specs.Verdict{v1, v2})
		d.Evidence.Participants = []evidence.ParticipantOutcome{{Node: "n1", Verdict: v1}, {Node: "n2", Verdict: v2}}
		return d
	}
	pass, fail, errV, canc := specs.VerdictPass, specs.VerdictFail, specs.VerdictError, specs.VerdictCanceled
	type node = evidence.NodeSummary
	for _, tc := range []struct {
		name     string
		checks   []*evidence.CheckDoc
		canceled bool
		verdict  specs.Verdict
		covered  bool
		checkVs  []specs.Verdict
		nodes    []node
	}{
		{"all pass", []*evidence.CheckDoc{doc(0, pass, pass), doc(1, pass, pass)}, false, pass, true, []specs.Verdict{pass, pass}, []node{{"n1", pass}, {"n2", pass}}},
		{"one node fails one check", []*evidence.CheckDoc{doc(0, pass, fail), doc(1, pass, pass)}, false, fail, true, []specs.Verdict{fail, pass}, []node{{"n1", pass}, {"n2", fail}}},
		{"second check skipped", []*evidence.CheckDoc{doc(0, pass, fail), nil}, false, fail, false, []specs.Verdict{fail, errV}, []node{{"n1", errV}, {"n2", fail}}},
		{"short list: the rest skipped", []*evidence.CheckDoc{doc(0, pass, pass)}, false, errV, false, []specs.Verdict{pass, errV}, []node{{"n1", errV}, {"n2", errV}}},
		{"canceled after the first check", []*evidence.CheckDoc{doc(0, pass, fail), nil}, true, canc, false, []specs.Verdict{fail, canc}, []node{{"n1", canc}, {"n2", canc}}},
		{"canceled after every check ran", []*evidence.CheckDoc{doc(0, pass, pass), doc(1, pass, errV)}, true, canc, true, []specs.Verdict{pass, errV}, []node{{"n1", pass}, {"n2", canc}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := evidence.Summarize(adm, tc.checks, tc.canceled)
			assert.Equal(t, "r", ev.Run)
			assert.Equal(t, "c", ev.Cluster)
			assert.Equal(t, tc.verdict, ev.Verdict)
			assert.Equal(t, tc.canceled, ev.Canceled)
			assert.Equal(t, tc.covered, ev.Covered)
			assert.Equal(t, tc.nodes, ev.Nodes)
			var vs []specs.Verdict
			for i, s := range ev.Checks {
				vs = append(vs, s.Verdict)
				assert.Equal(t, i, s.Index)
				assert.Equal(t, adm.ProfileObject.Spec.Checks[i].Name, s.Check)
				if i < len(tc.checks) && tc.checks[i] != nil {
					assert.Equal(t, &tc.checks[i].File, s.Evidence)
					assert.False(t, s.Skipped)
				} else {
					assert.Nil(t, s.Evidence)
					assert.True(t, s.Skipped)
				}
			}
			assert.Equal(t, tc.checkVs, vs)
		})
	}
}
