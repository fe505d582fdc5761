package procutil

import (
	"io"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTail(t *testing.T) {
	tests := []struct {
		name   string
		max    int
		writes []string
		want   string
	}{
		{"under the bound", 10, []string{"abc", "def"}, "abcdef"},
		{"exactly the bound", 6, []string{"abc", "def"}, "abcdef"},
		{"over the bound across writes", 4, []string{"abc", "def"}, "cdef"},
		{"one write over the bound", 4, []string{"abcdefgh"}, "efgh"},
		{"keeps nothing", 0, []string{"abc"}, ""},
		{"many small writes", 3, strings.Split("abcdefghij", ""), "hij"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tl := NewTail(tt.max)
			var total int64
			for _, w := range tt.writes {
				n, err := tl.Write([]byte(w))
				require.NoError(t, err)
				assert.Equal(t, len(w), n)
				total += int64(len(w))
			}
			assert.Equal(t, tt.want, string(tl.Bytes()))
			assert.Equal(t, total, tl.Total())
		})
	}
}

func TestStopGroup(t *testing.T) {
	tests := []struct {
		name       string
		script     string
		wantKilled bool
	}{
		{"TERM is enough", "sleep 1000 & echo ready; sleep 1000", false},
		{"ignores TERM", "trap '' TERM; sleep 1000 & echo ready; sleep 1000", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command("/bin/sh", "-c", tt.script)
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			// The script says "ready" once its trap is set and its child
			// forked: TERM sent before that would find nothing ignoring it.
			stdout, err := cmd.StdoutPipe()
			require.NoError(t, err)
			require.NoError(t, cmd.Start())
			ready := make([]byte, len("ready\n"))
			_, err = io.ReadFull(stdout, ready)
			require.NoError(t, err)
			require.Equal(t, "ready\n", string(ready))
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			pgid := cmd.Process.Pid
			require.True(t, GroupAlive(pgid))
			had, killed, err := StopGroup(pgid, time.Time{}, 300*time.Millisecond)
			require.NoError(t, err)
			assert.True(t, had)
			assert.Equal(t, tt.wantKilled, killed)
			assert.False(t, GroupAlive(pgid))
			<-done
			assert.False(t, Alive(pgid))
			had, _, err = StopGroup(pgid, time.Time{}, time.Second)
			assert.NoError(t, err)
			assert.False(t, had, "an empty group has nothing to stop")
		})
	}
}

func TestSignalGroupRefusesInit(t *testing.T) {
	assert.Error(t, SignalGroup(1, syscall.SIGKILL))
	assert.Error(t, SignalGroup(0, syscall.SIGKILL))
	assert.False(t, GroupAlive(0))
}
