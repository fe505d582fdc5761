package reconciler_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"signet.dev/signet/evidence"
	"signet.dev/signet/reconciler/backend"
	"signet.dev/signet/specs"
)

// ledgerEnv names the directory of a ledger family that the pass process
// (passProcess) adds to its reconciler, so that a test can kill it and
// read what it reserved.
const ledgerEnv = "SIGNET_TEST_LEDGER"

// ledger is a backend family serving the pod check kind whose nodes are
// names and whose checks pass after runFor without running anything. Its
// reservations are files in dir (one per node, naming the run), so that
// they outlive a killed process as a cluster's would, and it appends every
// reservation and release to dir/log. It refuses nothing: a node reserved
// for two runs at once is what the log shows (doubleBooked), not an error,
// so a test sees the reconciler's own rule at work. It counts the
// admissions in flight (Snapshot to Reserve) for tests of the concurrency
// bound.
type ledger struct {
	dir    string
	runFor time.Duration
	// snapFor is how long each Snapshot takes.
	snapFor time.Duration
	// slowSelect, when set, is a request whose selection takes selectFor.
	slowSelect string
	selectFor  time.Duration

	mu                sync.Mutex
	inFlight, maxSeen int
	admitting         map[string]bool // runs between their first Snapshot and Reserve
	reservedRuns      map[string]bool // runs past Reserve (a run's later snapshots are not admissions)
}

var (
	_ backend.Fleet   = (*ledger)(nil)
	_ backend.Backend = (*ledger)(nil)
)

func newLedger(dir string) *ledger {
	if err := os.MkdirAll(filepath.Join(dir, "res"), 0o755); err != nil {
		panic(err)
	}
	return &ledger{dir: dir, runFor: 50 * time.Millisecond, admitting: map[string]bool{}, reservedRuns: map[string]bool{}}
}

func (l *ledger) family() *backend.Family {
	return &backend.Family{Name: "ledger", Fleet: l, Backends: map[specs.Backend]backend.Backend{specs.BackendPod: l}}
}

func (l *ledger) note(format string, a ...any) error {
	f, err := os.OpenFile(filepath.Join(l.dir, "log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = fmt.Fprintf(f, format+"\n", a...)
	return err
}

// maxInFlight is the most admissions seen between Snapshot and Reserve at
// once.
func (l *ledger) maxInFlight() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.maxSeen
}

func (l *ledger) Select(_ context.Context, _ *specs.CertificationProfile, req *specs.CertificationRequest) ([]string, error) {
	if req.Metadata.Name == l.slowSelect {
		time.Sleep(l.selectFor)
	}
	return req.Spec.Nodes, nil
}

func (l *ledger) Snapshot(_ context.Context, cluster, run, node string) (*evidence.NodeSnapshot, error) {
	l.mu.Lock()
	if !l.admitting[run] && !l.reservedRuns[run] {
		l.admitting[run] = true
		l.inFlight++
		l.maxSeen = max(l.maxSeen, l.inFlight)
	}
	l.mu.Unlock()
	time.Sleep(l.snapFor)
	return &evidence.NodeSnapshot{Cluster: cluster, Run: run, Name: node, UID: "uid-" + node}, nil
}

func (l *ledger) Reserve(_ context.Context, run string, nodes []backend.Node) error {
	l.mu.Lock()
	if l.admitting[run] {
		delete(l.admitting, run)
		l.inFlight--
	}
	l.reservedRuns[run] = true
	l.mu.Unlock()
	for _, n := range nodes {
		if err := os.WriteFile(filepath.Join(l.dir, "res", n.Name), []byte(run), 0o644); err != nil {
			return err
		}
		if err := l.note("reserve %s %s", run, n.Name); err != nil {
			return err
		}
	}
	return nil
}

func (l *ledger) Release(_ context.Context, run string, n backend.Node) error {
	file := filepath.Join(l.dir, "res", n.Name)
	b, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if string(b) != run {
		return backend.ErrNotOurs
	}
	if err := os.Remove(file); err != nil {
		return err
	}
	return l.note("release %s %s", run, n.Name)
}

func (l *ledger) Reservations(context.Context) ([]backend.Reservation, error) {
	return l.reserved()
}

// reserved lists the reservations left in dir.
func (l *ledger) reserved() ([]backend.Reservation, error) {
	entries, err := os.ReadDir(filepath.Join(l.dir, "res"))
	if err != nil {
		return nil, err
	}
	var out []backend.Reservation
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(l.dir, "res", e.Name()))
		if err != nil {
			return nil, err
		}
		out = append(out, backend.Reservation{Node: backend.Node{Name: e.Name(), UID: "uid-" + e.Name()}, Run: string(b)})
	}
	return out, nil
}

// doubleBooked replays the log and describes every reservation of a node
// that another run still had reserved; nil when there was none.
func (l *ledger) doubleBooked() ([]string, error) {
	f, err := os.Open(filepath.Join(l.dir, "log"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	holder := map[string]string{}
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		op, rest, _ := strings.Cut(sc.Text(), " ")
		run, node, _ := strings.Cut(rest, " ")
		switch op {
		case "reserve":
			if cur := holder[node]; cur != "" && cur != run {
				out = append(out, fmt.Sprintf("node %s reserved by two runs: %s and %s", node, cur, run))
			}
			holder[node] = run
		case "release":
			if holder[node] == run {
				delete(holder, node)
			}
		}
	}
	return out, sc.Err()
}

func (l *ledger) Certify(context.Context, backend.Node, string, string, time.Time) error { return nil }
func (l *ledger) Uncertify(context.Context, backend.Node) error                          { return nil }
func (l *ledger) SweepCertified(context.Context, backend.Vouched) error                  { return nil }

func (l *ledger) Describe(c *backend.CheckRun) ([]string, specs.Digest, error) {
	rendered, err := json.Marshal(c.LauncherEnv())
	return []string{"ledger:" + c.Run + "/" + c.Check.Name}, specs.DigestOf(rendered), err
}

func (l *ledger) Run(ctx context.Context, c *backend.CheckRun) (*backend.CheckReport, error) {
	if err := l.note("run %s %s", c.Run, c.Check.Name); err != nil {
		return nil, err
	}
	start := time.Now()
	select {
	case <-time.After(l.runFor):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	result, err := json.Marshal(map[string]string{"run": c.Run, "check": c.Check.Name, "nonce": c.Nonce, "verdict": "Pass", "summary": "ledger"})
	if err != nil {
		return nil, err
	}
	rep := &backend.CheckReport{StartedAt: start, EndedAt: time.Now()}
	for _, p := range c.Participants {
		rep.Participants = append(rep.Participants, backend.ParticipantReport{
			Node: p.Node, Identity: evidence.Identity{Node: p.Node, NodeUID: p.UID, Workload: "ledger:" + p.Node},
			Termination: specs.Termination{Started: true, Exited: true}, Result: result,
		})
	}
	return rep, nil
}

// Adopt finds nothing after a restart: the check is recorded as
// interrupted.
func (l *ledger) Adopt(context.Context, *backend.CheckRun) (*backend.CheckReport, bool, error) {
	return nil, false, nil
}

func (l *ledger) Cleanup(context.Context, *backend.CheckRun) error { return nil }

// runsExecuted counts the checks the ledger ran, by "run/check".
func (l *ledger) runsExecuted() (map[string]int, error) {
	b, err := os.ReadFile(filepath.Join(l.dir, "log"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for line := range strings.SplitSeq(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "run" {
			out[f[1]+"/"+f[2]]++
		}
	}
	return out, nil
}
