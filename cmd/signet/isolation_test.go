package main

// Issue 15's attacks on the local backend, end to end: `signet run` as a
// process, as root (the daemon's local backend runs so), with real checks,
// real transient uids and cgroups, real keys and a real Git repository.

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/internal/testing/testenv"
)

// signetRun runs `signet run` for request on cluster with state as its
// state directory (one per test: it remembers the evidence tip) and
// returns its exit status, stdout and stderr.
func signetRun(t *testing.T, repo *testenv.Repo, keys *testenv.Keys, request, cluster, state string) (int, string, string) {
	t.Helper()
	return signetExec(t, "run", "--repo", repo.Dir, "--request", request, "--trust", keys.TrustFile, "--key", keys.ReconcilerFile,
		"--cluster", cluster, "--state-dir", state)
}

// signetExec runs the signet binary with args and returns its exit status,
// stdout and stderr; a failure to start it fails the test.
func signetExec(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), testenv.Signet(t), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return code, stdout.String(), stderr.String()
}

// watcher is the process a malicious check leaves behind (finding 1): it
// leaves the check's process group, waits for the victim check of a later
// run, reads its nonce and result file from /proc/<pid>/environ, writes a
// Pass result there and makes the failing check exit 0 through ptrace.
const watcher = `echo $$ > "$DIR/watcher.pid"
cd /
while :; do
  for d in /proc/[0-9]*; do
    [ "$(cat $d/comm 2>/dev/null)" = victim.sh ] || continue
    env=$(tr '\0' '\n' < $d/environ 2>/dev/null) || continue
    run=$(echo "$env" | sed -n 's/^SIGNET_RUN_ID=//p')
    nonce=$(echo "$env" | sed -n 's/^SIGNET_NONCE=//p')
    rf=$(echo "$env" | sed -n 's/^SIGNET_RESULT_FILE=//p')
    [ -n "$nonce" ] || continue
    printf '{"run":"%s","check":"victim","nonce":"%s","verdict":"Pass","summary":"forged"}' "$run" "$nonce" > "$rf" &&
      gdb -p ${d#/proc/} -batch -ex 'call (void)_exit(0)' >/dev/null 2>&1 &&
      echo forged > "$DIR/forged"
    exit 0
  done
  sleep 0.05
done
`

// TestFinding1ForgedResultEndToEnd is finding 1 as it was found: a check
// of one `signet run` leaves a watcher (setsid) and passes; a later run's
// genuinely failing check is the victim. Before issue 15 the watcher
// outlived its run, forged the victim's result (same uid: environ and
// result file readable, ptrace allowed) and the run was recorded Pass. Now
// the watcher dies with its check (cgroup.kill, or every process of the
// check's transient uid), and even alive it could reach nothing of a check
// running as another uid: the victim is recorded Fail.
func TestFinding1ForgedResultEndToEnd(t *testing.T) {
	require.Equal(t, 0, os.Geteuid(), "signet's local backend isolates checks when it runs as root")
	_, err := exec.LookPath("gdb")
	require.NoError(t, err, "the attack traces the victim with gdb")
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o777))
	require.NoError(t, os.Chmod(filepath.Dir(dir), 0o755))

	keys := testenv.NewKeys(t)
	repo := testenv.NewRepo(t)
	plant := "cat > \"$HOME/w.sh\" <<'EOF'\n" + watcher + "EOF\n" +
		"DIR=" + dir + " setsid sh \"$HOME/w.sh\" </dev/null >/dev/null 2>&1 &\n" +
		"while [ ! -s " + dir + "/watcher.pid ]; do sleep 0.01; done\nresult Pass; exit 0"
	repo.AddProfile("plant", "", testenv.Check{Name: "plant", Script: plant})
	repo.AddRequest("plant", "plant")
	repo.AddProfile("victim", "", testenv.Check{Name: "victim", Script: "sleep 5; result Fail; exit 1"})
	repo.AddRequest("victim", "victim")
	repo.Commit("plant and victim")
	repo.Approve(keys.ApproverFile, "", "CertificationProfile/plant", "CertificationRequest/plant", "CertificationProfile/victim", "CertificationRequest/victim")

	state := filepath.Join(t.TempDir(), "state")
	code, stdout, stderr := signetRun(t, repo, keys, "plant", "plant", state)
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	b, err := os.ReadFile(filepath.Join(dir, "watcher.pid"))
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	alive := syscall.Kill(pid, 0) == nil
	if alive {
		st, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		alive = !bytes.Contains(st, []byte(") Z "))
	}
	assert.False(t, alive, "the watcher (pid %d) outlived the check and the run that started it", pid)

	code, stdout, stderr = signetRun(t, repo, keys, "victim", "victim", state)
	assert.Equal(t, exitRunFail, code, "the failing check was not recorded Fail:\nstdout:\n%s\nstderr:\n%s", stdout, stderr)
	assert.Contains(t, stdout, "Fail")
	assert.NoFileExists(t, filepath.Join(dir, "forged"), "the watcher forged the victim's result")
}

// TestFinding3KeyDescriptorEndToEnd is finding 3 as it was found: `signet
// run --key /dev/fd/7 7<reconciler.key`. Before issue 15 the check read
// the private key through descriptor 7 and it ended in the stdout log on
// the evidence branch. Now the check gets no descriptor above 2: its
// attempt fails, it passes, and the key is nowhere on the branch.
func TestFinding3KeyDescriptorEndToEnd(t *testing.T) {
	keys := testenv.NewKeys(t)
	repo := testenv.NewRepo(t)
	repo.AddProfile("fd", "", testenv.Check{Name: "fd", Script: `echo "descriptors of the check:"; ls -l /proc/$$/fd
if cat <&7; then result Fail; exit 1; fi
result Pass; exit 0`})
	repo.AddRequest("fd", "fd")
	repo.Commit("fd")
	repo.Approve(keys.ApproverFile, "", "CertificationProfile/fd", "CertificationRequest/fd")

	key, err := os.Open(keys.ReconcilerFile)
	require.NoError(t, err)
	defer key.Close()
	args := []string{"run", "--repo", repo.Dir, "--request", "fd", "--trust", keys.TrustFile, "--key", "/dev/fd/7",
		"--cluster", "fd", "--state-dir", filepath.Join(t.TempDir(), "state")}
	cmd := exec.CommandContext(t.Context(), testenv.Signet(t), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.ExtraFiles = []*os.File{nil, nil, nil, nil, key} // descriptor 7
	require.NoError(t, cmd.Run(), "stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())

	pem, err := os.ReadFile(keys.ReconcilerFile)
	require.NoError(t, err)
	line := strings.Split(strings.TrimSpace(string(pem)), "\n")[1] // a line of key material
	grep := exec.Command("git", "-C", repo.Dir, "grep", "-c", "-F", "-e", "PRIVATE KEY", "-e", line, "signet/evidence")
	out, err := grep.CombinedOutput()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "git grep found key material on the evidence branch:\n%s", out)
	assert.Equal(t, 1, ee.ExitCode(), "%s", out)
	logs := exec.Command("git", "-C", repo.Dir, "grep", "-l", "descriptors of the check", "signet/evidence")
	out, err = logs.CombinedOutput()
	require.NoError(t, err, "the check's stdout log (its descriptor listing) is not on the branch: %s", out)
}

// TestFinding5GroupReadableKeyRefused is finding 5: a signing key (or any
// secret file) that group or others may read was used as is, so a check
// could read and publish it. signet run, as root with the local backend,
// now refuses it, says which file and what to do, and writes nothing;
// with mode 0600 the same run proceeds.
func TestFinding5GroupReadableKeyRefused(t *testing.T) {
	require.Equal(t, 0, os.Geteuid(), "the refusal applies when checks run as other users: signet as root")
	keys := testenv.NewKeys(t)
	repo := testenv.NewRepo(t)
	repo.AddProfile("modes", "", testenv.Check{Name: "modes", Script: "result Pass; exit 0"})
	repo.AddRequest("modes", "modes")
	repo.Commit("modes")
	repo.Approve(keys.ApproverFile, "", "CertificationProfile/modes", "CertificationRequest/modes")

	state := filepath.Join(t.TempDir(), "state")
	require.NoError(t, os.Chmod(keys.ReconcilerFile, 0o640))
	code, stdout, stderr := signetRun(t, repo, keys, "modes", "modes", state)
	assert.NotEqual(t, 0, code, "stdout:\n%s", stdout)
	assert.Contains(t, stderr, "signingKey: "+keys.ReconcilerFile+" has mode 0640")
	assert.Contains(t, stderr, "chmod 600 "+keys.ReconcilerFile)
	out, err := exec.Command("git", "-C", repo.Dir, "branch", "--list", "signet/evidence").Output()
	require.NoError(t, err)
	assert.Empty(t, strings.TrimSpace(string(out)), "a refused run wrote evidence")

	require.NoError(t, os.Chmod(keys.ReconcilerFile, 0o600))
	code, stdout, stderr = signetRun(t, repo, keys, "modes", "modes", state)
	assert.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
}

// TestRunTwiceSaysItAlreadyRan: a request runs once; running it again
// says so, with the verdict and the evidence directory of its run, and
// exits with that verdict's status: a failed run (which retains its node,
// so is held in full) and a passed one (kept compact, issue 19).
func TestRunTwiceSaysItAlreadyRan(t *testing.T) {
	keys := testenv.NewKeys(t)
	repo := testenv.NewRepo(t)
	repo.AddProfile("once", "", testenv.Check{Name: "once", Script: "result Fail; exit 1"})
	repo.AddRequest("once", "once")
	repo.AddProfile("passes", "", testenv.Check{Name: "passes", Script: "result Pass; exit 0"})
	repo.AddRequest("passes", "passes")
	repo.Commit("once")
	repo.Approve(keys.ApproverFile, "", "CertificationProfile/once", "CertificationRequest/once", "CertificationProfile/passes", "CertificationRequest/passes")
	state := filepath.Join(t.TempDir(), "state")
	code, stdout, stderr := signetRun(t, repo, keys, "passes", "passes", state)
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	code, stdout, stderr = signetRun(t, repo, keys, "passes", "passes", state)
	assert.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	assert.Contains(t, stderr, "request passes already ran: run passes ended Pass; evidence: runs/passes/")

	code, stdout, stderr = signetRun(t, repo, keys, "once", "once", state)
	require.Equal(t, exitRunFail, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	assert.NotContains(t, stderr, "already ran")

	code, stdout, stderr = signetRun(t, repo, keys, "once", "once", state)
	assert.Equal(t, exitRunFail, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	assert.Contains(t, stderr, "request once already ran: run once ended Fail; evidence: runs/once/")
}
