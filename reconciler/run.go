package reconciler

import (
	"context"
	"sync"
	"time"

	"signet.dev/signet/evidence"
	"signet.dev/signet/specs"
)

// runState is the in-memory view of one admitted run. Everything in it can
// be rebuilt from the evidence branch (recovery); the only thing that is not
// is a backend report cached between a check's end and its durable
// evidence, which makes retrying a failed evidence append exact.
type runState struct {
	id     string
	dir    string
	adm    evidence.Admission
	admRef evidence.FileRef

	// docMu serializes an approved cancel with the run evidence.
	docMu sync.Mutex

	mu        sync.Mutex
	phase     evidence.Phase
	canceled  bool
	stopCheck context.CancelFunc
	summaries []evidence.CheckSummary
	checkDocs map[int]*evidence.CheckDoc // check index → its durable evidence
	reports   map[int]*CheckReport
	evidence  *evidence.FileRef
	evCommit  string
	endedAt   time.Time // the run evidence's endedAt
	verdict   specs.Verdict
	nodes     []evidence.NodeSummary
	released  []string
	retained  []string
	// releaseNotes say why a released node's reservation was not lifted.
	releaseNotes []evidence.NodeNote
	receipt      *evidence.FileRef
	// nodeRunsCache is the finished run's evidence.NodeRuns, read once
	// (reconciler/standing.go).
	nodeRunsCache []evidence.NodeRun
	done          chan struct{}
	started       time.Time
	// driven: this reconciler drives the run (startRun). A run loaded
	// without being driven is another reconciler's; its end is read from
	// the evidence branch (refreshForeign).
	driven bool
}

func newRunState(dir string, adm evidence.Admission, ref evidence.FileRef) *runState {
	return &runState{
		id:        adm.Run,
		dir:       dir,
		adm:       adm,
		admRef:    ref,
		phase:     evidence.PhaseAdmitted,
		checkDocs: map[int]*evidence.CheckDoc{},
		reports:   map[int]*CheckReport{},
		done:      make(chan struct{}),
		started:   time.Now(),
	}
}

func (rs *runState) setPhase(p evidence.Phase) {
	rs.mu.Lock()
	rs.phase = p
	rs.mu.Unlock()
}

// cancel records that an approved cancel is durable and stops the running
// check, if any.
func (rs *runState) cancel() {
	rs.mu.Lock()
	rs.canceled = true
	stop := rs.stopCheck
	rs.mu.Unlock()
	if stop != nil {
		stop()
	}
}

func (rs *runState) isCanceled() bool {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.canceled
}

func (rs *runState) nodeNames() []string {
	out := make([]string, len(rs.adm.Participants))
	for i, p := range rs.adm.Participants {
		out[i] = p.Node
	}
	return out
}

// participantUID is the admitted UID of node.
func (rs *runState) participantUID(node string) string {
	for _, p := range rs.adm.Participants {
		if p.Node == node {
			return p.UID
		}
	}
	return ""
}

func (rs *runState) finished() bool {
	select {
	case <-rs.done:
		return true
	default:
		return false
	}
}
