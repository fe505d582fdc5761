package specs

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runExampleScript runs one example check script as a backend would, with
// the environment of DESIGN §4, and returns its parsed result and exit
// code.
func runExampleScript(t *testing.T, script, path string, gpus string) (*Result, int) {
	t.Helper()
	tmp := t.TempDir()
	resultFile := filepath.Join(tmp, "result.json")
	abs, err := filepath.Abs(script)
	require.NoError(t, err)
	// Executed directly, through its #!/bin/sh line, as backends do.
	cmd := exec.CommandContext(t.Context(), abs)
	cmd.Dir = tmp
	// A nonce with JSON-special characters proves the scripts escape.
	nonce := `n0nce-"quoted"-\back\slash`
	cmd.Env = []string{
		"PATH=" + path,
		"TMPDIR=" + tmp,
		"SIGNET_RUN_ID=example-run",
		"SIGNET_CHECK_NAME=" + strings.TrimSuffix(filepath.Base(script), ".sh"),
		"SIGNET_CHECK_INDEX=0",
		"SIGNET_NONCE=" + nonce,
		"SIGNET_RESULT_FILE=" + resultFile,
		"SIGNET_PARTICIPANT_INDEX=0",
		"SIGNET_PARTICIPANTS=1",
		"SIGNET_GPU_COUNT=" + gpus,
	}
	out, err := cmd.CombinedOutput()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	b, err := os.ReadFile(resultFile)
	require.NoError(t, err, "%s wrote no result (exit %d): %s", script, code, out)
	r, err := ParseResult(b)
	require.NoError(t, err, "%s: result %s", script, b)
	assert.Equal(t, "example-run", r.Run)
	assert.Equal(t, strings.TrimSuffix(filepath.Base(script), ".sh"), r.Check)
	assert.Equal(t, nonce, r.Nonce)
	want := map[Verdict]int{VerdictPass: 0, VerdictFail: 1, VerdictInconclusive: 2}[r.Verdict]
	assert.Equal(t, want, code, "%s: exit %d contradicts verdict %s (%s)", script, code, r.Verdict, r.Summary)
	return r, code
}

// basicToolsPath returns a PATH holding only the POSIX tools the example
// scripts use, so that no GPU or MPI tool of the test machine is found.
func basicToolsPath(t *testing.T) string {
	t.Helper()
	bin := t.TempDir()
	for _, tool := range []string{"sh", "awk", "sed", "tr", "grep", "head", "tail", "cat", "mktemp", "rm", "dd", "cksum", "wc", "sync", "uname"} {
		p, err := exec.LookPath(tool)
		require.NoError(t, err, "the example scripts need %s", tool)
		require.NoError(t, os.Symlink(p, filepath.Join(bin, tool)))
	}
	return bin
}

// TestExampleScripts runs every example script on this (CPU-only or not)
// machine. The local profile's CPU, disk and memory checks must pass on
// any working Linux machine; every GPU, RDMA and MPI check, run without its
// tools, must report an honest Inconclusive, never a Pass.
func TestExampleScripts(t *testing.T) {
	scripts, err := filepath.Glob("../examples/spec-repo/bundles/*/*.sh")
	require.NoError(t, err)
	require.Len(t, scripts, 11)
	noGPU := basicToolsPath(t)
	for _, s := range scripts {
		bundle := filepath.Base(filepath.Dir(s))
		name := strings.TrimSuffix(filepath.Base(s), ".sh")
		t.Run(bundle+"/"+name, func(t *testing.T) {
			info, err := os.Stat(s)
			require.NoError(t, err)
			assert.NotZero(t, info.Mode()&0o111, "%s is not executable", s)

			switch {
			case bundle == "local-smoke" && name != "gpu-visible":
				r, _ := runExampleScript(t, s, os.Getenv("PATH"), "0")
				assert.Equal(t, VerdictPass, r.Verdict, r.Summary)
				assert.NotEmpty(t, r.Measurements)
			default:
				r, code := runExampleScript(t, s, noGPU, "8")
				assert.Equal(t, VerdictInconclusive, r.Verdict, r.Summary)
				assert.Equal(t, 2, code)
			}
		})
	}
	t.Run("gpu-visible with the machine's PATH", func(t *testing.T) {
		r, _ := runExampleScript(t, "../examples/spec-repo/bundles/local-smoke/gpu-visible.sh", os.Getenv("PATH"), "0")
		if _, err := exec.LookPath("nvidia-smi"); err != nil {
			assert.Equal(t, VerdictInconclusive, r.Verdict, r.Summary)
		}
	})
	t.Run("no result file", func(t *testing.T) {
		cmd := exec.CommandContext(t.Context(), "../examples/spec-repo/bundles/local-smoke/cpu-info.sh")
		cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
		err := cmd.Run()
		var ee *exec.ExitError
		require.True(t, errors.As(err, &ee), "want an exit error, got %v", err)
		assert.Equal(t, 3, ee.ExitCode(), "outside signet a script exits 3, which signet reports as Error")
	})
}
