package local

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"signet.dev/signet/internal/procutil"
	"signet.dev/signet/specs"
)

// workspacePrefix begins the names of the per-check directories Run
// creates; workspacePattern matches them.
const (
	workspacePrefix  = "signet-check-"
	workspacePattern = workspacePrefix + "*"
)

// sweepRounds bounds how often Sweep rescans for processes forked while it
// was killing.
const sweepRounds = 10

// Sweep ends what a signet that died during a check left under workRoot
// (os.TempDir() when empty): every process whose working directory is in a
// per-check directory there, or whose environment names a result file
// there, gets SIGKILL, and the directories are removed. It returns the pids
// it killed. Call it when signet starts, before any Run under workRoot: it
// kills the checks of a Run in progress too, so workRoot must be this
// signet's alone (not a /tmp that another signet also runs checks in).
func Sweep(workRoot string) (killed []int, err error) {
	if workRoot == "" {
		workRoot = os.TempDir()
	}
	dirs, err := filepath.Glob(filepath.Join(workRoot, workspacePattern))
	if err != nil || len(dirs) == 0 {
		return nil, err
	}
	for round := 0; ; round++ {
		pids := stragglers(dirs)
		if len(pids) == 0 {
			break
		}
		if round == sweepRounds {
			return killed, fmt.Errorf("sweep %s: processes %v still alive after %d rounds", workRoot, pids, sweepRounds)
		}
		for _, pid := range pids {
			if err := syscall.Kill(pid, syscall.SIGKILL); err == nil {
				killed = append(killed, pid)
			} else if !errors.Is(err, syscall.ESRCH) {
				return killed, fmt.Errorf("sweep %s: kill %d: %w", workRoot, pid, err)
			}
		}
		waitDead(pids)
	}
	var errs []error
	for _, d := range dirs {
		errs = append(errs, (&workspace{top: d, workFD: -1}).remove())
	}
	return killed, errors.Join(errs...)
}

// stragglers returns the live processes that belong to one of dirs.
func stragglers(dirs []string) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self || !procAlive(pid) {
			continue
		}
		if belongs(pid, dirs) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func belongs(pid int, dirs []string) bool {
	proc := "/proc/" + strconv.Itoa(pid)
	cwd, _ := os.Readlink(proc + "/cwd")
	env, _ := os.ReadFile(proc + "/environ")
	for _, d := range dirs {
		if cwd == d || strings.HasPrefix(cwd, d+"/") {
			return true
		}
		if bytes.Contains(env, []byte(specs.EnvResultFile+"="+d+"/")) {
			return true
		}
	}
	return false
}

// procAlive and waitDead use procutil's liveness, which does not count
// zombies.
func procAlive(pid int) bool { return procutil.Alive(pid) }

func waitDead(pids []int) {
	for range 100 {
		alive := false
		for _, p := range pids {
			if procutil.Alive(p) {
				alive = true
				break
			}
		}
		if !alive {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}
