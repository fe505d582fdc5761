package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"signet.dev/signet/internal/procutil"
	"signet.dev/signet/specs"
)

// SafePATH is the only PATH a check gets.
const SafePATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Defaults for zero Request fields.
const (
	DefaultGrace       = 10 * time.Second
	DefaultMaxLogBytes = 64 << 10
)

// resultFileName is the name of the result file inside the check's working
// directory.
const resultFileName = "result.json"

// pipeDrain bounds how long Run keeps reading stdout and stderr once no
// process of the group is alive (a process that left the group may hold a
// pipe open forever).
const pipeDrain = time.Second

// ErrInvalidRequest is wrapped by Run's error for a Request it refuses
// without touching the machine: a caller bug, never retried.
var ErrInvalidRequest = errors.New("invalid local check request")

// StartError is Run's error when the check's process could not be created:
// the temporary directory, the script file, or the exec itself (a script
// without a valid interpreter line, ENOEXEC, a missing interpreter, a user
// that cannot be switched to) failed.
type StartError struct {
	Err error
}

func (e *StartError) Error() string { return "start local check: " + e.Err.Error() }

// Unwrap returns the underlying error.
func (e *StartError) Unwrap() error { return e.Err }

// User is the transient identity a check runs as when signet runs as
// root: a uid from a UIDPool and the gid of the same number.
type User struct {
	UID, GID uint32
}

// String names the user for messages.
func (u *User) String() string { return fmt.Sprintf("uid %d gid %d", u.UID, u.GID) }

// Request is one execution of one check on this machine.
type Request struct {
	// Script is the verified script bytes, written to a fresh temporary
	// directory with mode 0500 and executed directly (its #! line decides
	// the interpreter).
	Script []byte
	// ScriptName is the file name for Script: one path element.
	ScriptName string
	// Env is exactly DESIGN §4's variables (specs.Env*), without
	// SIGNET_RESULT_FILE: every one but SIGNET_STAGE_NAME is required.
	// Run adds PATH (SafePATH), HOME (the working directory) and
	// SIGNET_RESULT_FILE, and nothing else.
	Env map[string]string
	// Deadline is the wall-clock deadline: then the group gets SIGTERM,
	// Grace, then SIGKILL.
	Deadline time.Time
	// Grace is the time between SIGTERM and SIGKILL; DefaultGrace when zero.
	Grace time.Duration
	// MaxLogBytes is how much of the end of stdout and of stderr is kept;
	// DefaultMaxLogBytes when zero.
	MaxLogBytes int
	// User, when non-nil, is the unprivileged identity the check runs as
	// (signet must then run as root); its working directory is owned by it,
	// mode 0700, and it gets no supplementary groups. Run refuses to start
	// while any process of its uid is alive, and when the check is over
	// kills every process of the uid that is left: give each check a uid
	// of its own (UIDPool), never one that other software uses.
	User *User
	// WorkRoot is the parent of the per-check temporary directory: an
	// absolute path, verified before every check (see EnsureWorkRoot). With
	// User set, every directory down to WorkRoot must be searchable by that
	// user. The per-check directory is removed when Run returns.
	WorkRoot string
	// Cgroup, when set, is a cgroup2 directory (FindCgroupParent) under
	// which the check gets a cgroup of its own, which it is started in
	// (clone3's CLONE_INTO_CGROUP) and which is killed as a whole
	// (cgroup.kill) when the check is over.
	Cgroup string
}

// Report is what Run observed.
type Report struct {
	Termination specs.Termination
	// Result is the result file's content, nil when the check left none.
	// A file longer than specs.MaxResultBytes is kept as its first
	// MaxResultBytes+1 bytes, which specs.ParseResult refuses as oversized.
	Result []byte
	// Stdout and Stderr are the last MaxLogBytes of each; StdoutTotal and
	// StderrTotal count every byte written.
	Stdout, Stderr           []byte
	StdoutTotal, StderrTotal int64
	// PID is the check's process id, which is also its process group id.
	PID            int
	Started, Ended time.Time
	// Cleanup is the error removing the temporary directory, if any.
	Cleanup error
}

// requiredEnv are the DESIGN §4 variables every check gets from the caller.
var requiredEnv = []string{
	specs.EnvRunID, specs.EnvCheckName, specs.EnvCheckIndex, specs.EnvNonce,
	specs.EnvParticipantIndex, specs.EnvParticipants, specs.EnvGPUCount,
}

func (r *Request) validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidRequest, fmt.Sprintf(format, a...))
	}
	if r.ScriptName == "" || r.ScriptName == "." || r.ScriptName == ".." ||
		strings.ContainsAny(r.ScriptName, "/\x00") || r.ScriptName == resultFileName {
		return bad("script name %q is not a single file name other than %q", r.ScriptName, resultFileName)
	}
	if r.Deadline.IsZero() {
		return bad("no deadline")
	}
	if r.Grace < 0 || r.MaxLogBytes < 0 {
		return bad("negative grace %v or max log bytes %d", r.Grace, r.MaxLogBytes)
	}
	if r.User != nil && (r.User.UID == 0 || r.User.GID == 0) {
		return bad("user %s is privileged", r.User)
	}
	if !filepath.IsAbs(r.WorkRoot) {
		return bad("work root %q is not an absolute path", r.WorkRoot)
	}
	allowed := map[string]bool{specs.EnvStageName: true}
	for _, k := range requiredEnv {
		allowed[k] = true
		if _, ok := r.Env[k]; !ok {
			return bad("env: %s is missing", k)
		}
	}
	for k, v := range r.Env {
		if !allowed[k] {
			return bad("env: %s is not a DESIGN §4 variable", k)
		}
		if v == "" || strings.ContainsRune(v, 0) {
			return bad("env: %s=%q is empty or holds NUL", k, v)
		}
	}
	return nil
}

// Run executes req's script and returns how it ended. It always returns a
// non-nil Report. The error is non-nil only when the process was not
// started (Termination.Started is false then): it wraps ErrInvalidRequest
// for a refused request, or is a *StartError. A ctx already done or a
// deadline already passed starts nothing and is no error (Termination says
// Canceled or DeadlineExceeded).
//
// Once started, the process runs until it exits, until req.Deadline
// (Termination.DeadlineExceeded), or until ctx is done (Termination.Canceled);
// in the last two cases its group gets SIGTERM, req.Grace, then SIGKILL.
// After the main process exits, any process left in its group gets the same,
// then every process left in the check's cgroup (req.Cgroup) and of its uid
// (req.User) is killed. Run returns only when none of them is alive (or,
// for one the kernel cannot kill, after a bound, noted in
// Termination.Reason).
func Run(ctx context.Context, req Request) (*Report, error) {
	rep := &Report{}
	notStarted := func(err error) (*Report, error) {
		rep.Termination.Reason = err.Error()
		return rep, err
	}
	if err := req.validate(); err != nil {
		return notStarted(err)
	}
	if req.Grace == 0 {
		req.Grace = DefaultGrace
	}
	if req.MaxLogBytes == 0 {
		req.MaxLogBytes = DefaultMaxLogBytes
	}
	if err := ctx.Err(); err != nil {
		rep.Termination = specs.Termination{Canceled: true, Reason: "canceled before start"}
		return rep, nil
	}
	if !time.Now().Before(req.Deadline) {
		rep.Termination = specs.Termination{DeadlineExceeded: true, Reason: "deadline " + req.Deadline.UTC().Format(time.RFC3339) + " passed before start"}
		return rep, nil
	}

	if u := req.User; u != nil {
		// Another check of this uid, or what it left, could read this
		// one's environment and result file or trace it.
		if alive, err := uidAlive(u.UID); err != nil || alive {
			if err == nil {
				err = fmt.Errorf("uid %d has live processes: %w", u.UID, ErrUIDAlive)
			}
			return notStarted(&StartError{Err: err})
		}
	}
	ws, err := newWorkspace(req)
	if err != nil {
		return notStarted(&StartError{Err: err})
	}
	defer func() { rep.Cleanup = errors.Join(rep.Cleanup, ws.remove()) }()
	var cg *cgroup
	if req.Cgroup != "" {
		if cg, err = newCgroup(req.Cgroup); err != nil {
			return notStarted(&StartError{Err: err})
		}
		defer func() { rep.Cleanup = errors.Join(rep.Cleanup, cg.remove()) }()
	}
	// No descriptor of signet's but the pipes below reaches the check.
	if err := procutil.CloseOnExecInherited(); err != nil {
		return notStarted(&StartError{Err: err})
	}

	stdoutR, stdoutW, err := os.Pipe()
	if err != nil {
		return notStarted(&StartError{Err: err})
	}
	defer stdoutR.Close()
	stderrR, stderrW, err := os.Pipe()
	if err != nil {
		stdoutW.Close()
		return notStarted(&StartError{Err: err})
	}
	defer stderrR.Close()

	env := make([]string, 0, len(req.Env)+3)
	for _, k := range slices.Sorted(maps.Keys(req.Env)) {
		env = append(env, k+"="+req.Env[k])
	}
	env = append(env, "PATH="+SafePATH, "HOME="+ws.work, specs.EnvResultFile+"="+filepath.Join(ws.work, resultFileName))

	attr := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if req.User != nil {
		attr.Credential = &syscall.Credential{Uid: req.User.UID, Gid: req.User.GID, Groups: []uint32{}}
	}
	if cg != nil {
		attr.UseCgroupFD, attr.CgroupFD = true, cg.fd
	}
	// The kernel sends Pdeathsig when the thread that forked exits, not the
	// process: keep this goroutine on that thread until the check is over.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	// The child changes into the workspace through its descriptor and
	// executes the script relative to it (workspace.dir).
	self := "./" + req.ScriptName
	var cmd *exec.Cmd
	for attempt := 0; ; attempt++ {
		cmd = &exec.Cmd{
			Path:        self,
			Args:        []string{self},
			Env:         env,
			Dir:         ws.dir(),
			Stdout:      stdoutW,
			Stderr:      stderrW,
			SysProcAttr: attr,
		}
		err = cmd.Start()
		// A concurrent fork elsewhere in the process may briefly hold the
		// script's write descriptor (golang/go#22315): retry ETXTBSY.
		if !errors.Is(err, syscall.ETXTBSY) || attempt >= 50 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	stdoutW.Close()
	stderrW.Close()
	if err != nil {
		return notStarted(&StartError{Err: fmt.Errorf("exec %s: %w", req.ScriptName, err)})
	}
	rep.Started = time.Now()
	rep.PID = cmd.Process.Pid

	stdout, stderr := procutil.NewTail(req.MaxLogBytes), procutil.NewTail(req.MaxLogBytes)
	copied := make(chan struct{}, 2)
	for _, p := range []struct {
		dst *procutil.Tail
		src *os.File
	}{{stdout, stdoutR}, {stderr, stderrR}} {
		go func() {
			_, _ = io.Copy(p.dst, p.src)
			copied <- struct{}{}
		}()
	}

	term, notes := supervise(ctx, cmd, req)
	notes = append(notes, contain(req, cg, &term)...)
	rep.Ended = time.Now()

	// Every writer of the group is dead; a process that left the group may
	// still hold a pipe, so stop reading after pipeDrain.
	drain := time.After(pipeDrain)
	for n := 0; n < 2; {
		select {
		case <-copied:
			n++
		case <-drain:
			_ = stdoutR.SetReadDeadline(time.Now())
			_ = stderrR.SetReadDeadline(time.Now())
			drain = nil
			notes = append(notes, "stopped reading output held open by a process outside the group")
		}
	}
	rep.Stdout, rep.StdoutTotal = stdout.Bytes(), stdout.Total()
	rep.Stderr, rep.StderrTotal = stderr.Bytes(), stderr.Total()

	rep.Result, term.ResultRefused = ws.readResult()
	term.Reason = strings.Join(notes, "; ")
	rep.Termination = term
	return rep, nil
}

// contain ends whatever the check left behind outside its process group,
// once its group is gone: every process of its cgroup (cgroup.kill), which
// no process of the check can leave (it may not write any cgroup), or,
// without a cgroup, when it ran as a User, every process of its uid. It
// records the cgroup's peak memory where the hierarchy accounts memory.
func contain(req Request, cg *cgroup, term *specs.Termination) (notes []string) {
	if cg != nil {
		had, err := cg.kill()
		if had {
			notes = append(notes, "ended the processes left in the check's cgroup (cgroup.kill)")
		}
		if err != nil {
			notes = append(notes, err.Error())
		}
		if peak := cg.peakMemory(); peak >= 0 {
			term.PeakMemoryBytes = peak
		}
		return notes
	}
	if req.User == nil {
		return notes
	}
	alive, err := uidAlive(req.User.UID)
	if err != nil {
		return append(notes, err.Error())
	}
	if !alive {
		return notes
	}
	if err := killUID(req.User.UID); err != nil {
		return append(notes, err.Error())
	}
	return append(notes, fmt.Sprintf("ended the processes of uid %d left after the check", req.User.UID))
}

// supervise waits for the started cmd, stopping its group at req.Deadline
// or when ctx is done, then stops whatever is left of the group. It returns
// the termination (without ResultRefused and Reason) and notes on what
// happened, once no process of the group is alive.
func supervise(ctx context.Context, cmd *exec.Cmd, req Request) (term specs.Termination, notes []string) {
	pgid := cmd.Process.Pid
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()

	term.Started = true
	var termSent time.Time
	var killTimer <-chan time.Time
	deadline := time.NewTimer(time.Until(req.Deadline))
	defer deadline.Stop()
	done := ctx.Done()
	stop := func(why string) {
		deadline.Stop()
		done = nil
		if err := procutil.SignalGroup(pgid, syscall.SIGTERM); err != nil {
			notes = append(notes, err.Error())
		}
		termSent = time.Now()
		killTimer = time.After(req.Grace)
		notes = append(notes, "sent SIGTERM to the process group "+why)
	}
wait:
	for {
		select {
		case <-waited:
			break wait
		case <-deadline.C:
			term.DeadlineExceeded = true
			stop("at deadline " + req.Deadline.UTC().Format(time.RFC3339))
		case <-done:
			term.Canceled = true
			stop("on cancel")
		case <-killTimer:
			killTimer = nil
			if err := procutil.SignalGroup(pgid, syscall.SIGKILL); err != nil {
				notes = append(notes, err.Error())
			}
			notes = append(notes, "sent SIGKILL to the process group after "+req.Grace.String()+" grace")
		}
	}
	if st, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok {
		switch {
		case st.Exited():
			term.Exited, term.ExitCode = true, st.ExitStatus()
			notes = append(notes, fmt.Sprintf("exited with code %d", term.ExitCode))
		case st.Signaled():
			term.Signal = unix.SignalName(st.Signal())
			if term.Signal == "" {
				term.Signal = "signal " + strconv.Itoa(int(st.Signal()))
			}
			notes = append(notes, "killed by signal "+term.Signal)
		}
	}
	// The main process is gone; no other process of its group may outlive
	// it. A TERM already sent keeps its grace period.
	if had, killed, err := procutil.StopGroup(pgid, termSent, req.Grace); had {
		note := "stopped the processes left in its group with SIGTERM"
		if killed {
			note += " and SIGKILL"
		}
		notes = append(notes, note)
		if err != nil {
			notes = append(notes, err.Error())
		}
	}
	return term, notes
}
