package local

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"signet.dev/signet/evidence"
	"signet.dev/signet/reconciler"
	"signet.dev/signet/reconciler/backend"
	"signet.dev/signet/specs"
)

// FamilyName is the name the local family registers under.
const FamilyName = "local"

func init() { reconciler.RegisterFamily(FamilyName, NewFamily) }

// NewFamily is the reconciler.FamilyFactory of the local family: this
// machine as a one-node Fleet and the local backend, when the
// configuration's backends.local is enabled (nil otherwise). Checks work
// under a root of their own in the system temporary directory, created and
// verified by EnsureWorkRoot, never under stateDir (mode 0700), which the
// check's user must not reach. When signet runs as root, each check runs
// as a transient uid (backends.local.uidRange) in a cgroup of its own
// where the machine has a writable cgroup2 hierarchy. What a previous
// signet left (it died mid-check: processes, directories, cgroups,
// processes of the transient uids) is ended and removed first.
func NewFamily(_ context.Context, env reconciler.FamilyEnv) (*backend.Family, error) {
	cfg := env.Config
	if !cfg.Backends.Local.Enabled {
		return nil, nil
	}
	lb, err := NewBackend(cfg.Backends.Local)
	if err != nil {
		return nil, err
	}
	lb.WorkRoot = cfg.Backends.Local.WorkRoot
	if lb.WorkRoot == "" {
		lb.WorkRoot = filepath.Join(os.TempDir(), "signet-"+cfg.Cluster)
	}
	if err := EnsureWorkRoot(lb.WorkRoot, lb.UIDs != nil); err != nil {
		return nil, fmt.Errorf("backends.local.workRoot: %w", err)
	}
	if killed, err := Sweep(lb.WorkRoot); err != nil {
		env.Logger.Warn("sweeping the local work root", "error", err)
	} else if len(killed) > 0 {
		env.Logger.Warn("ended processes left by a previous signet", "pids", killed)
	}
	if lb.UIDs != nil {
		cg, why := FindCgroupParent()
		if cg != "" {
			// The cgroups of this work root's checks, apart from those of
			// any other signet in the same cgroup: the sweep ends only
			// what this signet left.
			sum := sha256.Sum256([]byte(lb.WorkRoot))
			dir := filepath.Join(cg, "signet-"+hex.EncodeToString(sum[:6]))
			if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return nil, fmt.Errorf("check cgroups: %w", err)
			}
			if err := sweepCgroups(dir); err != nil {
				return nil, fmt.Errorf("sweeping check cgroups: %w", err)
			}
			lb.Cgroup = dir
		}
		uids, err := lb.UIDs.Sweep()
		if err != nil {
			return nil, fmt.Errorf("sweeping transient uids %s: %w", lb.UIDs.Range(), err)
		}
		if len(uids) > 0 {
			env.Logger.Warn("ended processes of transient check uids left by a previous signet", "uids", uids)
		}
		env.Logger.Info("local checks run as transient uids", "uidRange", lb.UIDs.Range(), "cgroup", lb.Cgroup, "noCgroupBecause", why)
	}
	return FamilyOf(lb), nil
}

// FamilyOf is the local family with backend b: this machine, under its
// host name, as the one node.
func FamilyOf(b *Backend) *backend.Family {
	host, _ := os.Hostname()
	return &backend.Family{
		Name:     FamilyName,
		Fleet:    Fleet{Hostname: host},
		Backends: map[specs.Backend]backend.Backend{specs.BackendLocal: b},
	}
}

// Fleet is this machine as the one node of the local family. Its only
// reservation is the reconciler's in-process hold: a local check's
// process dies with the reconciler, so nothing outlives it to repair, and
// there is nowhere to put certification labels.
type Fleet struct {
	backend.Unreserved
	// Hostname names this machine in the evidence.
	Hostname string
}

var _ backend.Fleet = Fleet{}

// Select returns this machine when the request names it, by its host name
// or as "localhost", and nothing else; the error names the accepted names.
func (f Fleet) Select(_ context.Context, _ *specs.CertificationProfile, req *specs.CertificationRequest) ([]string, error) {
	if len(req.Spec.Nodes) != 1 || (req.Spec.Nodes[0] != "localhost" && req.Spec.Nodes[0] != f.Hostname) {
		return nil, fmt.Errorf("spec.nodes: a local profile's only participant is this machine, named %q or \"localhost\"; got %q", f.Hostname, req.Spec.Nodes)
	}
	return []string{f.Hostname}, nil
}

// Pool implements backend.Pooler: this machine, when nodes names it (by
// its host name or as "localhost"); a local pool has no selector.
func (f Fleet) Pool(ctx context.Context, _ *specs.CertificationProfile, nodes []string, selector map[string]string) ([]backend.PoolMember, error) {
	if len(selector) > 0 || len(nodes) != 1 || (nodes[0] != "localhost" && nodes[0] != f.Hostname) {
		return nil, fmt.Errorf("a local pool is this machine, named %q or \"localhost\" in spec.nodes; got nodes %q, selector %v", f.Hostname, nodes, selector)
	}
	snap, err := Snapshot(ctx, "", "")
	if err != nil {
		return nil, err
	}
	snap.Name = f.Hostname
	return []backend.PoolMember{{Identity: *snap}}, nil
}

var _ backend.Pooler = Fleet{}

// Snapshot returns this machine's identity for run.
func (Fleet) Snapshot(ctx context.Context, cluster, run, _ string) (*evidence.NodeSnapshot, error) {
	return Snapshot(ctx, cluster, run)
}
