package local

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// maxUIDRange bounds a range's size; validating it reads the account
// databases once per uid.
const maxUIDRange = 1 << 16

// UIDLockDir is where a UIDPool takes a lock file per uid it hands out,
// so that two signets (or two test binaries) on one machine never hand
// out the same uid at once, the way systemd keeps its DynamicUser locks
// in /run/systemd/dynamic-uid. The kernel drops a lock with the process
// that held it.
var UIDLockDir = "/run/signet/uid-locks"

// UIDPool hands out transient uids to checks, the way systemd's
// DynamicUser allocates service users: each check runs as a uid (and the
// gid of the same number) that no account in the user or group database
// has, that no other live check holds (in this process, or in another
// holding the uid's lock in UIDLockDir), and that no live process has.
// Uids are handed out round-robin, so a released one is reused as late as
// possible.
type UIDPool struct {
	first, last uint32

	mu   sync.Mutex
	busy map[uint32]*os.File // held uids and their locks
	next uint32
}

// ParseUIDRange parses "FIRST-LAST" (inclusive).
func ParseUIDRange(s string) (first, last uint32, err error) {
	a, b, ok := strings.Cut(s, "-")
	f, err1 := strconv.ParseUint(strings.TrimSpace(a), 10, 32)
	l, err2 := strconv.ParseUint(strings.TrimSpace(b), 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("uid range %q: want FIRST-LAST, two decimal uids", s)
	}
	return uint32(f), uint32(l), nil
}

// NewUIDPool returns the pool of uids first..last. It refuses a range that
// is empty, holds uid 0, 65534 (nobody) or 65535 and 2^32-1 (the
// kernel's and 16-bit systems' "no uid"), is larger than 65536 uids, or
// overlaps a user or group of the system's account databases.
func NewUIDPool(first, last uint32) (*UIDPool, error) {
	switch {
	case first == 0 || last < first:
		return nil, fmt.Errorf("uid range %d-%d: want 0 < FIRST <= LAST", first, last)
	case uint64(last)-uint64(first)+1 > maxUIDRange:
		return nil, fmt.Errorf("uid range %d-%d: %d uids, more than %d", first, last, uint64(last)-uint64(first)+1, maxUIDRange)
	case last == ^uint32(0):
		return nil, fmt.Errorf("uid range %d-%d: holds %d, the kernel's \"no uid\"", first, last, last)
	}
	for _, reserved := range []uint32{65534, 65535} {
		if first <= reserved && reserved <= last {
			return nil, fmt.Errorf("uid range %d-%d: holds %d (nobody or the 16-bit \"no uid\")", first, last, reserved)
		}
	}
	for id := first; ; id++ {
		s := strconv.FormatUint(uint64(id), 10)
		if u, err := user.LookupId(s); err == nil {
			return nil, fmt.Errorf("uid range %d-%d: uid %d is the account %q; transient check uids must belong to no account", first, last, id, u.Username)
		}
		if g, err := user.LookupGroupId(s); err == nil {
			return nil, fmt.Errorf("uid range %d-%d: gid %d is the group %q; transient check gids must belong to no group", first, last, id, g.Name)
		}
		if id == last {
			break
		}
	}
	if err := os.MkdirAll(UIDLockDir, 0o755); err != nil {
		return nil, fmt.Errorf("uid locks: %w", err)
	}
	fd, err := openWorkRoot(UIDLockDir, false)
	if err != nil {
		return nil, fmt.Errorf("uid locks: %w", err)
	}
	_ = unix.Close(fd)
	return &UIDPool{first: first, last: last, busy: map[uint32]*os.File{}, next: first}, nil
}

// Range returns the pool's range as "FIRST-LAST".
func (p *UIDPool) Range() string { return fmt.Sprintf("%d-%d", p.first, p.last) }

// ErrNoUID means every uid of the pool is held by a live check.
var ErrNoUID = errors.New("no free transient uid")

// ErrUIDAlive is wrapped by Run's StartError when a process of the
// request's uid is alive.
var ErrUIDAlive = errors.New("a check does not start while any process of its uid is alive")

// Acquire returns a uid no live check holds, and marks it held until
// Release. Run refuses it while a process of it is alive (ErrUIDAlive):
// release it and acquire another.
func (p *UIDPool) Acquire() (uint32, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := uint64(p.last) - uint64(p.first) + 1
	for range n {
		uid := p.next
		if p.next == p.last {
			p.next = p.first
		} else {
			p.next++
		}
		lock, err := p.take(uid)
		if err != nil {
			return 0, err
		}
		if lock == nil {
			continue
		}
		p.busy[uid] = lock
		return uid, nil
	}
	return 0, fmt.Errorf("%w in %d-%d: %d held by running checks, the rest held by other processes", ErrNoUID, p.first, p.last, len(p.busy))
}

// Release returns uid to the pool. Call it only once no process of uid is
// alive.
func (p *UIDPool) Release(uid uint32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if lock := p.busy[uid]; lock != nil {
		_ = lock.Close() // drops the flock
	}
	delete(p.busy, uid)
}

// take locks uid for a check; nil, nil when a live check of this pool or
// another process holds it. The caller holds p.mu.
func (p *UIDPool) take(uid uint32) (*os.File, error) {
	if p.busy[uid] != nil {
		return nil, nil
	}
	return lockUID(uid)
}

// lockUID takes uid's lock file without waiting; nil, nil when another
// process holds it.
func lockUID(uid uint32) (*os.File, error) {
	name := UIDLockDir + "/" + strconv.FormatUint(uint64(uid), 10)
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock uid %d: %w", uid, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, nil
		}
		return nil, fmt.Errorf("lock uid %d: %w", uid, err)
	}
	return f, nil
}

// Sweep kills every process of every uid of the pool that no live check
// holds (neither of this pool nor of another process holding the uid's
// lock): what a signet that died during a check left behind. It returns
// the uids that had processes.
func (p *UIDPool) Sweep() (swept []uint32, err error) {
	live, err := liveUIDs()
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	for uid := range live {
		if uid < p.first || uid > p.last || p.busy[uid] != nil {
			continue
		}
		lock, err := lockUID(uid)
		if err != nil || lock == nil {
			errs = append(errs, err)
			continue
		}
		swept = append(swept, uid)
		errs = append(errs, killUID(uid))
		_ = lock.Close()
	}
	return swept, errors.Join(errs...)
}

// liveUIDs returns every uid that a live (non-zombie) process has as its
// real, effective, saved or filesystem uid, read from /proc/<pid>/status,
// which every process may read, whatever the target's dumpability.
func liveUIDs() (map[uint32]bool, error) {
	uids := map[uint32]bool{}
	err := scanUIDs(func(ids [4]uint32) bool {
		for _, id := range ids {
			uids[id] = true
		}
		return true
	})
	return uids, err
}

// scanUIDs calls fn with the four uids of every live (non-zombie)
// process until fn returns false. It runs before every check that has a
// uid, so it reads each status file with one read into one buffer and
// parses bytes: about a third of the time of os.ReadFile and strings
// (some 13 µs a process on a loaded two-core machine).
func scanUIDs(fn func(ids [4]uint32) bool) error {
	dir, err := os.Open("/proc")
	if err != nil {
		return fmt.Errorf("list processes: %w", err)
	}
	defer dir.Close()
	names, err := dir.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("list processes: %w", err)
	}
	buf := make([]byte, 4096)
	path := make([]byte, 0, 32)
	for _, name := range names {
		if name == "" || name[0] < '0' || name[0] > '9' {
			continue
		}
		path = append(append(append(path[:0], "/proc/"...), name...), "/status"...)
		ids, alive := procUIDs(string(path), buf)
		if alive && !fn(ids) {
			return nil
		}
	}
	return nil
}

// procUIDs reads a process's state and four uids from its status file
// (path), using buf; alive is false for a zombie, a process that is gone,
// or a status file without a state and four uids.
func procUIDs(path string, buf []byte) (ids [4]uint32, alive bool) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return ids, false
	}
	defer unix.Close(fd)
	// State and Uid are within the first lines: read until both are in.
	n := 0
	for n < len(buf) {
		m, err := unix.Read(fd, buf[n:])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || m <= 0 {
			break
		}
		n += m
		if bytes.Contains(buf[:n], []byte("\nGid:")) {
			break
		}
	}
	b := buf[:n]
	state, ok := statusField(b, "State:")
	if !ok || len(state) == 0 || state[0] == 'Z' || state[0] == 'X' {
		return ids, false
	}
	uid, ok := statusField(b, "Uid:")
	if !ok {
		return ids, false
	}
	for i := range ids {
		uid = bytes.TrimLeft(uid, " \t")
		end := bytes.IndexAny(uid, " \t")
		if end < 0 {
			end = len(uid)
		}
		v, err := strconv.ParseUint(string(uid[:end]), 10, 32)
		if err != nil {
			return ids, false
		}
		ids[i], uid = uint32(v), uid[end:]
	}
	return ids, true
}

// statusField returns the value of the status line that begins with key,
// without its leading blanks.
func statusField(b []byte, key string) ([]byte, bool) {
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		if v, ok := bytes.CutPrefix(line, []byte(key)); ok {
			return bytes.TrimLeft(v, " \t"), true
		}
	}
	return nil, false
}

// uidAlive reports whether any live process has uid.
func uidAlive(uid uint32) (alive bool, err error) {
	err = scanUIDs(func(ids [4]uint32) bool {
		alive = slices.Contains(ids[:], uid)
		return !alive
	})
	return alive, err
}

// uidKillWait bounds how long killUID waits for the uid's processes to die.
const uidKillWait = 5 * time.Second

// killUID sends SIGKILL to every process of uid and waits until none is
// alive. It signals as the uid itself, from a shell started as uid:
// kill(-1, SIGKILL) reaches exactly the processes whose real or saved uid
// is uid (never signet, never another check), in one pass over the
// process table that a fork cannot escape (the kernel refuses to finish a
// fork whose parent has a fatal signal pending). signet's own threads
// never take the uid: a process of it could then signal signet.
func killUID(uid uint32) error {
	if uid == 0 {
		return errors.New("refusing to kill every process of uid 0")
	}
	deadline := time.Now().Add(uidKillWait)
	for {
		// The shell may itself be killed by a process of uid: the loop
		// looks again.
		_ = killAllAs(uid)
		alive, err := uidAlive(uid)
		if err != nil {
			return err
		}
		if !alive {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes of uid %d still alive %v after SIGKILL", uid, uidKillWait)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// killAllAs runs kill(-1, SIGKILL) as uid, from /bin/sh's kill builtin.
func killAllAs(uid uint32) error {
	cmd := exec.Command("/bin/sh", "-c", "kill -KILL -1 2>/dev/null; exit 0")
	cmd.Env = []string{"PATH=" + SafePATH}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{}},
		Setpgid:    true,
		Pdeathsig:  syscall.SIGKILL,
	}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("kill processes of uid %d: %w", uid, err)
	}
	return nil
}
