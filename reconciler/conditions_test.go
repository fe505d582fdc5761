package reconciler_test

import (
	"testing"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	"github.com/stretchr/testify/assert"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"signet.dev/signet/evidence"
	"signet.dev/signet/reconciler"
	"signet.dev/signet/specs"
)

// TestConditionTable is the table of a run's (phase, verdict) to its
// conditions, as Flux users read them (issue 17): only a Pass is
// Ready=True; a run that finished Fail, Error, Inconclusive or Canceled is
// Ready=False and Stalled=True (a person must act) with reason Failed; a
// run in progress is Reconciling.
func TestConditionTable(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		phase                       evidence.Phase
		verdict                     specs.Verdict
		ready, reconciling, stalled metav1.ConditionStatus
		reason                      string
	}{
		{evidence.PhaseAdmitted, "", metav1.ConditionFalse, metav1.ConditionTrue, "", meta.ProgressingReason},
		{evidence.PhaseChecking, "", metav1.ConditionFalse, metav1.ConditionTrue, "", meta.ProgressingReason},
		{evidence.PhaseEvidence, "", metav1.ConditionFalse, metav1.ConditionTrue, "", meta.ProgressingReason},
		{evidence.PhaseReleasing, specs.VerdictFail, metav1.ConditionFalse, metav1.ConditionTrue, "", meta.ProgressingReason},
		{evidence.PhaseDone, specs.VerdictPass, metav1.ConditionTrue, "", "", meta.SucceededReason},
		{evidence.PhaseDone, specs.VerdictFail, metav1.ConditionFalse, "", metav1.ConditionTrue, meta.FailedReason},
		{evidence.PhaseDone, specs.VerdictError, metav1.ConditionFalse, "", metav1.ConditionTrue, meta.FailedReason},
		{evidence.PhaseDone, specs.VerdictInconclusive, metav1.ConditionFalse, "", metav1.ConditionTrue, meta.FailedReason},
		{evidence.PhaseDone, specs.VerdictCanceled, metav1.ConditionFalse, "", metav1.ConditionTrue, meta.FailedReason},
	} {
		cs := reconciler.RunConditions("r1", tc.phase, tc.verdict, now)
		name := string(tc.phase) + "/" + string(tc.verdict)
		status := func(typ string) metav1.ConditionStatus {
			if c := apimeta.FindStatusCondition(cs, typ); c != nil {
				return c.Status
			}
			return ""
		}
		assert.Equal(t, tc.ready, status(meta.ReadyCondition), name)
		assert.Equal(t, tc.reconciling, status(meta.ReconcilingCondition), name)
		assert.Equal(t, tc.stalled, status(meta.StalledCondition), name)
		assert.Equal(t, tc.reason, apimeta.FindStatusCondition(cs, meta.ReadyCondition).Reason, name)
		if tc.verdict != "" && tc.phase == evidence.PhaseDone {
			assert.Contains(t, apimeta.FindStatusCondition(cs, meta.ReadyCondition).Message, string(tc.verdict), name)
		}
	}
}
