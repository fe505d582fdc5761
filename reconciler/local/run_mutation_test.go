package local

// Tests written for `make mutations` (hack/mutations.yaml).

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDeadlineStopsGroupWithinGrace: a check whose whole group ignores TERM
// is killed at deadline + grace (DESIGN §7). Unlike TestRunMatrix, it does
// not hang when the kill never comes: it gives up after a bound, kills the
// group itself and fails.
func TestDeadlineStopsGroupWithinGrace(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pgid")
	req := request(t, fmt.Sprintf("trap '' TERM; echo $$ > %s; sleep 1000 & sleep 1000", pidFile))
	req.Deadline = time.Now().Add(time.Second)
	req.Grace = 500 * time.Millisecond
	type ran struct {
		rep *Report
		err error
	}
	done := make(chan ran, 1)
	go func() {
		rep, err := Run(context.Background(), req)
		done <- ran{rep, err}
	}()
	const bound = 30 * time.Second
	select {
	case r := <-done:
		require.NoError(t, r.err)
		assert.True(t, r.rep.Termination.DeadlineExceeded)
		assert.Equal(t, "SIGKILL", r.rep.Termination.Signal)
	case <-time.After(bound):
		if b, err := os.ReadFile(pidFile); err == nil {
			if pgid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pgid > 1 {
				_ = syscall.Kill(-pgid, syscall.SIGKILL)
			}
		}
		select {
		case <-done:
		case <-time.After(10 * time.Second):
		}
		t.Fatalf("deadline not enforced: the check's process group still ran %v after its deadline (grace %v)", bound, req.Grace)
	}
}
