package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"signet.dev/signet/internal/procutil"
	"signet.dev/signet/specs"
)

// ExitExecFailed is signet exec's exit code when it ran no script, or could
// not run it: a digest mismatch, an unreadable script, a bad flag, a
// failed start. Its termination message then says why, prefixed with
// RefusalPrefix.
const ExitExecFailed = 3

// RefusalPrefix starts every termination message signet exec writes
// instead of a result (no result, oversized, a symlink, a digest
// mismatch). It is not JSON, so the reconciler can never take such a
// message for a result; the pod backend reports it as a refused result.
const RefusalPrefix = "signet exec: "

// maxScriptBytes bounds the script signet exec reads: a ConfigMap holds at
// most 1 MiB.
const maxScriptBytes = 1 << 20

// groupGrace is how long the processes left in the script's group get
// between SIGTERM and SIGKILL once the script itself has exited.
const groupGrace = 2 * time.Second

// ExecOptions configures Exec.
type ExecOptions struct {
	// Script is the script file (in the pod, in the ConfigMap volume).
	Script string
	// Digest is the script's expected digest ("sha256:…").
	Digest string
	// TerminationLog receives the result, or a refusal line.
	TerminationLog string
	// WorkDir is the parent of the private temporary directory; os.TempDir()
	// when empty. In a pod it is an emptyDir, so any image and any uid work.
	WorkDir string
	// Stdout and Stderr receive the script's output (os.Stdout, os.Stderr
	// when nil); Stderr also gets signet exec's own messages.
	Stdout, Stderr io.Writer
	// Env is the environment the script inherits, SIGNET_RESULT_FILE
	// replaced; os.Environ() when nil. In a pod it holds DESIGN §4's other
	// variables, set on the container.
	Env []string
	// Signals delivers the signals to forward to the script's process
	// group; when nil, Exec subscribes to SIGTERM and SIGINT itself for as
	// long as it runs.
	Signals <-chan os.Signal
}

// Exec is `signet exec`, the entrypoint of a check container (DESIGN §4,
// §7). It reads the script (at most 1 MiB), verifies its digest and, on a
// mismatch, writes why to the termination log and to stderr and returns
// ExitExecFailed without running anything. Otherwise it copies the
// verified bytes into a fresh private directory under WorkDir (mode 0500)
// and executes that copy directly, in its own process group, with
// SIGNET_RESULT_FILE in that directory and that directory as its working
// directory: what runs is exactly the bytes verified, and the script's #!
// line chooses its interpreter, as with the local backend. SIGTERM and
// SIGINT (or ctx's end, as one SIGTERM) are forwarded to the script's
// group; once the script exits, what is left of its group is stopped.
//
// It then reads the result file without following a symlink, a regular
// file of at most specs.MaxResultBytes, and writes those bytes to the
// termination log; a missing, empty, oversized or non-regular result
// writes a RefusalPrefix line instead, so the reconciler sees Error and
// never a Pass. It returns the script's exit code, or 128+n when signal n
// ended it.
func Exec(ctx context.Context, o ExecOptions) int {
	if o.Stdout == nil {
		o.Stdout = os.Stdout
	}
	if o.Stderr == nil {
		o.Stderr = os.Stderr
	}
	if o.Env == nil {
		o.Env = os.Environ()
	}
	if o.WorkDir == "" {
		o.WorkDir = os.TempDir()
	}
	refuse := func(format string, a ...any) int {
		msg := RefusalPrefix + fmt.Sprintf(format, a...)
		fmt.Fprintln(o.Stderr, msg)
		if err := writeTerminationLog(o.TerminationLog, []byte(msg+"\n")); err != nil {
			fmt.Fprintln(o.Stderr, RefusalPrefix+err.Error())
		}
		return ExitExecFailed
	}
	if o.TerminationLog == "" {
		return refuse("no termination log given")
	}
	want, err := specs.ParseDigest(o.Digest)
	if err != nil {
		return refuse("--digest: %v", err)
	}
	script, err := readBounded(o.Script, maxScriptBytes)
	if err != nil {
		return refuse("script %s: %v", o.Script, err)
	}
	if got := specs.DigestOf(script); got != want {
		return refuse("script %s: digest %s does not match the expected %s; nothing was run", o.Script, got, want)
	}

	dir, err := os.MkdirTemp(o.WorkDir, "signet-exec-")
	if err != nil {
		return refuse("work directory: %v", err)
	}
	defer os.RemoveAll(dir)
	scriptPath := filepath.Join(dir, "script", filepath.Base(o.Script))
	workDir := filepath.Join(dir, "work")
	resultPath := filepath.Join(workDir, "result.json")
	for _, d := range []string{filepath.Dir(scriptPath), workDir} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return refuse("work directory: %v", err)
		}
	}
	if err := os.WriteFile(scriptPath, script, 0o500); err != nil {
		return refuse("copy the verified script: %v", err)
	}

	env := make([]string, 0, len(o.Env)+1)
	for _, kv := range o.Env {
		if !strings.HasPrefix(kv, specs.EnvResultFile+"=") {
			env = append(env, kv)
		}
	}
	env = append(env, specs.EnvResultFile+"="+resultPath)

	sigs := o.Signals
	if sigs == nil {
		ch := make(chan os.Signal, 4)
		signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
		defer signal.Stop(ch)
		sigs = ch
	}

	// The kernel sends Pdeathsig when the forking thread exits: keep this
	// goroutine on it until the script is over.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var cmd *exec.Cmd
	for attempt := 0; ; attempt++ {
		cmd = &exec.Cmd{
			Path: scriptPath, Args: []string{scriptPath}, Env: env, Dir: workDir,
			Stdout: o.Stdout, Stderr: o.Stderr,
			SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
		}
		err = cmd.Start()
		// A concurrent fork may briefly hold the copy's write descriptor
		// (golang/go#22315): retry ETXTBSY.
		if !errors.Is(err, syscall.ETXTBSY) || attempt >= 50 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		return refuse("start %s: %v", filepath.Base(o.Script), err)
	}
	pgid := cmd.Process.Pid
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	var termSent time.Time
	done := ctx.Done()
wait:
	for {
		select {
		case <-waited:
			break wait
		case s := <-sigs:
			sig, ok := s.(syscall.Signal)
			if !ok {
				sig = syscall.SIGTERM
			}
			if err := procutil.SignalGroup(pgid, sig); err != nil {
				fmt.Fprintln(o.Stderr, RefusalPrefix+err.Error())
			}
			if sig == syscall.SIGTERM {
				termSent = time.Now()
			}
		case <-done:
			done = nil
			if err := procutil.SignalGroup(pgid, syscall.SIGTERM); err != nil {
				fmt.Fprintln(o.Stderr, RefusalPrefix+err.Error())
			}
			termSent = time.Now()
		}
	}
	code := ExitExecFailed
	if st, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok {
		switch {
		case st.Exited():
			code = st.ExitStatus()
		case st.Signaled():
			code = 128 + int(st.Signal())
		}
	}
	if _, _, err := procutil.StopGroup(pgid, termSent, groupGrace); err != nil {
		fmt.Fprintln(o.Stderr, RefusalPrefix+err.Error())
	}

	msg, err := readResult(resultPath)
	if err != nil {
		msg = []byte(RefusalPrefix + "no result: " + err.Error() + "\n")
		fmt.Fprint(o.Stderr, string(msg))
	}
	if err := writeTerminationLog(o.TerminationLog, msg); err != nil {
		fmt.Fprintln(o.Stderr, RefusalPrefix+err.Error())
	}
	return code
}

// readBounded reads at most limit bytes of the file at p (following
// symlinks: a ConfigMap volume's files are symlinks) and refuses a longer
// one or one that is not a regular file.
func readBounded(p string, limit int64) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("not a regular file (%s)", fi.Mode().Type())
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("longer than %d bytes", limit)
	}
	return b, nil
}

// readResult reads the script's result file without following a symlink
// and without blocking on a FIFO: a regular, non-empty file of at most
// specs.MaxResultBytes bytes.
func readResult(p string) ([]byte, error) {
	fd, err := syscall.Open(p, syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, syscall.ENOENT):
		return nil, errors.New("the check wrote no result file")
	case errors.Is(err, syscall.ELOOP):
		return nil, errors.New("the result file is a symlink")
	case err != nil:
		return nil, fmt.Errorf("open the result file: %w", err)
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("result file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("the result file is not a regular file (%s)", fi.Mode().Type())
	}
	b, err := io.ReadAll(io.LimitReader(f, specs.MaxResultBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read the result file: %w", err)
	}
	switch {
	case len(b) > specs.MaxResultBytes:
		return nil, fmt.Errorf("the result file is larger than %d bytes", specs.MaxResultBytes)
	case len(b) == 0:
		return nil, errors.New("the result file is empty")
	}
	return b, nil
}

// writeTerminationLog replaces the termination log's content with b.
func writeTerminationLog(p string, b []byte) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("termination log: %w", err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("termination log %s: %w", p, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("termination log %s: %w", p, err)
	}
	return nil
}

// Install copies the running signet binary to dst (mode 0555, through a
// temporary file and a rename), for the init container of a check pod:
// the signet image has no shell and no cp.
func Install(dst string) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("install: find signet's own binary: %w", err)
	}
	src, err := os.Open(self)
	if err != nil {
		return fmt.Errorf("install: %w", err)
	}
	defer src.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".signet-install-")
	if err != nil {
		return fmt.Errorf("install: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, src); err != nil {
		tmp.Close()
		return fmt.Errorf("install %s: %w", dst, err)
	}
	if err := tmp.Chmod(0o555); err != nil {
		tmp.Close()
		return fmt.Errorf("install %s: %w", dst, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("install %s: %w", dst, err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return fmt.Errorf("install %s: %w", dst, err)
	}
	return nil
}
