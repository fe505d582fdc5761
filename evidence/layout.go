package evidence

import (
	"crypto/sha256"
	"encoding/hex"
	"path"
	"time"
)

// Shard is the two-hex-digit shard of a run ID: the first byte of
// sha256(runID). It spreads a day's runs over 256 directories so that no
// tree the store rewrites on an append grows past a few hundred entries.
func Shard(runID string) string {
	sum := sha256.Sum256([]byte(runID))
	return hex.EncodeToString(sum[:1])
}

// RunDir is the directory of one run on the evidence branch:
// runs/<cluster>/<YYYY>/<MM>/<DD>/<xx>/<run-id>, dated by the admission
// time in UTC (DESIGN §6).
func RunDir(cluster, runID string, admitted time.Time) string {
	return path.Join("runs", cluster, admitted.UTC().Format("2006/01/02"), Shard(runID), runID)
}

// IndexPath is the create-only index entry of a run:
// ids/<cluster>/<xx>/<run-id>. Its content is the run's directory
// (RunDir followed by a newline), so a run is found by ID without scanning
// dates, and a second admission of the same ID collides on this path.
func IndexPath(cluster, runID string) string {
	return path.Join("ids", cluster, Shard(runID), runID)
}

// IndexEntry returns the index file for a run admitted at admitted: its
// path is IndexPath and its content RunDir plus a newline.
func IndexEntry(cluster, runID string, admitted time.Time) File {
	return File{Path: IndexPath(cluster, runID), Data: []byte(RunDir(cluster, runID, admitted) + "\n")}
}
