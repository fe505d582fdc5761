// Package procutil holds the Linux process-group handling shared by signet's
// process runners: bounded output tails, liveness that does not count
// zombies, and stopping a whole process group with TERM, a grace period,
// then KILL.
//
// It never signals a process outside the group it is given, never reaps
// children it did not start, and does not follow processes that leave their
// group (setsid, setpgid): containing those needs a cgroup, which it does
// not manage.
package procutil

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Tail is an io.Writer that keeps only the last Max bytes written to it.
// It is safe for concurrent use. Its zero value keeps nothing.
type Tail struct {
	Max int

	mu    sync.Mutex
	buf   []byte
	total int64
}

// NewTail returns a Tail keeping the last max bytes.
func NewTail(max int) *Tail { return &Tail{Max: max} }

// Write keeps the tail of p and never fails.
func (t *Tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.total += int64(len(p))
	if t.Max <= 0 {
		return len(p), nil
	}
	if len(p) >= t.Max {
		t.buf = append(t.buf[:0], p[len(p)-t.Max:]...)
		return len(p), nil
	}
	if over := len(t.buf) + len(p) - t.Max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	t.buf = append(t.buf, p...)
	return len(p), nil
}

// Bytes returns a copy of the kept tail.
func (t *Tail) Bytes() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	return bytes.Clone(t.buf)
}

// Total returns how many bytes were written, kept or not.
func (t *Tail) Total() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.total
}

// Alive reports whether process pid exists and has not terminated: a zombie
// (exited, not yet reaped by its parent) is not alive.
func Alive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	st, err := readStat(pid)
	if err != nil {
		return !errors.Is(err, os.ErrNotExist)
	}
	return st.state != 'Z' && st.state != 'X'
}

// GroupAlive reports whether any live (non-zombie) process is in process
// group pgid.
func GroupAlive(pgid int) bool {
	if pgid <= 1 {
		return false
	}
	if err := syscall.Kill(-pgid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	// Members exist, but they may all be zombies whose parent does not reap
	// them (orphans under a PID 1 that never waits): look at each.
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return true
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := readStat(pid)
		if err != nil {
			continue
		}
		if st.pgrp == pgid && st.state != 'Z' && st.state != 'X' {
			return true
		}
	}
	return false
}

type procStat struct {
	state byte
	pgrp  int
}

// readStat parses the state and process group of /proc/<pid>/stat.
func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	// "pid (comm) state ppid pgrp ..."; comm may hold spaces and parens.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: no command field", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 3 || len(f[0]) != 1 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	pgrp, err := strconv.Atoi(f[2])
	if err != nil {
		return procStat{}, fmt.Errorf("/proc/%d/stat: pgrp %q: %w", pid, f[2], err)
	}
	return procStat{state: f[0][0], pgrp: pgrp}, nil
}

// SignalGroup sends sig to every process of group pgid. A group with no
// process left is not an error.
func SignalGroup(pgid int, sig syscall.Signal) error {
	if pgid <= 1 {
		return fmt.Errorf("refusing to signal process group %d", pgid)
	}
	if err := syscall.Kill(-pgid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal %v to process group %d: %w", sig, pgid, err)
	}
	return nil
}

// KillWait bounds how long StopGroup waits for a group to die after KILL.
const KillWait = 5 * time.Second

// StopGroup ends every process of group pgid: SIGTERM unless termSent is
// non-zero (TERM was already sent then), SIGKILL once grace has passed since
// the TERM, then waits up to KillWait for the group to be gone. It returns
// whether the group had live processes when called and whether KILL was
// sent; err is non-nil only when processes of the group are still alive.
func StopGroup(pgid int, termSent time.Time, grace time.Duration) (hadLive, killed bool, err error) {
	if !GroupAlive(pgid) {
		return false, false, nil
	}
	if termSent.IsZero() {
		if err := SignalGroup(pgid, syscall.SIGTERM); err != nil {
			return true, false, err
		}
		termSent = time.Now()
	}
	if waitGone(pgid, termSent.Add(grace)) {
		return true, false, nil
	}
	if err := SignalGroup(pgid, syscall.SIGKILL); err != nil {
		return true, true, err
	}
	if waitGone(pgid, time.Now().Add(KillWait)) {
		return true, true, nil
	}
	return true, true, fmt.Errorf("process group %d still has live processes %v after SIGKILL", pgid, KillWait)
}

// waitGone polls until group pgid has no live process (true) or until is
// reached (false).
func waitGone(pgid int, until time.Time) bool {
	d := time.Millisecond
	for {
		if !GroupAlive(pgid) {
			return true
		}
		left := time.Until(until)
		if left <= 0 {
			return false
		}
		time.Sleep(min(d, left))
		d = min(2*d, 50*time.Millisecond)
	}
}

// CloseOnExecInherited marks every descriptor above 2 of this process
// close-on-exec, so that no child process gets one: Go opens its own
// descriptors close-on-exec, but one this process inherited without the
// flag (a shell's `7<key`) would otherwise reach every child, readable by
// whatever it runs. Descriptors a child is meant to get (os/exec's
// ExtraFiles) are duplicated into it after the fork and are unaffected.
func CloseOnExecInherited() error {
	err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
	if err == nil {
		return nil
	}
	// Kernels before 5.11: set the flag on each open descriptor.
	ents, rerr := os.ReadDir("/proc/self/fd")
	if rerr != nil {
		return fmt.Errorf("close-on-exec inherited descriptors: %w (close_range: %v)", rerr, err)
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd <= 2 {
			continue
		}
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC); err != nil && !errors.Is(err, unix.EBADF) {
			return fmt.Errorf("close-on-exec descriptor %d: %w", fd, err)
		}
	}
	return nil
}
