package evidence

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	"signet.dev/signet/specs"
)

// FiringPath is the firing record of run, fired at firedAt, in cluster:
// firing.json at the top of its run directory (RunDir dated by the firing
// time).
func FiringPath(cluster, run string, firedAt time.Time) string {
	return path.Join(RunDir(cluster, run, firedAt), FiringFile)
}

// AppendFiring makes a firing durable exactly once: it appends the signed
// firing record (firing, the envelope of a Firing of run fired at firedAt),
// the run's index entry and others (files of the same run directory, the
// approval copies the firing binds) in one commit, with AppendAt's strict
// compare-and-swap on base, the tip the firing was decided from. When
// another writer recorded the same run first the error unwraps to
// ErrExists; when the branch merely moved, to ErrTipMoved: either way
// nothing was written and the caller decides again on the new tip.
func (s *Store) AppendFiring(ctx context.Context, base, cluster, run string, firedAt time.Time, firing []byte, others []File) (string, error) {
	dir := RunDir(cluster, run, firedAt)
	files := []File{IndexEntry(cluster, run, firedAt), {Path: path.Join(dir, FiringFile), Data: firing}}
	for _, f := range others {
		if !strings.HasPrefix(f.Path, dir+"/") {
			return "", fmt.Errorf("%w: %s is not in the firing's run directory %s", ErrInvalidPath, f.Path, dir)
		}
		files = append(files, f)
	}
	return s.AppendAt(ctx, fmt.Sprintf("%s: firing", run), base, files)
}

// NextFiringSequence returns the sequence number of the next firing of
// standing certification name in cluster, and the tip it read (the base
// for AppendFiring): one more than the highest firing whose index entry is
// on the tip the store last fetched or pushed, 1 when there is none.
// Sequences are dense (each firing is appended create-only as the next),
// so it finds the highest by doubling and then bisecting, O(log n)
// lookups, without listing the index's shards.
func (s *Store) NextFiringSequence(ctx context.Context, cluster, name string) (int64, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	exists := func(seq int64) (bool, error) {
		_, err := s.lookup(IndexPath(cluster, specs.FiringRunID(name, seq)))
		if errors.Is(err, ErrNotFound) {
			return false, nil
		}
		return err == nil, err
	}
	lo, hi := int64(0), int64(1) // lo exists (or is 0); hi is probed
	for {
		ok, err := exists(hi)
		if err != nil {
			return 0, "", err
		}
		if !ok {
			break
		}
		lo, hi = hi, hi*2
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		ok, err := exists(mid)
		if err != nil {
			return 0, "", err
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo + 1, hashText(s.tip), nil
}

// FiringRequest is the request a firing's admission records and runs: named
// by the firing's run, for the standing certification's profile, with
// exactly the chosen nodes in the decided order. It is derived, never
// approved on its own: the firing's approvals of the standing
// certification stand for it, and the audit holds the admission's request
// to this derivation.
func FiringRequest(f *Firing) specs.CertificationRequest {
	return specs.CertificationRequest{
		TypeMeta: specs.TypeMeta{APIVersion: specs.APIVersion, Kind: specs.KindRequest},
		Metadata: specs.ObjectMeta{Name: f.Run},
		Spec:     specs.RequestSpec{Profile: f.StandingObject.Spec.Profile, Nodes: f.Nodes()},
	}
}
