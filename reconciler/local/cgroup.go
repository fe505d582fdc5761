package local

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// cgroupPrefix names the cgroups Run creates, one per check.
const cgroupPrefix = "signet-check-"

// FindCgroupParent returns the directory under which signet can create a
// cgroup per check: its own cgroup in a cgroup2 hierarchy, at
// /sys/fs/cgroup (a pure cgroup2 machine) or /sys/fs/cgroup/unified (a
// hybrid one), when signet may create a cgroup there. It returns "" and
// why not otherwise; checks are then contained by their uid alone.
func FindCgroupParent() (dir, why string) {
	own, err := ownCgroup2Path()
	if err != nil {
		return "", err.Error()
	}
	for _, mnt := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		var st unix.Statfs_t
		if err := unix.Statfs(mnt, &st); err != nil || st.Type != unix.CGROUP2_SUPER_MAGIC {
			continue
		}
		dir := filepath.Join(mnt, own)
		probe, err := os.MkdirTemp(dir, cgroupPrefix+"probe-")
		if err != nil {
			return "", fmt.Sprintf("cgroup2 at %s is not writable: %v", dir, err)
		}
		_, err = os.Stat(filepath.Join(probe, "cgroup.kill"))
		_ = unix.Rmdir(probe)
		if err != nil {
			return "", fmt.Sprintf("cgroup2 at %s has no cgroup.kill (kernel before 5.14)", dir)
		}
		return dir, ""
	}
	return "", "no cgroup2 hierarchy at /sys/fs/cgroup or /sys/fs/cgroup/unified"
}

// ownCgroup2Path is this process's cgroup2 path ("0::/path" in
// /proc/self/cgroup).
func ownCgroup2Path() (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	for line := range strings.Lines(string(b)) {
		if p, ok := strings.CutPrefix(strings.TrimSpace(line), "0::"); ok {
			if p == "" || !strings.HasPrefix(p, "/") || strings.Contains(p, "..") {
				return "", fmt.Errorf("/proc/self/cgroup: cgroup2 path %q", p)
			}
			return p, nil
		}
	}
	return "", errors.New("/proc/self/cgroup: no cgroup2 entry")
}

// cgroup is one check's cgroup.
type cgroup struct {
	dir string
	fd  int // the directory, open for clone3's CLONE_INTO_CGROUP
}

// newCgroup creates an empty cgroup for one check under parent.
func newCgroup(parent string) (*cgroup, error) {
	dir, err := os.MkdirTemp(parent, cgroupPrefix)
	if err != nil {
		return nil, fmt.Errorf("create check cgroup: %w", err)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		_ = os.Remove(dir)
		return nil, fmt.Errorf("open check cgroup: %w", err)
	}
	return &cgroup{dir: dir, fd: fd}, nil
}

// cgroupKillWait bounds how long kill waits for the cgroup to empty.
const cgroupKillWait = 5 * time.Second

// kill ends every process in the cgroup at once (cgroup.kill) and waits
// until it is empty. It reports whether it had processes.
func (c *cgroup) kill() (had bool, err error) {
	if populated, err := c.populated(); err != nil || !populated {
		return false, err
	}
	if err := os.WriteFile(filepath.Join(c.dir, "cgroup.kill"), []byte("1"), 0); err != nil {
		return true, fmt.Errorf("kill check cgroup: %w", err)
	}
	deadline := time.Now().Add(cgroupKillWait)
	for {
		populated, err := c.populated()
		if err != nil || !populated {
			return true, err
		}
		if time.Now().After(deadline) {
			return true, fmt.Errorf("check cgroup %s still populated %v after cgroup.kill", c.dir, cgroupKillWait)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// populated reads cgroup.events' populated key.
func (c *cgroup) populated() (bool, error) {
	b, err := os.ReadFile(filepath.Join(c.dir, "cgroup.events"))
	if err != nil {
		return false, fmt.Errorf("read check cgroup events: %w", err)
	}
	s := bufio.NewScanner(bytes.NewReader(b))
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "populated "); ok {
			return v != "0", nil
		}
	}
	return false, fmt.Errorf("%s/cgroup.events: no populated key", c.dir)
}

// peakMemory returns memory.peak in bytes, or -1 when the hierarchy has
// no memory controller for the cgroup.
func (c *cgroup) peakMemory() int64 {
	b, err := os.ReadFile(filepath.Join(c.dir, "memory.peak"))
	if err != nil {
		return -1
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// remove closes and removes the (empty) cgroup.
func (c *cgroup) remove() error {
	if c.fd >= 0 {
		_ = unix.Close(c.fd)
		c.fd = -1
	}
	if err := unix.Rmdir(c.dir); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("remove check cgroup %s: %w", c.dir, err)
	}
	return nil
}

// sweepCgroups kills and removes the check cgroups a signet that died left
// under parent.
func sweepCgroups(parent string) error {
	dirs, err := filepath.Glob(filepath.Join(parent, cgroupPrefix+"*"))
	if err != nil {
		return err
	}
	var errs []error
	for _, d := range dirs {
		c := &cgroup{dir: d, fd: -1}
		if _, err := c.kill(); errors.Is(err, fs.ErrNotExist) {
			continue
		} else if err != nil {
			errs = append(errs, err)
			continue
		}
		errs = append(errs, c.remove())
	}
	return errors.Join(errs...)
}
