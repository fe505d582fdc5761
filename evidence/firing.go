package evidence

import (
	"context"
	"fmt"
	"path"
	"strings"
	"time"
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
