package audit

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"

	"signet.dev/signet/evidence"
	"signet.dev/signet/signing"
)

// ErrRunNotFound means the run-ID index of the branch has no such run.
var ErrRunNotFound = errors.New("evidence: run not found")

// ErrAmbiguousRun means the run ID is used in several clusters and no
// cluster was given.
var ErrAmbiguousRun = errors.New("evidence: run ID used in several clusters")

// VerifyOptions says which run to verify.
type VerifyOptions struct {
	Repo   string
	Auth   evidence.Auth
	Branch string
	// Cluster is the run's cluster; when empty, every cluster of the
	// index is looked at and the run ID must be unique among them.
	Cluster string
	Run     string
	Policy  *signing.TrustPolicy
	Now     time.Time
	Grace   time.Duration
	// Observe, when set, is called once with the run's verified
	// documents (see Options.Observe); the report's Findings say whether
	// the run is clean.
	Observe func(*RunDocuments)
}

// Verify checks one run the way Branch checks every run: it finds the run
// through the ids/ index (never by scanning dates), replays only the
// history of the run's directory since its admission (commit signatures
// included), verifies every document and binding, the run's lifecycle,
// its approvals and its receipt's links into the cluster's chain. Forks
// and gaps elsewhere in the chain, and documents copied byte for byte
// from other runs, need the whole branch: Branch finds those. Findings are
// in the report; an error means the run or branch could not be read
// (ErrRunNotFound, ErrAmbiguousRun, ErrNoBranch, I/O).
func Verify(ctx context.Context, opts VerifyOptions) (*RunReport, error) {
	if opts.Policy == nil {
		return nil, errors.New("evidence: audit.VerifyOptions.Policy is required")
	}
	if opts.Run == "" {
		return nil, errors.New("evidence: audit.VerifyOptions.Run is required")
	}
	withDefaults(&opts.Branch, &opts.Now, &opts.Grace)
	rd, err := openBranch(ctx, opts.Repo, opts.Auth, opts.Branch)
	if err != nil {
		return nil, err
	}
	defer rd.close()
	root, err := rootTree(rd)
	if err != nil {
		return nil, err
	}
	cluster, idx, err := findIndex(rd, root, opts.Cluster, opts.Run)
	if err != nil {
		return nil, err
	}
	a := newAuditor(rd, rd.display, rd.branch, Options{Policy: opts.Policy, Now: opts.Now, Grace: opts.Grace, Workers: runtime.GOMAXPROCS(0)})
	a.bindings = true
	data, err := readRaw(rd, plumbing.BlobObject, idx.Hash)
	if err != nil {
		return nil, err
	}
	ip := evidence.IndexPath(cluster, opts.Run)
	dir, ok := evidence.IndexTarget(cluster, opts.Run, data)
	if !ok {
		rep := &RunReport{Cluster: cluster, Run: opts.Run, Phase: evidence.PhaseUnknown}
		rep.Findings = []Finding{{Rule: RuleIndex, Cluster: cluster, Run: opts.Run, Path: ip, Message: fmt.Sprintf("content %q is not the directory of run %s of cluster %s", data, opts.Run, cluster)}}
		return rep, nil
	}
	a.pool = newVerifyPool(a.rd, a.policy, a.opts.Workers)
	defer a.pool.close()
	if err := a.history(ctx, dir); err != nil {
		return nil, err
	}
	if err := a.replay(ctx, dir); err != nil {
		return nil, err
	}
	for p, f := range a.files {
		if f.doc != nil && f.doc.err != nil {
			a.add(Finding{Rule: f.doc.rule, Cluster: cluster, Run: opts.Run, Path: p, Commit: f.commit.hash.String(), Message: f.doc.err.Error()})
		}
		for _, v := range a.versions[p] {
			if v != f && v.doc != nil && v.doc.err != nil {
				a.add(Finding{Rule: v.doc.rule, Cluster: cluster, Run: opts.Run, Path: p, Commit: v.commit.hash.String(), Message: v.doc.err.Error()})
			}
		}
	}
	r := newRunAudit(a, cluster, opts.Run, dir, map[string]*fileRec{})
	for p, f := range a.files {
		r.files[strings.TrimPrefix(p, dir+"/")] = f
	}
	r.check()
	if opts.Observe != nil {
		opts.Observe(r.documents())
	}
	a.findings = append(a.findings, r.findings...)
	if r.receipt != nil {
		a.verifyChainLinks(r, root)
	}
	r.finish()
	rep := r.report
	rep.Findings = dedupe(a.findings)
	return &rep, nil
}

// findIndex finds the index entry of run, in cluster or, when cluster is
// empty, in whichever cluster holds it.
func findIndex(rd *openedBranch, root plumbing.Hash, cluster, run string) (string, *object.TreeEntry, error) {
	clusters := []string{cluster}
	if cluster == "" {
		clusters = nil
		ids, err := lookupTree(rd, root, "ids")
		if err != nil {
			return "", nil, err
		}
		if !ids.IsZero() {
			entries, err := readTree(rd, ids)
			if err != nil {
				return "", nil, fmt.Errorf("evidence: could not read ids/: %w", err)
			}
			for _, e := range entries {
				if e.Mode == filemode.Dir {
					clusters = append(clusters, e.Name)
				}
			}
		}
	}
	var found []string
	var entry *object.TreeEntry
	for _, c := range clusters {
		e, err := lookupEntry(rd, root, evidence.IndexPath(c, run))
		if err != nil {
			return "", nil, err
		}
		if e != nil && e.Mode != filemode.Dir {
			found, entry = append(found, c), e
		}
	}
	switch len(found) {
	case 0:
		where := "any cluster"
		if cluster != "" {
			where = "cluster " + cluster
		}
		return "", nil, fmt.Errorf("%w: no index entry for run %q in %s of %s branch %s", ErrRunNotFound, run, where, rd.display, rd.branch)
	case 1:
		return found[0], entry, nil
	}
	sort.Strings(found)
	return "", nil, fmt.Errorf("%w: run %q is in clusters %s: name one", ErrAmbiguousRun, run, strings.Join(found, ", "))
}
