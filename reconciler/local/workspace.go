package local

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"

	"signet.dev/signet/specs"
)

// workspace is a check's temporary directory: top, owned by signet (0711
// when the check runs as another user, so that it may enter but not rename
// or replace work), and work inside it, owned by the check (0700), holding
// the script, the check's HOME and working directory, and its result file.
type workspace struct {
	top, work, script string
	// workFD is work opened once before the check starts, so that the result
	// is read from this directory whatever the check renames.
	workFD int
	// owner is the uid the result file must belong to: the check's.
	owner uint32
}

func newWorkspace(req Request) (ws *workspace, err error) {
	root := req.WorkRoot
	if root == "" {
		root = os.TempDir()
	}
	top, err := os.MkdirTemp(root, "signet-check-")
	if err != nil {
		return nil, err
	}
	ws = &workspace{top: top, work: filepath.Join(top, "work"), workFD: -1, owner: uint32(os.Geteuid())}
	if req.User != nil {
		ws.owner = req.User.UID
	}
	defer func() {
		if err != nil {
			_ = ws.remove()
		}
	}()
	if err := os.Mkdir(ws.work, 0o700); err != nil {
		return nil, err
	}
	ws.script = filepath.Join(ws.work, req.ScriptName)
	f, err := os.OpenFile(ws.script, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o500)
	if err != nil {
		return nil, err
	}
	_, err = f.Write(req.Script)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("write %s: %w", ws.script, err)
	}
	if u := req.User; u != nil {
		if err := os.Chmod(top, 0o711); err != nil {
			return nil, err
		}
		for _, p := range []string{ws.script, ws.work} {
			if err := os.Lchown(p, int(u.UID), int(u.GID)); err != nil {
				return nil, fmt.Errorf("hand %s to user %q: %w", p, u.Name, err)
			}
		}
	}
	ws.workFD, err = unix.Open(ws.work, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: ws.work, Err: err}
	}
	return ws, nil
}

// readResult reads the result file with a bound. It returns nil, "" when
// there is none, and a reason when the file is refused: a symlink, not a
// regular file, a file with other links or another owner than the check (a
// hard link to a file only signet may read would otherwise have signet read
// it on the check's behalf), or unreadable.
func (ws *workspace) readResult() (result []byte, refused string) {
	fd, err := unix.Openat(ws.workFD, resultFileName, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	switch {
	case errors.Is(err, unix.ENOENT):
		return nil, ""
	case errors.Is(err, unix.ELOOP):
		return nil, "result file is a symlink"
	case err != nil:
		return nil, "open result file: " + err.Error()
	}
	f := os.NewFile(uintptr(fd), filepath.Join(ws.work, resultFileName))
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err.Error()
	}
	if !fi.Mode().IsRegular() {
		return nil, "result file is not a regular file (" + fi.Mode().Type().String() + ")"
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil, "result file: no owner and link count"
	}
	if st.Nlink != 1 {
		return nil, fmt.Sprintf("result file has %d links, not 1", st.Nlink)
	}
	if st.Uid != ws.owner {
		return nil, fmt.Sprintf("result file is owned by uid %d, not the check's uid %d", st.Uid, ws.owner)
	}
	b, err := io.ReadAll(io.LimitReader(f, specs.MaxResultBytes+1))
	if err != nil {
		return nil, err.Error()
	}
	return b, ""
}

// remove deletes the workspace.
func (ws *workspace) remove() error {
	if ws.workFD >= 0 {
		_ = unix.Close(ws.workFD)
		ws.workFD = -1
	}
	if err := os.RemoveAll(ws.top); err == nil {
		return nil
	}
	// A check running as signet's own user may have left directories it
	// cannot be removed from (mode 0500, 0000): open them up and retry.
	_ = filepath.WalkDir(ws.top, func(p string, d fs.DirEntry, err error) error {
		if d != nil && d.IsDir() {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
	if err := os.RemoveAll(ws.top); err != nil {
		return fmt.Errorf("remove check directory: %w", err)
	}
	return nil
}
