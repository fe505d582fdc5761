package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"strconv"
	"time"

	"signet.dev/signet/evidence"
	"signet.dev/signet/internal/crash"
	"signet.dev/signet/reconciler"
	"signet.dev/signet/reconciler/backend"
	"signet.dev/signet/specs"
)

// Backend runs checks as child processes on this machine (DESIGN §7).
// Its only participant is this machine. A check's process dies with the
// reconciler, so after a restart there is never anything to adopt: an
// intent without evidence is recorded as interrupted.
type Backend struct {
	// UIDs gives each check a transient uid when signet runs as root; nil
	// otherwise (checks then run as signet's own user).
	UIDs *UIDPool
	// Cgroup is where each check gets a cgroup of its own
	// (FindCgroupParent); "" when the machine has no writable cgroup2.
	Cgroup string
	// Grace is the time between TERM and KILL.
	Grace time.Duration
	// WorkRoot is the parent of each check's temporary directory.
	WorkRoot string
	// MaxLogBytes bounds each kept log tail.
	MaxLogBytes int
}

var _ backend.Backend = (*Backend)(nil)

// NewBackend returns the local backend for cfg. When signet runs as
// root, each check runs as a transient uid of cfg.UIDRange.
func NewBackend(cfg reconciler.LocalConfig) (*Backend, error) {
	b := &Backend{Grace: time.Duration(cfg.Grace) * time.Second}
	if os.Geteuid() == 0 {
		r := cfg.UIDRange
		if r == "" {
			r = reconciler.DefaultLocalUIDRange
		}
		first, last, err := ParseUIDRange(r)
		if err == nil {
			b.UIDs, err = NewUIDPool(first, last)
		}
		if err != nil {
			return nil, fmt.Errorf("backends.local.uidRange: %w", err)
		}
	}
	return b, nil
}

// Describe names the process by run and check; the rendered object is the
// script digest and environment shape.
func (b *Backend) Describe(c *backend.CheckRun) ([]string, specs.Digest, error) {
	if len(c.Participants) != 1 {
		return nil, "", fmt.Errorf("local backend: %d participants, want 1", len(c.Participants))
	}
	var uids string
	if b.UIDs != nil {
		uids = b.UIDs.Range()
	}
	rendered, err := json.Marshal(struct {
		Script specs.Digest      `json:"script"`
		Env    map[string]string `json:"env"`
		UIDs   string            `json:"uidRange,omitempty"`
	}{c.ScriptDigest, c.Env(0), uids})
	if err != nil {
		return nil, "", err
	}
	return []string{"process:" + c.Run + "/" + strconv.Itoa(c.Index) + "-" + c.Check.Name}, specs.DigestOf(rendered), nil
}

// Run runs the check's script once and waits for it.
func (b *Backend) Run(ctx context.Context, c *backend.CheckRun) (*backend.CheckReport, error) {
	part := c.Participants[0]
	done := make(chan struct{})
	go func() {
		// A crash point while the check's process is alive.
		select {
		case <-time.After(200 * time.Millisecond):
			crash.Point("during-check")
		case <-done:
		}
	}()
	req := Request{
		Script: c.Script, ScriptName: path.Base(c.Check.Script), Env: c.Env(0), Deadline: c.Deadline,
		Grace: b.Grace, MaxLogBytes: b.MaxLogBytes, WorkRoot: b.WorkRoot, Cgroup: b.Cgroup,
	}
	var rep *Report
	var err error
	for attempt := 0; ; attempt++ {
		if b.UIDs != nil {
			uid, aerr := b.UIDs.Acquire()
			if aerr != nil {
				close(done)
				return nil, aerr
			}
			req.User = &User{UID: uid, GID: uid}
		}
		rep, err = Run(ctx, req)
		if b.UIDs != nil {
			// Run returns once no process of the uid is alive.
			b.UIDs.Release(req.User.UID)
		}
		// A uid something of a dead signet still runs as: take another.
		if !errors.Is(err, ErrUIDAlive) || attempt >= 3 {
			break
		}
	}
	close(done)
	if err != nil && rep == nil {
		return nil, err
	}
	pr := backend.ParticipantReport{
		Node: part.Node, Termination: rep.Termination, Result: rep.Result, Stdout: rep.Stdout, Stderr: rep.Stderr,
		Identity: evidence.Identity{Node: part.Node, NodeUID: part.UID},
	}
	if rep.Termination.Started && rep.PID > 0 {
		pr.Identity.Workload = "pid:" + strconv.Itoa(rep.PID)
		if req.User != nil {
			pr.Identity.Workload += " uid:" + strconv.FormatUint(uint64(req.User.UID), 10)
		}
	}
	return &backend.CheckReport{StartedAt: rep.Started, EndedAt: rep.Ended, Participants: []backend.ParticipantReport{pr}}, nil
}

// Adopt finds nothing: a local check's process group does not outlive the
// reconciler that started it.
func (b *Backend) Adopt(context.Context, *backend.CheckRun) (*backend.CheckReport, bool, error) {
	return nil, false, nil
}

// Cleanup has nothing left to remove: Run removes the check's temporary
// directory once it has read the result and logs into memory.
func (b *Backend) Cleanup(context.Context, *backend.CheckRun) error { return nil }
