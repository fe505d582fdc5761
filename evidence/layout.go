package evidence

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"
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
// runs/<cluster>/<YYYY>/<MM>/<DD>/<xx>/<run-id>, dated in UTC by the
// admission time, or for a standing certification's run by its firing time
// (the firing comes first and its admission joins it there) (DESIGN §6).
func RunDir(cluster, runID string, admitted time.Time) string {
	return path.Join("runs", cluster, admitted.UTC().Format(dateLayout), Shard(runID), runID)
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

// IndexDir is the directory of cluster's run-ID index: ids/<cluster>.
func IndexDir(cluster string) string { return path.Join("ids", cluster) }

// ChainDir is the directory of cluster's receipt chain: chain/<cluster>.
func ChainDir(cluster string) string { return path.Join("chain", cluster) }

// ChainPath is the create-only link of receipt number seq in cluster's
// receipt chain: chain/<cluster>/<seq/10000>/<seq>. Receipts are written
// one at a time, so creating link seq+1 is what serializes two writers.
func ChainPath(cluster string, seq int64) string {
	return path.Join("chain", cluster, fmt.Sprintf("%08d", seq/10000), fmt.Sprintf("%012d", seq))
}

// File names inside a run directory.
const (
	FiringFile    = "firing.json"
	AdmissionFile = "admission.json"
	EvidenceFile  = "evidence.json"
	CancelFile    = "cancel.json"
	ReleaseFile   = "release.json"
	ReceiptFile   = "receipt.json"
)

// NodePath is the node snapshot file of node in runDir.
func NodePath(runDir, node string) string { return path.Join(runDir, "nodes", node+".json") }

// ApprovalPath is the copy of an approval relied on at admission (or by a
// cancel or release) in runDir. Names are chosen by the caller and unique.
func ApprovalPath(runDir, name string) string { return path.Join(runDir, "approvals", name) }

// CheckIntentPath is the intent of check index (0-based) named name.
func CheckIntentPath(runDir string, index int, name string) string {
	return path.Join(runDir, "checks", fmt.Sprintf("%02d-%s.intent.json", index, name))
}

// CheckPath is the check evidence of check index named name.
func CheckPath(runDir string, index int, name string) string {
	return path.Join(runDir, "checks", fmt.Sprintf("%02d-%s.json", index, name))
}

// LogPath is the bounded log tail of one participant of one check.
func LogPath(runDir string, index int, check, participant, stream string) string {
	return path.Join(runDir, "logs", fmt.Sprintf("%02d-%s", index, check), participant+"."+stream+".log")
}

// FileKind is what a path of the evidence layout names.
type FileKind int

// File kinds of the layout (DESIGN §6). KindRunFile is a file inside a run
// directory that the layout does not name: ParsePath reads it so that a
// reader can group it with its run and report it.
const (
	KindNone        FileKind = iota
	KindIndex                // ids/<cluster>/<xx>/<run>
	KindChainLink            // chain/<cluster>/<seq/10000, 8 digits>/<seq, 12 digits>
	KindRunDir               // runs/<cluster>/<YYYY>/<MM>/<DD>/<xx>/<run> (a directory)
	KindFiring               // <run dir>/firing.json (a standing certification's run)
	KindAdmission            // <run dir>/admission.json
	KindNode                 // <run dir>/nodes/<node>.json
	KindApproval             // <run dir>/approvals/<name>
	KindCheckIntent          // <run dir>/checks/<NN>-<check>.intent.json
	KindCheck                // <run dir>/checks/<NN>-<check>.json
	KindLog                  // <run dir>/logs/<NN>-<check>/<participant>.<stream>.log
	KindEvidence             // <run dir>/evidence.json
	KindCancel               // <run dir>/cancel.json
	KindRelease              // <run dir>/release.json
	KindReceipt              // <run dir>/receipt.json
	KindRunFile              // any other file below a run directory
)

// topFiles are the documents at the top of a run directory, by file name.
var topFiles = map[string]FileKind{
	FiringFile:    KindFiring,
	AdmissionFile: KindAdmission,
	EvidenceFile:  KindEvidence,
	CancelFile:    KindCancel,
	ReleaseFile:   KindRelease,
	ReceiptFile:   KindReceipt,
}

// RunPath is a path of the evidence layout, parsed. Which fields are set
// depends on Kind: Cluster always; Shard and Run for the index and
// everything under runs/; Date (YYYY/MM/DD) under runs/; Index and Check
// for intents, check evidence and logs; Node for a snapshot and for the
// participant of a log, Stream for a log; Name for an approval (its file
// name) and for a KindRunFile (its path below the run directory); Seq for
// a chain link.
type RunPath struct {
	Kind    FileKind
	Cluster string
	Date    string
	Shard   string
	Run     string
	Index   int
	Check   string
	Node    string
	Stream  string
	Name    string
	Seq     int64
}

// ParsePath reads p as a path of the evidence layout. It returns false for
// anything the layout builders (RunDir, IndexPath, ChainPath, NodePath,
// ApprovalPath, CheckIntentPath, CheckPath, LogPath and the run files)
// cannot have written; for every path it accepts, String returns p. It
// does not check that the shard is the run's (Shard) or that names are DNS
// labels other than check names: readers report those on their own.
func ParsePath(p string) (RunPath, bool) {
	parts := strings.Split(p, "/")
	for _, s := range parts {
		if s == "" || s == "." || s == ".." {
			return RunPath{}, false
		}
	}
	switch {
	case parts[0] == "ids" && len(parts) == 4 && isShard(parts[2]):
		return RunPath{Kind: KindIndex, Cluster: parts[1], Shard: parts[2], Run: parts[3]}, true
	case parts[0] == "chain" && len(parts) == 4 && isDigits(parts[2], 8) && isDigits(parts[3], 12):
		seq, _ := strconv.ParseInt(parts[3], 10, 64)
		rp := RunPath{Kind: KindChainLink, Cluster: parts[1], Seq: seq}
		return rp, rp.String() == p
	case parts[0] == "runs" && len(parts) >= 7 && isShard(parts[5]):
		// The date and a run file's name are p's own bytes.
		from := len("runs/") + len(parts[1]) + 1
		date := p[from : from+len(parts[2])+len(parts[3])+len(parts[4])+2]
		if _, err := time.Parse(dateLayout, date); err != nil {
			return RunPath{}, false
		}
		rp := RunPath{Kind: KindRunDir, Cluster: parts[1], Date: date, Shard: parts[5], Run: parts[6]}
		if len(parts) > 7 {
			_, rel := SplitRunFile(p)
			rp.parseRunFile(rel, parts[7:])
		}
		return rp, true
	}
	return RunPath{}, false
}

// parseRunFile sets the kind and fields of the file name (rest, split at
// "/") of a run directory.
func (rp *RunPath) parseRunFile(name string, rest []string) {
	rp.Kind, rp.Name = KindRunFile, name
	switch {
	case len(rest) == 1 && topFiles[rest[0]] != KindNone:
		rp.Kind, rp.Name = topFiles[rest[0]], ""
	case len(rest) == 2 && rest[0] == "nodes" && len(rest[1]) > len(".json") && strings.HasSuffix(rest[1], ".json"):
		rp.Kind, rp.Name, rp.Node = KindNode, "", strings.TrimSuffix(rest[1], ".json")
	case len(rest) == 2 && rest[0] == "approvals":
		rp.Kind, rp.Name = KindApproval, rest[1]
	case len(rest) == 2 && rest[0] == "checks" && strings.HasSuffix(rest[1], ".json"):
		base, intent := strings.CutSuffix(strings.TrimSuffix(rest[1], ".json"), ".intent")
		if i, check, ok := parseCheckDir(base); ok {
			rp.Kind, rp.Name, rp.Index, rp.Check = KindCheck, "", i, check
			if intent {
				rp.Kind = KindCheckIntent
			}
		}
	case len(rest) == 3 && rest[0] == "logs" && strings.HasSuffix(rest[2], ".log"):
		i, check, ok := parseCheckDir(rest[1])
		dot := strings.LastIndexByte(strings.TrimSuffix(rest[2], ".log"), '.')
		if ok && dot > 0 && dot < len(rest[2])-len(".log")-1 {
			rp.Kind, rp.Name, rp.Index, rp.Check = KindLog, "", i, check
			rp.Node, rp.Stream = rest[2][:dot], rest[2][dot+1:len(rest[2])-len(".log")]
		}
	}
}

// parseCheckDir reads "<NN>-<check>" as CheckPath and LogPath write it:
// the index in at least two digits without another leading zero, the
// check name a DNS label.
func parseCheckDir(s string) (int, string, bool) {
	num, check, ok := strings.Cut(s, "-")
	if !ok || len(num) < 2 || len(num) > 9 || !isDigits(num, len(num)) || !dnsLabelRE.MatchString(check) {
		return 0, "", false
	}
	i, _ := strconv.Atoi(num)
	return i, check, fmt.Sprintf("%02d", i) == num
}

const dateLayout = "2006/01/02"

var dnsLabelRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// IsDNSLabel reports whether s may name a cluster or a check in the
// layout: a DNS label (RFC 1123, lowercase, at most 63 characters).
func IsDNSLabel(s string) bool { return dnsLabelRE.MatchString(s) }

func isShard(s string) bool {
	return len(s) == 2 && strings.Trim(s, "0123456789abcdef") == ""
}

func isDigits(s string, n int) bool {
	return len(s) == n && strings.Trim(s, "0123456789") == ""
}

// Dir is the run directory of a path under runs/ ("" for others).
func (rp RunPath) Dir() string {
	if rp.Kind < KindRunDir {
		return ""
	}
	return path.Join("runs", rp.Cluster, rp.Date, rp.Shard, rp.Run)
}

// SplitRunFile splits p, a path ParsePath reads as a file inside a run
// directory (InRun), into the run directory and the file's path relative
// to it, Dir and Rel of what ParsePath returns, without building them.
func SplitRunFile(p string) (dir, rel string) {
	n := 0
	for i := range len(p) {
		if p[i] == '/' {
			if n++; n == 7 {
				return p[:i], p[i+1:]
			}
		}
	}
	return "", ""
}

// InRun reports whether the path is a file inside a run directory.
func (rp RunPath) InRun() bool { return rp.Kind > KindRunDir }

// Rel is the path of a file of a run directory relative to it.
func (rp RunPath) Rel() string { return strings.TrimPrefix(rp.String(), rp.Dir()+"/") }

// String builds the path with the layout's builders: the inverse of
// ParsePath.
func (rp RunPath) String() string {
	dir := rp.Dir()
	switch rp.Kind {
	case KindIndex:
		return path.Join("ids", rp.Cluster, rp.Shard, rp.Run)
	case KindChainLink:
		return ChainPath(rp.Cluster, rp.Seq)
	case KindRunDir:
		return dir
	case KindNode:
		return NodePath(dir, rp.Node)
	case KindApproval:
		return ApprovalPath(dir, rp.Name)
	case KindCheckIntent:
		return CheckIntentPath(dir, rp.Index, rp.Check)
	case KindCheck:
		return CheckPath(dir, rp.Index, rp.Check)
	case KindLog:
		return LogPath(dir, rp.Index, rp.Check, rp.Node, rp.Stream)
	case KindRunFile:
		return path.Join(dir, rp.Name)
	}
	for name, k := range topFiles {
		if k == rp.Kind {
			return path.Join(dir, name)
		}
	}
	return ""
}

// IndexTarget returns the run directory that the content data of run's
// index entry in cluster names (IndexEntry), and false when data is not
// exactly one directory of that run of that cluster and a newline.
func IndexTarget(cluster, run string, data []byte) (string, bool) {
	dir, ok := strings.CutSuffix(string(data), "\n")
	rp, parsed := ParsePath(dir)
	return dir, ok && parsed && rp.Kind == KindRunDir && rp.Cluster == cluster && rp.Run == run
}
