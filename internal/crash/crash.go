// Package crash provides named crash points: places in the run lifecycle
// where a test can make the process die abruptly, as a power cut or an OOM
// kill would, to prove that recovery finishes every admitted run.
//
// A crash point is armed only through the SIGNET_CRASH_AT environment
// variable read once at start-up ("name" or "name:N" to crash at the N-th
// hit). When it is unset, Point costs one atomic load.
package crash

import (
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
)

// EnvVar names the environment variable that arms a crash point.
const EnvVar = "SIGNET_CRASH_AT"

var (
	armed  atomic.Bool
	target string
	nth    int64
	hits   atomic.Int64
)

func init() {
	v := os.Getenv(EnvVar)
	if v == "" {
		return
	}
	target, nth = v, 1
	if name, n, ok := strings.Cut(v, ":"); ok {
		if k, err := strconv.ParseInt(n, 10, 64); err == nil && k > 0 {
			target, nth = name, k
		}
	}
	armed.Store(true)
}

// Point kills the process with SIGKILL if the crash point name is armed
// and this is the armed hit. Nothing is flushed, nothing deferred runs.
func Point(name string) {
	if !armed.Load() || name != target {
		return
	}
	if hits.Add(1) == nth {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // never returns
	}
}

// Points lists every crash point of the lifecycle, in order. Tests iterate
// over it so that a new point cannot be left out of the crash matrix.
var Points = []string{
	"after-admission",
	"after-intent",
	"during-check",
	"after-check-evidence",
	"after-run-evidence",
	"after-release",
	"after-receipt",
}

// StandingPoints are the crash points of a standing certification's
// firing, which only a reconcile pass reaches (not `signet run`): its
// tests arm them (reconciler TestStandingCrash).
var StandingPoints = []string{
	"after-firing",
}

// AdmissionPoints are the crash points of a pass that admits several
// requests at once (admission.concurrency): "amid-admissions" is hit each
// time one of them is admitted (its admission record durable, its run
// started), so "amid-admissions:N" kills the pass at the N-th admission
// while others are between their reservation and their admission record,
// or not started. Its tests arm them (reconciler
// TestConcurrentAdmissionCrash).
var AdmissionPoints = []string{
	"amid-admissions",
}

// KubePoints are the crash points only the Kubernetes crash matrix arms; local runs pass them too.
var KubePoints = []string{
	"after-reservation",
}

// EvidencePoints are the crash points of the evidence store:
// "after-group-commit" fires once a commit holding several appends has
// landed, before any of their callers is answered (evidence
// TestGroupCommitCrash).
var EvidencePoints = []string{
	"after-group-commit",
}
