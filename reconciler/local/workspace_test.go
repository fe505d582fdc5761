package local

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestReadResultOwner asserts a result file that the check's user does not
// own is not read: signet must never read a file on a check's behalf.
func TestReadResultOwner(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, resultFileName), []byte(`{"secret":"root's"}`), 0o600))
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	require.NoError(t, err)
	t.Cleanup(func() { _ = unix.Close(fd) })

	ws := &workspace{work: dir, workFD: fd, owner: 65534}
	b, refused := ws.readResult()
	assert.Nil(t, b)
	assert.Equal(t, "result file is owned by uid 0, not the check's uid 65534", refused)

	ws.owner = uint32(os.Geteuid())
	b, refused = ws.readResult()
	assert.Empty(t, refused)
	assert.Equal(t, `{"secret":"root's"}`, string(b))
}
