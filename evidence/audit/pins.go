package audit

import (
	"bufio"
	"bytes"
	"fmt"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"signet.dev/signet/evidence"
)

// MaxPinsBytes bounds a pins file.
const MaxPinsBytes = 1 << 20

// Pin is a tip to pin: the branch, its tip commit and that commit's
// committer time. Report.Pin holds it after a clean audit; written by
// Pin.String it is one line of a pins file.
type Pin struct {
	Branch    string    `json:"branch"`
	Commit    string    `json:"commit"`
	Committed time.Time `json:"committed"`
}

// String is the pin as a line of a pins file: "<branch> <commit> <time>".
func (p Pin) String() string {
	return p.Branch + " " + p.Commit + " " + p.Committed.UTC().Format(time.RFC3339)
}

// ParsePins reads a pins file: one pinned tip per line, "<branch>
// <commit>" with an optional RFC 3339 time after it (what Pin.String
// writes; the time is for the reader, the commit is what is checked).
// Blank lines and lines starting with '#' are skipped. A branch named
// twice, an invalid branch name, a commit that is not 40 lowercase hex
// or a bad time is an error naming the line. It returns commits by
// branch.
func ParsePins(name string, b []byte) (map[string]string, error) {
	if len(b) > MaxPinsBytes {
		return nil, fmt.Errorf("%s: %d bytes is over the %d byte bound", name, len(b), MaxPinsBytes)
	}
	pins := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), MaxPinsBytes)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 || len(f) > 3 {
			return nil, fmt.Errorf("%s:%d: want \"<branch> <commit> [<time>]\", got %d fields", name, n, len(f))
		}
		branch, commit := f[0], f[1]
		if ref := plumbing.NewBranchReferenceName(branch); ref.Validate() != nil || strings.HasPrefix(branch, "refs/") {
			return nil, fmt.Errorf("%s:%d: %q is not a branch name", name, n, branch)
		}
		if !evidence.IsCommitHash(commit) {
			return nil, fmt.Errorf("%s:%d: commit %q is not 40 lowercase hex", name, n, commit)
		}
		if len(f) == 3 {
			if _, err := time.Parse(time.RFC3339, f[2]); err != nil {
				return nil, fmt.Errorf("%s:%d: time %q is not RFC 3339", name, n, f[2])
			}
		}
		if _, dup := pins[branch]; dup {
			return nil, fmt.Errorf("%s:%d: branch %s is pinned twice", name, n, branch)
		}
		pins[branch] = commit
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return pins, nil
}
