package local

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/reconciler"
	"signet.dev/signet/specs"
)

const (
	testRun   = "run-20261130-0001"
	testCheck = "nccl-allreduce"
)

// writeResult is a shell line writing a result with verdict $1 and the
// run, check and nonce from the environment unless overridden by RUN,
// CHECK, NONCE.
const writeResult = `result() { printf '{"run":"%s","check":"%s","nonce":"%s","verdict":"%s","summary":"from script"}' "${RUN:-$SIGNET_RUN_ID}" "${CHECK:-$SIGNET_CHECK_NAME}" "${NONCE:-$SIGNET_NONCE}" "$1" > "$SIGNET_RESULT_FILE"; }
`

func script(body string) []byte { return []byte("#!/bin/sh\n" + writeResult + body + "\n") }

// request returns a valid request for body with a fresh nonce, a deadline
// 30s away and a short grace.
func request(t *testing.T, body string) Request {
	t.Helper()
	return Request{
		Script:     script(body),
		ScriptName: "check.sh",
		Env: map[string]string{
			specs.EnvRunID:            testRun,
			specs.EnvCheckName:        testCheck,
			specs.EnvCheckIndex:       "0",
			specs.EnvNonce:            fmt.Sprintf("nonce-%s-%d", t.Name(), time.Now().UnixNano()),
			specs.EnvParticipantIndex: "0",
			specs.EnvParticipants:     "1",
			specs.EnvGPUCount:         "0",
		},
		Deadline:    time.Now().Add(30 * time.Second),
		Grace:       500 * time.Millisecond,
		MaxLogBytes: 64 << 10,
		WorkRoot:    t.TempDir(),
	}
}

func expect(req Request) specs.Expect {
	return specs.Expect{Run: req.Env[specs.EnvRunID], Check: req.Env[specs.EnvCheckName], Nonce: req.Env[specs.EnvNonce]}
}

// running reports whether pid is a process that has not terminated: gone
// from /proc, or a zombie (here PID 1 does not reap orphans), is not running.
func running(t *testing.T, pid int) bool {
	t.Helper()
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if errors.Is(err, os.ErrNotExist) {
		return false
	}
	require.NoError(t, err)
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	return f[0] != "Z" && f[0] != "X"
}

var childRE = regexp.MustCompile(`child=(\d+)`)

// childPID returns the pid a script printed as "child=<pid>".
func childPID(t *testing.T, stdout []byte) int {
	t.Helper()
	m := childRE.FindSubmatch(stdout)
	require.NotNil(t, m, "stdout %q names no child", stdout)
	pid, err := strconv.Atoi(string(m[1]))
	require.NoError(t, err)
	return pid
}

// TestRunMatrix is DESIGN §4's verdict/exit matrix with real scripts, through
// Run and specs.Evaluate.
func TestRunMatrix(t *testing.T) {
	oversized := `{ printf '{"run":"%s","check":"%s","nonce":"%s","verdict":"Pass","summary":"' "$SIGNET_RUN_ID" "$SIGNET_CHECK_NAME" "$SIGNET_NONCE"; head -c 5000 /dev/zero | tr '\0' a; printf '"}'; } > "$SIGNET_RESULT_FILE"`
	tests := []struct {
		name     string
		body     string
		deadline time.Duration // from now; 30s when zero
		// cancelWhenReady cancels ctx once the script creates the file
		// named by its shell variable $ready.
		cancelWhenReady bool
		want            specs.Verdict
		wantReason      string
		check           func(t *testing.T, rep *Report, took time.Duration)
	}{
		{name: "valid Pass exit 0", body: "result Pass; exit 0", want: specs.VerdictPass},
		{name: "valid Fail exit 1", body: "result Fail; exit 1", want: specs.VerdictFail},
		{name: "valid Inconclusive exit 2", body: "result Inconclusive; exit 2", want: specs.VerdictInconclusive},
		{name: "exit 0 with no result", body: "exit 0", want: specs.VerdictError, wantReason: "exit code 0 with no result"},
		{name: "exit 1 with no result", body: "exit 1", want: specs.VerdictError, wantReason: "exit code 1 with no result"},
		{name: "empty result", body: `: > "$SIGNET_RESULT_FILE"; exit 0`, want: specs.VerdictError, wantReason: "malformed"},
		{name: "malformed result", body: `echo '{"run":' > "$SIGNET_RESULT_FILE"; exit 0`, want: specs.VerdictError, wantReason: "malformed"},
		{name: "unknown field", body: `echo '{"run":"a","check":"b","nonce":"c","verdict":"Pass","summary":"","extra":1}' > "$SIGNET_RESULT_FILE"; exit 0`, want: specs.VerdictError, wantReason: `unknown field "extra"`},
		{name: "stale nonce", body: "NONCE=nonce-of-an-earlier-run result Pass; exit 0", want: specs.VerdictError, wantReason: `stale result: nonce "nonce-of-an-earlier-run"`},
		{name: "wrong run", body: "RUN=run-other result Pass; exit 0", want: specs.VerdictError, wantReason: `stale result: run "run-other"`},
		{name: "wrong check", body: "CHECK=other-check result Pass; exit 0", want: specs.VerdictError, wantReason: `stale result: check "other-check"`},
		{name: "oversized result", body: oversized + "; exit 0", want: specs.VerdictError, wantReason: "larger than 4096",
			check: func(t *testing.T, rep *Report, _ time.Duration) {
				assert.Len(t, rep.Result, specs.MaxResultBytes+1, "read with a bound")
			}},
		{name: "Pass with exit 1", body: "result Pass; exit 1", want: specs.VerdictError, wantReason: "result verdict Pass contradicts exit code 1"},
		{name: "Fail with exit 0", body: "result Fail; exit 0", want: specs.VerdictError, wantReason: "result verdict Fail contradicts exit code 0"},
		{name: "Inconclusive with exit 1", body: "result Inconclusive; exit 1", want: specs.VerdictError, wantReason: "contradicts exit code 1"},
		{name: "exit 3", body: "result Pass; exit 3", want: specs.VerdictError, wantReason: "exit code 3 is not 0, 1 or 2"},
		{name: "killed by a signal", body: "result Pass; kill -KILL $$", want: specs.VerdictError, wantReason: "killed by signal SIGKILL",
			check: func(t *testing.T, rep *Report, _ time.Duration) {
				assert.Equal(t, "SIGKILL", rep.Termination.Signal)
				assert.False(t, rep.Termination.Exited)
			}},
		{name: "result file is a symlink", body: `ln -s /etc/hostname "$SIGNET_RESULT_FILE"; exit 0`, want: specs.VerdictError, wantReason: "result refused: result file is a symlink",
			check: func(t *testing.T, rep *Report, _ time.Duration) { assert.Nil(t, rep.Result) }},
		{name: "result file is a hard link", body: `ln /etc/hostname "$SIGNET_RESULT_FILE"; exit 0`, want: specs.VerdictError, wantReason: "result file has 2 links, not 1",
			check: func(t *testing.T, rep *Report, _ time.Duration) { assert.Nil(t, rep.Result) }},
		{name: "result file is a fifo", body: `mkfifo "$SIGNET_RESULT_FILE"; exit 0`, want: specs.VerdictError, wantReason: "not a regular file"},
		{name: "result file is a directory", body: `mkdir "$SIGNET_RESULT_FILE"; exit 0`, want: specs.VerdictError, wantReason: "not a regular file"},
		{
			name: "deadline overrun leaves no process of the group", deadline: time.Second,
			body: "sleep 1000 & echo child=$!; result Pass; sleep 1000; exit 0",
			want: specs.VerdictError, wantReason: "deadline exceeded: sent SIGTERM to the process group at deadline ",
			check: func(t *testing.T, rep *Report, took time.Duration) {
				assert.True(t, rep.Termination.DeadlineExceeded)
				assert.Equal(t, "SIGTERM", rep.Termination.Signal)
				assert.False(t, running(t, childPID(t, rep.Stdout)), "background child outlived the deadline")
				assert.Less(t, took, 5*time.Second)
			},
		},
		{
			name: "ignoring TERM gets KILL after grace", deadline: time.Second,
			body: "trap '' TERM; sleep 1000 & echo child=$!; sleep 1000",
			want: specs.VerdictError, wantReason: "deadline exceeded: sent SIGTERM to the process group at deadline ",
			check: func(t *testing.T, rep *Report, took time.Duration) {
				assert.True(t, rep.Termination.DeadlineExceeded)
				assert.Equal(t, "SIGKILL", rep.Termination.Signal)
				assert.Contains(t, rep.Termination.Reason, "sent SIGKILL to the process group after 500ms grace")
				assert.False(t, running(t, childPID(t, rep.Stdout)))
				assert.GreaterOrEqual(t, took, 1500*time.Millisecond, "KILL came before the grace")
			},
		},
		{
			name: "cancel", cancelWhenReady: true,
			body: `sleep 1000 & echo child=$!; : > "$ready"; sleep 1000`,
			want: specs.VerdictCanceled, wantReason: "canceled: sent SIGTERM to the process group on cancel",
			check: func(t *testing.T, rep *Report, took time.Duration) {
				assert.True(t, rep.Termination.Canceled)
				assert.False(t, rep.Termination.DeadlineExceeded)
				assert.False(t, running(t, childPID(t, rep.Stdout)))
				assert.Less(t, took, 3*time.Second)
			},
		},
		{
			name: "background child left after exit is stopped",
			body: "sleep 1000 & echo child=$!; result Pass; exit 0",
			want: specs.VerdictPass,
			check: func(t *testing.T, rep *Report, took time.Duration) {
				assert.False(t, running(t, childPID(t, rep.Stdout)))
				assert.Contains(t, rep.Termination.Reason, "stopped the processes left in its group with SIGTERM")
				assert.Less(t, took, 3*time.Second)
			},
		},
		{
			// The child tells the script, through a fifo, once it ignores
			// TERM: the script must not exit (and the group get TERM) before.
			name: "background child ignoring TERM after exit is killed",
			body: "mkfifo ignoring; (trap '' TERM; echo > ignoring; exec sleep 1000) & echo child=$!; read x < ignoring; result Pass; exit 0",
			want: specs.VerdictPass,
			check: func(t *testing.T, rep *Report, took time.Duration) {
				pid := childPID(t, rep.Stdout)
				t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
				assert.False(t, running(t, pid), "background child ignoring TERM outlived its check")
				assert.Contains(t, rep.Termination.Reason, "SIGTERM and SIGKILL")
			},
		},
		{
			name: "process outside the group holding stdout does not hang the runner",
			// Wait until the child is in its own session (field 6 of stat).
			body: `setsid sleep 1000 & c=$!; echo child=$c
while [ "$(cut -d' ' -f6 /proc/$c/stat)" != "$c" ]; do sleep 0.01; done; result Pass; exit 0`,
			want: specs.VerdictPass,
			check: func(t *testing.T, rep *Report, took time.Duration) {
				pid := childPID(t, rep.Stdout)
				t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
				assert.Less(t, took, pipeDrain+2*time.Second)
				assert.Contains(t, rep.Termination.Reason, "stopped reading output")
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req := request(t, tt.body)
			// took is measured from before the deadline is set, so that it
			// bounds the time from the deadline too.
			start := time.Now()
			if tt.deadline != 0 {
				req.Deadline = start.Add(tt.deadline)
			}
			ctx := t.Context()
			if tt.cancelWhenReady {
				ready := filepath.Join(t.TempDir(), "ready")
				req.Script = script("ready='" + ready + "'\n" + tt.body)
				var cancel context.CancelFunc
				ctx, cancel = context.WithCancel(ctx)
				go func() {
					for ctx.Err() == nil {
						if _, err := os.Stat(ready); err == nil {
							cancel()
							return
						}
						time.Sleep(5 * time.Millisecond)
					}
				}()
			}
			rep, err := Run(ctx, req)
			took := time.Since(start)
			require.NoError(t, err)
			require.True(t, rep.Termination.Started)
			assert.Positive(t, rep.PID)
			got := specs.Evaluate(expect(req), rep.Termination, rep.Result)
			assert.Equal(t, tt.want, got.Verdict, "reason: %s; stderr: %s", got.Reason, rep.Stderr)
			assert.Contains(t, got.Reason, tt.wantReason)
			if tt.check != nil {
				tt.check(t, rep, took)
			}
			assert.NoError(t, rep.Cleanup)
			ents, err := os.ReadDir(req.WorkRoot)
			require.NoError(t, err)
			assert.Empty(t, ents, "check directory left behind")
		})
	}
}

func TestRunNeverStarted(t *testing.T) {
	tests := []struct {
		name       string
		script     string
		wantReason string
	}{
		{"no interpreter line", "result Pass\nexit 0\n", "exec format error"},
		{"empty script", "", "exec format error"},
		{"bad interpreter", "#!/nonexistent/interpreter\nexit 0\n", "no such file or directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req := request(t, "")
			req.Script = []byte(tt.script)
			rep, err := Run(t.Context(), req)
			var se *StartError
			require.ErrorAs(t, err, &se)
			require.NotNil(t, rep)
			assert.False(t, rep.Termination.Started)
			got := specs.Evaluate(expect(req), rep.Termination, rep.Result)
			assert.Equal(t, specs.VerdictError, got.Verdict)
			assert.Contains(t, got.Reason, "never started")
			assert.Contains(t, got.Reason, tt.wantReason)
			ents, err := os.ReadDir(req.WorkRoot)
			require.NoError(t, err)
			assert.Empty(t, ents)
		})
	}
}

func TestRunNotStartedWithoutError(t *testing.T) {
	t.Run("ctx already canceled", func(t *testing.T) {
		req := request(t, "result Pass")
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		rep, err := Run(ctx, req)
		require.NoError(t, err)
		assert.False(t, rep.Termination.Started)
		assert.Equal(t, specs.VerdictCanceled, specs.Evaluate(expect(req), rep.Termination, rep.Result).Verdict)
	})
	t.Run("deadline already passed", func(t *testing.T) {
		req := request(t, "result Pass")
		req.Deadline = time.Now().Add(-time.Second)
		rep, err := Run(t.Context(), req)
		require.NoError(t, err)
		assert.False(t, rep.Termination.Started)
		assert.True(t, rep.Termination.DeadlineExceeded)
		got := specs.Evaluate(expect(req), rep.Termination, rep.Result)
		assert.Equal(t, specs.VerdictError, got.Verdict)
		assert.Contains(t, got.Reason, "passed before start")
	})
}

func TestRunInvalidRequest(t *testing.T) {
	tests := []struct {
		name    string
		mod     func(r *Request)
		wantErr string
	}{
		{"no deadline", func(r *Request) { r.Deadline = time.Time{} }, "no deadline"},
		{"script name with slash", func(r *Request) { r.ScriptName = "../x.sh" }, `script name "../x.sh"`},
		{"script name empty", func(r *Request) { r.ScriptName = "" }, `script name ""`},
		{"script name is the result file", func(r *Request) { r.ScriptName = "result.json" }, "script name"},
		{"missing nonce", func(r *Request) { delete(r.Env, specs.EnvNonce) }, "SIGNET_NONCE is missing"},
		{"PATH from the caller", func(r *Request) { r.Env["PATH"] = "/tmp" }, "PATH is not a DESIGN §4 variable"},
		{"result file from the caller", func(r *Request) { r.Env[specs.EnvResultFile] = "/etc/passwd" }, "SIGNET_RESULT_FILE is not a DESIGN §4 variable"},
		{"LD_PRELOAD", func(r *Request) { r.Env["LD_PRELOAD"] = "/tmp/x.so" }, "LD_PRELOAD is not"},
		{"empty stage name", func(r *Request) { r.Env[specs.EnvStageName] = "" }, "SIGNET_STAGE_NAME=\"\" is empty"},
		{"root user", func(r *Request) { r.User = &User{UID: 0, GID: 0} }, "privileged"},
		{"relative work root", func(r *Request) { r.WorkRoot = "tmp" }, `work root "tmp" is not an absolute path`},
		{"negative grace", func(r *Request) { r.Grace = -time.Second }, "negative grace"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := request(t, "result Pass")
			tt.mod(&req)
			rep, err := Run(t.Context(), req)
			require.ErrorIs(t, err, ErrInvalidRequest)
			assert.Contains(t, err.Error(), tt.wantErr)
			require.NotNil(t, rep)
			assert.False(t, rep.Termination.Started)
			if !filepath.IsAbs(req.WorkRoot) {
				return
			}
			ents, err := os.ReadDir(req.WorkRoot)
			require.NoError(t, err)
			assert.Empty(t, ents, "a refused request touched the work root")
		})
	}
}

// TestRunEnvironment asserts the check sees exactly DESIGN §4's variables
// plus PATH, HOME and SIGNET_RESULT_FILE: it prints its own initial
// environment from /proc, which is what execve gave it (a shell's `env`
// would add PWD itself).
func TestRunEnvironment(t *testing.T) {
	t.Setenv("SIGNET_SECRET_TEST", "must-not-leak")
	t.Setenv("SIGNET_TOKEN", "must-not-leak")
	base := []string{"HOME", "PATH", specs.EnvResultFile, specs.EnvRunID, specs.EnvCheckName, specs.EnvCheckIndex,
		specs.EnvNonce, specs.EnvParticipantIndex, specs.EnvParticipants, specs.EnvGPUCount}
	tests := []struct {
		name  string
		stage string
		want  []string
	}{
		{"unstaged check", "", base},
		{"staged check", "warmup", append(slices.Clone(base), specs.EnvStageName)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := request(t, `tr '\0' '\n' < /proc/$$/environ; echo "pwd=$(pwd)"; result Pass`)
			if tt.stage != "" {
				req.Env[specs.EnvStageName] = tt.stage
			}
			rep, err := Run(t.Context(), req)
			require.NoError(t, err)
			require.Equal(t, specs.VerdictPass, specs.Evaluate(expect(req), rep.Termination, rep.Result).Verdict, string(rep.Stderr))
			got := map[string]string{}
			for line := range strings.Lines(string(rep.Stdout)) {
				if k, v, ok := strings.Cut(strings.TrimSuffix(line, "\n"), "="); ok && k != "pwd" {
					got[k] = v
				}
			}
			assert.ElementsMatch(t, tt.want, slices.Collect(mapsKeys(got)))
			assert.NotContains(t, string(rep.Stdout), "must-not-leak")
			assert.Equal(t, SafePATH, got["PATH"])
			assert.Equal(t, filepath.Join(got["HOME"], "result.json"), got[specs.EnvResultFile])
			assert.Contains(t, string(rep.Stdout), "pwd="+got["HOME"]+"\n")
			assert.True(t, strings.HasPrefix(got["HOME"], req.WorkRoot+"/signet-check-"), got["HOME"])
			for k, v := range req.Env {
				assert.Equal(t, v, got[k], k)
			}
		})
	}
}

func mapsKeys(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func TestRunLogTails(t *testing.T) {
	req := request(t, `i=0; while [ $i -lt 2000 ]; do echo "line $i of output padding padding"; i=$((i+1)); done; echo END; echo ERR-END >&2; result Pass`)
	req.MaxLogBytes = 1000
	rep, err := Run(t.Context(), req)
	require.NoError(t, err)
	assert.Len(t, rep.Stdout, 1000)
	assert.True(t, bytes.HasSuffix(rep.Stdout, []byte("line 1999 of output padding padding\nEND\n")), "tail lost the end: %q", rep.Stdout)
	assert.Greater(t, rep.StdoutTotal, int64(60000))
	assert.Equal(t, "ERR-END\n", string(rep.Stderr))
	assert.Equal(t, specs.VerdictPass, specs.Evaluate(expect(req), rep.Termination, rep.Result).Verdict)
}

// testPool is the pool the tests' checks take transient uids from: the
// default range, whose lock files keep test binaries running at once from
// handing out one uid twice.
var testPool = sync.OnceValues(func() (*UIDPool, error) {
	first, last, err := ParseUIDRange(reconciler.DefaultLocalUIDRange)
	if err != nil {
		return nil, err
	}
	return NewUIDPool(first, last)
})

// transientUser acquires a transient uid for one test.
func transientUser(t *testing.T) *User {
	t.Helper()
	require.Equal(t, 0, os.Geteuid(), "this test needs root, as the daemon's local backend does")
	pool, err := testPool()
	require.NoError(t, err)
	uid, err := pool.Acquire()
	require.NoError(t, err)
	t.Cleanup(func() { pool.Release(uid) })
	return &User{UID: uid, GID: uid}
}

// TestRunAsUnprivilegedUser runs a check as a transient uid, as the daemon
// does when it runs as root: the check is that uid and gid with no
// supplementary group, owns its working directory and result file, and
// cannot read a file that only root may read even when every directory
// above it is open, nor signet's own environment through /proc.
func TestRunAsUnprivilegedUser(t *testing.T) {
	t.Setenv("SIGNET_SECRET_TEST", "must-not-leak")
	u := transientUser(t)

	secrets := t.TempDir()
	require.NoError(t, os.Chmod(secrets, 0o755))
	key := filepath.Join(secrets, "signing.key")
	require.NoError(t, os.WriteFile(key, []byte("PRIVATE KEY MATERIAL"), 0o600))

	req := request(t, `echo "uid=$(id -u) gid=$(id -g) groups=$(id -G)"
if cat `+key+` >/dev/null 2>&1; then echo key=readable; else echo key=denied; fi
if tr '\0' '\n' < /proc/$PPID/environ 2>/dev/null | grep -q SIGNET_SECRET_TEST; then echo parentenv=readable; else echo parentenv=denied; fi
echo "home=$(stat -c '%u %a' "$HOME")"
result Pass; echo "result=$(stat -c '%u' "$SIGNET_RESULT_FILE")"; exit 0`)
	openToOthers(t, req.WorkRoot)
	req.User = u
	rep, err := Run(t.Context(), req)
	require.NoError(t, err)
	out := string(rep.Stdout)
	id := strconv.FormatUint(uint64(u.UID), 10)
	assert.Contains(t, out, "uid="+id+" gid="+id+" groups="+id+"\n")
	assert.Contains(t, out, "key=denied\n")
	assert.Contains(t, out, "parentenv=denied\n", "the check read signet's own environment")
	assert.NotContains(t, out, "PRIVATE KEY")
	assert.Contains(t, out, "home="+id+" 700\n")
	assert.Contains(t, out, "result="+id+"\n")
	got := specs.Evaluate(expect(req), rep.Termination, rep.Result)
	assert.Equal(t, specs.VerdictPass, got.Verdict, "%s; stderr %s", got.Reason, rep.Stderr)
	ents, err := os.ReadDir(req.WorkRoot)
	require.NoError(t, err)
	assert.Empty(t, ents)
}

// TestRunAsUserDeadline asserts the deadline reaches processes of a check
// running as another user too.
func TestRunAsUserDeadline(t *testing.T) {
	req := request(t, "trap '' TERM; sleep 1000 & echo child=$!; sleep 1000")
	openToOthers(t, req.WorkRoot)
	req.User = transientUser(t)
	req.Deadline = time.Now().Add(time.Second)
	rep, err := Run(t.Context(), req)
	require.NoError(t, err)
	assert.True(t, rep.Termination.DeadlineExceeded)
	assert.Equal(t, "SIGKILL", rep.Termination.Signal)
	assert.False(t, running(t, childPID(t, rep.Stdout)))
}

// openToOthers gives root the mode a work root has when checks run as
// other users (0711), and makes its parent (t.TempDir's 0700 directory)
// searchable by them, as /tmp is.
func openToOthers(t *testing.T, root string) {
	t.Helper()
	require.NoError(t, os.Chmod(root, WorkRootMode))
	require.NoError(t, os.Chmod(filepath.Dir(root), 0o755))
}

// BenchmarkRunTrivial measures Run of a trivial passing script, to compare
// with BenchmarkForkExecTrivial (the ratio is the runner's overhead).
func BenchmarkRunTrivial(b *testing.B) {
	dir := b.TempDir()
	req := Request{
		Script:     script("result Pass; exit 0"),
		ScriptName: "check.sh",
		Env: map[string]string{
			specs.EnvRunID: testRun, specs.EnvCheckName: testCheck, specs.EnvCheckIndex: "0",
			specs.EnvNonce: "nonce", specs.EnvParticipantIndex: "0", specs.EnvParticipants: "1", specs.EnvGPUCount: "0",
		},
		WorkRoot: dir,
	}
	exp := specs.Expect{Run: testRun, Check: testCheck, Nonce: "nonce"}
	defer reportCPU(b)()
	for b.Loop() {
		req.Deadline = time.Now().Add(time.Minute)
		rep, err := Run(b.Context(), req)
		if err != nil {
			b.Fatal(err)
		}
		if got := specs.Evaluate(exp, rep.Termination, rep.Result); got.Verdict != specs.VerdictPass {
			b.Fatal(got.Reason)
		}
	}
}

// BenchmarkForkExecTrivial is a bare exec.Command of the same script, which
// writes its result into a fixed directory.
func BenchmarkForkExecTrivial(b *testing.B) {
	dir := b.TempDir()
	path := filepath.Join(dir, "check.sh")
	if err := os.WriteFile(path, script("result Pass; exit 0"), 0o500); err != nil {
		b.Fatal(err)
	}
	env := []string{
		specs.EnvRunID + "=" + testRun, specs.EnvCheckName + "=" + testCheck, specs.EnvNonce + "=nonce",
		specs.EnvResultFile + "=" + filepath.Join(dir, "result.json"), "PATH=" + SafePATH,
	}
	defer reportCPU(b)()
	for b.Loop() {
		cmd := exec.Command(path)
		cmd.Env = env
		if err := cmd.Run(); err != nil {
			b.Fatal(err)
		}
	}
}

// reportCPU reports the CPU time (user+system, of the benchmark process and
// its children) per operation, which load on a shared machine disturbs
// less than wall time. Call its result when the loop is done.
func reportCPU(b *testing.B) func() {
	cpu := func() time.Duration {
		var self, children syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &self); err != nil {
			b.Fatal(err)
		}
		if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &children); err != nil {
			b.Fatal(err)
		}
		var d time.Duration
		for _, tv := range []syscall.Timeval{self.Utime, self.Stime, children.Utime, children.Stime} {
			d += time.Duration(tv.Nano())
		}
		return d
	}
	start := cpu()
	return func() { b.ReportMetric(float64(cpu()-start)/float64(b.N), "cpu-ns/op") }
}
