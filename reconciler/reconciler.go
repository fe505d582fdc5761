package reconciler

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"signet.dev/signet/evidence"
	"signet.dev/signet/reconciler/backend"
	"signet.dev/signet/report"
	"signet.dev/signet/signing"
	"signet.dev/signet/specs"
)

// Reconciler turns approved requests into runs and runs into evidence.
// It is safe for concurrent use; Start runs the poll loop, ReconcileOnce
// one pass.
type Reconciler struct {
	cfg       *Config
	cfgDigest string
	log       *slog.Logger
	key       *signing.PrivateKey
	store     *evidence.Store
	source    SpecSource
	families  []*backend.Family
	metrics   *Metrics
	now       func() time.Time
	observer  func(Event)
	only      string
	holds     *holds
	certs     certCache
	chain     chainCache
	receiptMu sync.Mutex

	mu sync.Mutex
	// runs are the runs held in full: unfinished ones, finished ones that
	// retain nodes without a durable release, and runs another writer may
	// drive, read since start-up (a foreign run, a firing).
	runs map[string]*runState
	// finished are the other finished runs of this cluster, found at
	// start-up or retired once finished (retire), kept only as what the
	// certification sweep, the repair of reservations, the standing pool
	// and a request's condition read (issue 19: memory bounded by the
	// work in flight, not by the branch's history or the daemon's age);
	// readRun reads one in full again when needed (Wait).
	finished map[string]*finishedRun
	// latest holds the node runs of the finished runs folded from
	// finished (finishedRun.folded): the standing pool's history of them.
	latest evidence.LatestRuns
	// recent are the statuses of the last recentRuns runs retired
	// (retire), oldest first: /status lists them beside the runs in
	// full.
	recent []RunStatus
	// names interns node and profile names and verdicts of finished
	// runs.
	names map[string]string
	// fired are the firings on the evidence branch not admitted yet, by
	// run ID: their nodes are claimed.
	fired    map[string]*firedRun
	lastKey  string
	dirty    bool
	status   Status
	runCtx   context.Context
	stopRuns context.CancelFunc
	wg       sync.WaitGroup
	ready    bool
	// passes is how many reconcile passes have started.
	passes int64
	// recovered is how Recover found the cluster's runs.
	recovered RecoveryCounts
	// receipts counts the receipts this reconciler wrote; recordedAt is
	// the count at the last record of finished runs (finishedrecord.go).
	receipts, recordedAt atomic.Int64
	// foldedSince: foldFinished folded runs into latest since the last
	// record; foldReads counts the runs it read to do so.
	foldedSince atomic.Bool
	foldReads   atomic.Int64
	// runReads counts the runs read from the evidence branch (readRun).
	runReads atomic.Int64
	// trigger holds at most one pending pass asked for from outside
	// (Trigger); wake one asked for by the reconciler itself (wake).
	trigger chan struct{}
	wake    chan struct{}
	// reportReq holds at most one pending look at the evidence tip by
	// the report goroutine (startReports).
	reportReq chan struct{}
	// reports writes the report of report.dir, each after the first
	// from the last one's state, kept in memory (report.Builder).
	reports report.Builder
	// evidenceAuth is the evidence remote's credentials, for the report.
	evidenceAuth evidence.Auth
}

// SpecSource is where the reconciler reads specs from: one Git repository.
type SpecSource interface {
	// Revision asks the remote for the tip of the branch without fetching
	// objects (the cost of `git ls-remote`).
	Revision(ctx context.Context) (string, error)
	// Checkout makes rev available locally and returns its tree.
	Checkout(ctx context.Context, rev string) (fs.FS, error)
}

// Event reports progress of a run to an observer (the CLI's live view).
type Event struct {
	Run     string
	Check   string
	Index   int
	Total   int
	Started bool
	// Recorded: the check's evidence is durable (its backend not yet
	// cleaned up).
	Recorded bool
	Done     bool
	Skipped  bool
	Verdict  specs.Verdict
	Message  string
}

// Options are the parts of a Reconciler that are not configuration.
type Options struct {
	Logger *slog.Logger
	Store  *evidence.Store
	Source SpecSource
	// Families are the backend families runs may use; no two serve the
	// same check kind. Build adds the registered families the
	// configuration enables.
	Families []*backend.Family
	Key      *signing.PrivateKey
	Metrics  *Metrics
	Now      func() time.Time
	Observer func(Event)
	// Only, when set, limits reconciles to the request of that name
	// (`signet run`).
	Only string
	// AcceptCurrentTip lets Build trust the evidence branch's current tip
	// when no tip is remembered or pinned (--accept-current-tip); the
	// store logs it and remembers it from then on.
	AcceptCurrentTip bool
	// EvidenceAuth is the evidence remote's credentials, which the report
	// of config field report.dir reads the branch with (Build sets it).
	EvidenceAuth evidence.Auth
}

// New builds a Reconciler. It does not start anything; call Recover and
// then Start (daemon) or ReconcileOnce (one shot).
func New(cfg *Config, o Options) (*Reconciler, error) {
	cfg.withDefaults()
	if err := checkFamilies(o.Families); err != nil {
		return nil, err
	}
	raw, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(raw)
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics(nil)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Reconciler{
		cfg: cfg, cfgDigest: hex.EncodeToString(sum[:]), log: o.Logger, key: o.Key, store: o.Store,
		source: o.Source, families: o.Families, metrics: o.Metrics, now: o.Now, observer: o.Observer,
		only: o.Only, holds: newHolds(), runs: map[string]*runState{}, fired: map[string]*firedRun{},
		finished: map[string]*finishedRun{}, names: map[string]string{},
		runCtx: ctx, stopRuns: cancel, trigger: make(chan struct{}, 1), wake: make(chan struct{}, 1),
		reportReq: make(chan struct{}, 1), evidenceAuth: o.EvidenceAuth,
	}
	o.Metrics.state.attach(r)
	return r, nil
}

func (r *Reconciler) observe(e Event) {
	if r.observer != nil {
		r.observer(e)
	}
}

// TriggerGap is the least time from the start of one pass to the start
// of a pass asked for by Trigger.
const TriggerGap = time.Second

// Start runs the poll loop until ctx ends: a reconcile every interval,
// after a run frees nodes or finishes, and when Trigger is called.
func (r *Reconciler) Start(ctx context.Context) {
	r.startReports(ctx)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		t := time.NewTicker(r.cfg.interval())
		defer t.Stop()
		for {
			started := time.Now()
			if _, err := r.ReconcileOnce(ctx); err != nil && ctx.Err() == nil {
				r.log.Error("reconcile failed", "error", err)
			}
			r.askReport()
			r.recordFinished(false)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			case <-r.wake:
			case <-r.trigger:
				if !sleep(ctx, time.Until(started.Add(TriggerGap))) {
					return
				}
			}
		}
	}()
}

// Trigger asks the loop for a pass (webhooks, POST /reconcile). However
// many calls arrive, at most one pass is pending, and it starts no sooner
// than TriggerGap after the previous pass started. It returns the number
// of the next pass to start: that pass, and every later one, starts after
// this call and so reads the spec repository as it is now or later.
func (r *Reconciler) Trigger() int64 {
	r.mu.Lock()
	next := r.passes + 1
	r.mu.Unlock()
	select {
	case r.trigger <- struct{}{}:
	default:
	}
	return next
}

// wakeUp asks the loop for a pass now: the reconciler's own changes (a
// run finished, nodes freed) are not held back by TriggerGap.
func (r *Reconciler) wakeUp() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// sleep waits d or until ctx ends; it reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Close stops the loop and every run's goroutine and waits for them. Runs
// stop where they are: every admitted run stays recoverable from the
// evidence branch, and a running check's process group is killed.
func (r *Reconciler) Close(ctx context.Context) error {
	r.stopRuns()
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	select {
	case <-done:
		r.recordFinished(true)
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Recovered says how Recover found the cluster's runs.
func (r *Reconciler) Recovered() RecoveryCounts {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.recovered
}

// recordFinished writes the record of finished runs when foldFinished
// folded runs into the standing pool's history since the last one, or
// when this reconciler wrote a receipt since and, unless final, at least
// finishedRecordEvery of them. A failure is logged: the record only saves
// reading runs at the next start.
func (r *Reconciler) recordFinished(final bool) {
	n := r.receipts.Load()
	since := n - r.recordedAt.Load()
	folded := r.foldedSince.Load()
	if !r.Ready() || (!folded && (since == 0 || (!final && since < finishedRecordEvery))) {
		return
	}
	r.foldedSince.Store(false)
	if err := r.writeFinishedRecord(); err != nil {
		r.foldedSince.Store(folded)
		r.log.Warn("writing the record of finished runs", "error", err)
		return
	}
	r.recordedAt.Store(n)
}

// Wait blocks until run id (admitted or recovered by this reconciler) has
// finished its lifecycle, or ctx ends. It returns an error when the run
// stopped (shutdown) before its receipt.
func (r *Reconciler) Wait(ctx context.Context, id string) (*RunStatus, error) {
	r.mu.Lock()
	rs, fr := r.runs[id], r.finished[id]
	r.mu.Unlock()
	if rs == nil && fr != nil {
		// Finished and kept compact: read again in full, not kept.
		var err error
		if rs, err = r.readFinished(ctx, id); err != nil {
			return nil, fmt.Errorf("run %s: %w", id, err)
		}
	}
	if rs == nil {
		return nil, fmt.Errorf("run %q is not active in this reconciler", id)
	}
	select {
	case <-rs.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	st := runStatus(rs)
	if st.Phase != evidence.PhaseDone {
		return &st, fmt.Errorf("run %s stopped in phase %s before its receipt; it resumes when a reconciler starts again", id, st.Phase)
	}
	return &st, nil
}

// startRun starts the lifecycle goroutine of an admitted or recovered run.
func (r *Reconciler) startRun(rs *runState) {
	r.mu.Lock()
	r.runs[rs.id] = rs
	r.mu.Unlock()
	rs.mu.Lock()
	rs.driven = true
	rs.mu.Unlock()
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.drive(r.runCtx, rs)
	}()
}

// recentRuns is how many retired runs /status lists (Reconciler.recent).
const recentRuns = 64

func (r *Reconciler) runFinished(rs *runState) {
	close(rs.done)
	r.retire(rs)
	r.mu.Lock()
	r.dirty = true // a node may have been released: requests waiting for it can go on
	r.mu.Unlock()
	r.wakeUp()
}

// noopKey is what decides that a reconcile has nothing to do: the spec
// revision, the trust policy's digest and the reconciler's configuration.
// The trust policy is part of it so that a revoked key stops counting at
// once, even with no new commit (cf. fluxcd/source-controller#2165).
func (r *Reconciler) noopKey(rev string, policy *signing.TrustPolicy) string {
	return rev + "|" + policy.Digest().String() + "|" + r.cfgDigest
}

// loadPolicy reads the trust policy file anew on every reconcile.
func (r *Reconciler) loadPolicy() (*signing.TrustPolicy, error) {
	return signing.LoadTrustPolicy(r.cfg.TrustPolicy)
}

var errNoop = errors.New("no change")

// appendEvidence is store.Append, counting in
// signet_evidence_push_failures_total every failure but ErrExists (the
// create-only refusal a retried step expects) and the end of ctx.
func (r *Reconciler) appendEvidence(ctx context.Context, message string, files []evidence.File) (string, error) {
	commit, err := r.store.Append(ctx, message, files)
	if err != nil && !errors.Is(err, evidence.ErrExists) && ctx.Err() == nil {
		r.metrics.pushFailures.Inc()
	}
	return commit, err
}
