package local

import (
	"crypto/rand"
	"encoding/hex"
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

// WorkRootMode is the mode of a work root that checks running as other
// users work under: they may enter it, never list, create or rename in it.
const WorkRootMode = 0o711

// EnsureWorkRoot creates the work root dir (mode WorkRootMode, owned by
// signet's user) when it does not exist, and verifies it as Run does
// before every check: see verifyWorkRoot.
func EnsureWorkRoot(dir string, isolated bool) error {
	if dir == "" || !filepath.IsAbs(dir) {
		return fmt.Errorf("work root %q: not an absolute path", dir)
	}
	if err := os.Mkdir(dir, WorkRootMode); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("create work root: %w", err)
	} else if err == nil {
		// Mkdir's mode passed through the umask.
		if err := os.Chmod(dir, WorkRootMode); err != nil {
			return fmt.Errorf("work root %s: %w", dir, err)
		}
	}
	fd, err := openWorkRoot(dir, isolated)
	if err != nil {
		return err
	}
	return unix.Close(fd)
}

// openWorkRoot opens dir and verifies it: a directory, not a symlink,
// owned by signet's user, not writable by group or others, mode exactly
// WorkRootMode when checks run as another user (isolated), and every
// directory above it owned by root or signet's user and writable by no one
// else unless sticky (/tmp), so that nobody else can create, replace or
// rename it. The descriptor it returns is what the workspace is built in.
func openWorkRoot(dir string, isolated bool) (int, error) {
	bad := func(format string, a ...any) (int, error) {
		return -1, fmt.Errorf("work root %s: %s; remove it and let signet create it, or name another (backends.local.workRoot)", dir, fmt.Sprintf(format, a...))
	}
	if !filepath.IsAbs(dir) {
		return -1, fmt.Errorf("work root %q: not an absolute path", dir)
	}
	euid := uint32(os.Geteuid())
	for p := filepath.Dir(dir); ; p = filepath.Dir(p) {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			return -1, fmt.Errorf("work root %s: %s: %w", dir, p, err)
		}
		if st.Uid != 0 && st.Uid != euid {
			return bad("its parent %s is owned by uid %d", p, st.Uid)
		}
		if st.Mode&0o022 != 0 && st.Mode&unix.S_ISVTX == 0 {
			return bad("its parent %s is writable by group or others (mode %04o) and not sticky", p, st.Mode&0o7777)
		}
		if p == "/" {
			break
		}
	}
	if fi, err := os.Lstat(dir); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		return bad("is a symlink")
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.ELOOP):
		return bad("is a symlink")
	case errors.Is(err, unix.ENOTDIR):
		return bad("is not a directory")
	case err != nil:
		return -1, fmt.Errorf("work root %s: %w", dir, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		_ = unix.Close(fd)
		return -1, fmt.Errorf("work root %s: %w", dir, err)
	}
	perm := st.Mode & 0o7777
	switch {
	case st.Uid != euid:
		_ = unix.Close(fd)
		return bad("is owned by uid %d, not signet's uid %d", st.Uid, euid)
	case isolated && perm != WorkRootMode:
		_ = unix.Close(fd)
		return bad("has mode %04o, not %04o", perm, WorkRootMode)
	case perm&0o022 != 0:
		_ = unix.Close(fd)
		return bad("is writable by group or others (mode %04o)", perm)
	}
	return fd, nil
}

// workspace is a check's temporary directory: top, owned by signet (0711
// when the check runs as another user, so that it may enter but not rename
// or replace work), and work inside it, owned by the check (0700), holding
// the script, the check's HOME and working directory, and its result file.
// Everything is created relative to directory descriptors, and the check
// is started in workFD, not in a path.
type workspace struct {
	top, work, script string
	// workFD is work, open before the check starts: the check's working
	// directory and script are reached through it, and its result is read
	// from it whatever the check renames.
	workFD int
	// owner is the uid the result file must belong to: the check's.
	owner uint32
}

func newWorkspace(req Request) (ws *workspace, err error) {
	rootFD, err := openWorkRoot(req.WorkRoot, req.User != nil)
	if err != nil {
		return nil, err
	}
	defer unix.Close(rootFD)
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	name := workspacePrefix + hex.EncodeToString(rnd[:])
	topMode := uint32(0o700)
	if req.User != nil {
		topMode = 0o711
	}
	if err := unix.Mkdirat(rootFD, name, topMode); err != nil {
		return nil, fmt.Errorf("create check directory in %s: %w", req.WorkRoot, err)
	}
	ws = &workspace{top: filepath.Join(req.WorkRoot, name), workFD: -1, owner: uint32(os.Geteuid())}
	ws.work = filepath.Join(ws.top, "work")
	ws.script = filepath.Join(ws.work, req.ScriptName)
	if req.User != nil {
		ws.owner = req.User.UID
	}
	defer func() {
		if err != nil {
			_ = ws.remove()
		}
	}()
	topFD, err := unix.Openat(rootFD, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: ws.top, Err: err}
	}
	defer unix.Close(topFD)
	// Mkdirat's mode passed through the umask.
	if err := unix.Fchmod(topFD, topMode); err != nil {
		return nil, &os.PathError{Op: "chmod", Path: ws.top, Err: err}
	}
	if err := unix.Mkdirat(topFD, "work", 0o700); err != nil {
		return nil, &os.PathError{Op: "mkdir", Path: ws.work, Err: err}
	}
	ws.workFD, err = unix.Openat(topFD, "work", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: ws.work, Err: err}
	}
	fd, err := unix.Openat(ws.workFD, req.ScriptName, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o500)
	if err != nil {
		return nil, &os.PathError{Op: "create", Path: ws.script, Err: err}
	}
	f := os.NewFile(uintptr(fd), ws.script)
	_, err = f.Write(req.Script)
	if err == nil && req.User != nil {
		err = f.Chown(int(req.User.UID), int(req.User.GID))
	}
	if err == nil {
		err = f.Chmod(0o500)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("write %s: %w", ws.script, err)
	}
	if u := req.User; u != nil {
		if err := unix.Fchown(ws.workFD, int(u.UID), int(u.GID)); err != nil {
			return nil, fmt.Errorf("hand %s to uid %d: %w", ws.work, u.UID, err)
		}
	}
	return ws, nil
}

// dir is the path through which a child process reaches workFD: the
// child changes into it before its exec, while it still holds signet's
// descriptors, so the directory is the one opened here whatever was
// renamed since (the descriptor is close-on-exec: the check never has it).
func (ws *workspace) dir() string { return fmt.Sprintf("/proc/self/fd/%d", ws.workFD) }

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

// remove deletes the workspace. Call it once no process of the check is
// alive; os.RemoveAll does not follow symlinks.
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
