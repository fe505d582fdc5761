package mutate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Status is the outcome of one mutation.
type Status string

// Statuses. Only Caught is a success.
const (
	// Caught: the named test failed and printed the named assertion.
	Caught Status = "caught"
	// Survived: the named test passed with the rule broken.
	Survived Status = "SURVIVED"
	// Broken: the mutation proves nothing as written: its target does not
	// occur exactly once, the mutated code does not build, the test fails
	// without the mutation or runs nothing, or it failed without printing
	// the named assertion.
	Broken Status = "broken"
)

// Result is what running one mutation showed.
type Result struct {
	Mutation *Mutation
	Status   Status
	Detail   string
	Elapsed  time.Duration
	// Output is the mutated test run's output, when it ran.
	Output string
}

// TestRun is one run of go test: its combined output and whether it passed.
type TestRun struct {
	Output string
	Passed bool
}

// TestFunc runs test t in the repository, with the go command's -overlay
// file when overlay is not empty, and count1 set to bypass the test cache.
type TestFunc func(ctx context.Context, t Test, overlay string, count1 bool) (TestRun, error)

// Runner applies mutations in the repository at Root.
type Runner struct {
	// Root is the repository root; mutation files are relative to it.
	Root string
	// Go is the go command (default "go").
	Go string
	// Timeout bounds one test run, build included (default 10m).
	Timeout time.Duration
	// Overlay hands mutated files to the go command with -overlay instead
	// of writing them into the tree.
	Overlay bool
	// Baseline first runs each named test without the mutation (the test
	// cache may answer) and calls the mutation broken unless it passes.
	Baseline bool
	// Journal is a directory recording the original bytes of files mutated
	// in place, so that a run killed with SIGKILL is undone by the next one.
	// Empty disables it.
	Journal string
	// Log receives one progress line per test run; nil discards them.
	Log io.Writer
	// RunTest runs a test; nil means go test.
	RunTest TestFunc

	g         guard
	baselines map[Test]error
}

func (r *Runner) logf(format string, a ...any) {
	if r.Log != nil {
		fmt.Fprintf(r.Log, format+"\n", a...)
	}
}

// Recover restores files an earlier, killed run left mutated (recorded in
// Journal) and returns their paths.
func (r *Runner) Recover() ([]string, error) {
	r.g.setJournal(r.Journal)
	return r.g.recoverJournal()
}

// RestoreAll restores every file mutated right now and makes every later
// Run return ErrClosed. It is safe to call from a signal handler goroutine
// while Run is in progress.
func (r *Runner) RestoreAll() error {
	return r.g.restoreAll()
}

// Run applies m, runs its test and restores the tree. The returned error is
// not about m but about the tree: a *ConflictError, a failed restore, or
// ErrClosed; the caller must stop then.
func (r *Runner) Run(ctx context.Context, m *Mutation) (res Result, err error) {
	start := time.Now()
	res = Result{Mutation: m}
	defer func() { res.Elapsed = time.Since(start) }()
	broken := func(format string, a ...any) (Result, error) {
		res.Status, res.Detail = Broken, fmt.Sprintf(format, a...)
		return res, nil
	}
	if err := m.Validate(); err != nil {
		return broken("%v", err)
	}
	files, mutated, err := r.prepare(m)
	if err != nil {
		var be *BrokenError
		if errors.As(err, &be) {
			return broken("%v", err)
		}
		return res, err
	}
	if r.Baseline {
		if err := r.baseline(ctx, m.Test); err != nil {
			return broken("%v", err)
		}
	}

	overlay := ""
	if r.Overlay {
		dir, err := os.MkdirTemp("", "mutate-overlay-")
		if err != nil {
			return res, err
		}
		defer os.RemoveAll(dir)
		if overlay, err = writeOverlay(dir, files, mutated); err != nil {
			return res, err
		}
	} else {
		r.g.setJournal(r.Journal)
		// Restore whatever happens from here on, panics included.
		defer func() {
			for _, f := range files {
				if rerr := r.g.restore(f.path); rerr != nil {
					err = errors.Join(err, rerr)
				}
			}
		}()
		for i, f := range files {
			if err := r.g.write(f.path, f.orig, mutated[i]); err != nil {
				return res, err
			}
		}
	}

	r.logf("%-28s go test -run '%s' %s", m.ID, m.Test.Run, m.Test.Pkg)
	run, terr := r.runTest(ctx, m.Test, overlay, true)
	res.Output = run.Output
	switch {
	case terr != nil:
		res.Status, res.Detail = Broken, terr.Error()
	case buildFailed(run.Output):
		res.Status, res.Detail = Broken, "mutated code does not build: "+firstLines(run.Output, 3)
	case run.Passed && noTests(run.Output):
		res.Status, res.Detail = Broken, "test.run matches no test"
	case run.Passed:
		res.Status, res.Detail = Survived, "test passed with the rule broken"
	case strings.Contains(run.Output, m.Assert):
		res.Status = Caught
	default:
		res.Status, res.Detail = Broken, "test failed without printing the assert text: "+failureLines(run.Output, 3)
	}
	return res, nil
}

// Check reports, without writing anything or running a test, why m could
// not be applied: an invalid entry or a target that does not occur exactly
// once.
func (r *Runner) Check(m *Mutation) error {
	if err := m.Validate(); err != nil {
		return err
	}
	_, _, err := r.prepare(m)
	return err
}

type origFile struct {
	rel, path string
	orig      []byte
}

// prepare reads every file m edits and computes its mutated content,
// refusing a target that does not occur exactly once.
func (r *Runner) prepare(m *Mutation) ([]origFile, [][]byte, error) {
	var files []origFile
	var mutated [][]byte
	seen := map[string]bool{}
	edits := m.Edits()
	for _, e := range edits {
		if seen[e.File] {
			continue
		}
		seen[e.File] = true
		path := filepath.Join(r.Root, e.File)
		orig, err := os.ReadFile(path)
		if err != nil {
			return nil, nil, &BrokenError{File: e.File, Reason: err.Error()}
		}
		out, err := apply(orig, e.File, edits)
		if err != nil {
			return nil, nil, err
		}
		files = append(files, origFile{rel: e.File, path: path, orig: orig})
		mutated = append(mutated, out)
	}
	return files, mutated, nil
}

func writeOverlay(dir string, files []origFile, mutated [][]byte) (string, error) {
	replace := map[string]string{}
	for i, f := range files {
		p := filepath.Join(dir, fmt.Sprintf("%d-%s", i, filepath.Base(f.path)))
		if err := os.WriteFile(p, mutated[i], 0o644); err != nil {
			return "", err
		}
		abs, err := filepath.Abs(f.path)
		if err != nil {
			return "", err
		}
		replace[abs] = p
	}
	b, err := json.Marshal(map[string]any{"Replace": replace})
	if err != nil {
		return "", err
	}
	p := filepath.Join(dir, "overlay.json")
	return p, os.WriteFile(p, b, 0o644)
}

// baseline runs t once without any mutation (the test cache may answer):
// it must pass and run at least one test.
func (r *Runner) baseline(ctx context.Context, t Test) error {
	if err, ok := r.baselines[t]; ok {
		return err
	}
	r.logf("%-28s go test -run '%s' %s", "(baseline)", t.Run, t.Pkg)
	run, err := r.runTest(ctx, t, "", false)
	switch {
	case err != nil:
		err = fmt.Errorf("baseline: %w", err)
	case !run.Passed:
		err = fmt.Errorf("baseline: the test fails without the mutation: %s", failureLines(run.Output, 3))
	case noTests(run.Output):
		err = errors.New("baseline: test.run matches no test")
	}
	if r.baselines == nil {
		r.baselines = map[Test]error{}
	}
	if ctx.Err() == nil {
		r.baselines[t] = err
	}
	return err
}

func (r *Runner) runTest(ctx context.Context, t Test, overlay string, count1 bool) (TestRun, error) {
	if r.RunTest != nil {
		return r.RunTest(ctx, t, overlay, count1)
	}
	return r.goTest(ctx, t, overlay, count1)
}

// goTest runs go test for t in its own process group, killed as a group on
// timeout or cancellation.
func (r *Runner) goTest(ctx context.Context, t Test, overlay string, count1 bool) (TestRun, error) {
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, timeout+30*time.Second)
	defer cancel()
	goCmd := r.Go
	if goCmd == "" {
		goCmd = "go"
	}
	args := []string{"test", "-vet=off", "-timeout", timeout.String(), "-run", t.Run}
	if count1 {
		args = append(args, "-count=1")
	}
	if t.Race {
		args = append(args, "-race")
	}
	if overlay != "" {
		args = append(args, "-overlay", overlay)
	}
	args = append(args, t.Pkg)
	cmd := exec.CommandContext(ctx, goCmd, args...)
	cmd.Dir = r.Root
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		return TestRun{Output: string(out)}, fmt.Errorf("go test did not finish: %w", ctx.Err())
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return TestRun{Output: string(out)}, err
	}
	return TestRun{Output: string(out), Passed: err == nil}, nil
}

func buildFailed(out string) bool {
	return strings.Contains(out, "[build failed]") || strings.Contains(out, "[setup failed]")
}

func noTests(out string) bool {
	return strings.Contains(out, "[no tests to run]") || strings.Contains(out, "no test files")
}

func firstLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, " | ")
}

// failureLines returns the first n lines that say why a test failed.
func failureLines(s string, n int) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "--- FAIL") || strings.HasPrefix(t, "Error:") || strings.HasPrefix(t, "panic:") {
			out = append(out, t)
			if len(out) == n {
				break
			}
		}
	}
	if len(out) == 0 {
		return firstLines(s, n)
	}
	return strings.Join(out, " | ")
}
