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
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
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
	// BuildFailed says the test binary did not build; Output says why.
	BuildFailed bool
}

// TestFunc runs test t in the repository: the run without any mutation
// when baseline is set, else the mutated run, with the go command's
// -overlay file when overlay is not empty.
type TestFunc func(ctx context.Context, t Test, overlay string, baseline bool) (TestRun, error)

// Runner applies mutations in the repository at Root.
type Runner struct {
	// Root is the repository root; mutation files are relative to it.
	Root string
	// Go is the go command (default "go").
	Go string
	// Timeout bounds one test run, build included (default 10m).
	Timeout time.Duration
	// Overlay hands mutated files to the go command with -overlay instead
	// of writing them into the tree. Only .go files can be handed over
	// (a test reads other files at run time, where -overlay does not
	// reach): a mutation of any other file is broken under Overlay.
	Overlay bool
	// Jobs is how many mutations RunAll runs at once; 0 and 1 run them one
	// after another. With more, a mutation of .go files only goes through
	// -overlay even without Overlay, and a mutation of any other file is
	// applied in place (journaled) with no other mutation running.
	Jobs int
	// Expected holds each mutation's elapsed time in an earlier run, by
	// id. RunAll starts the mutations applied in place first, then those
	// without an expected time, then the longest first.
	Expected map[string]time.Duration
	// Baseline first runs each named test without the mutation, from a
	// test binary built once per package, and calls the mutation broken
	// unless it passes.
	Baseline bool
	// Journal is a directory recording the original bytes of files mutated
	// in place, so that a run killed with SIGKILL is undone by the next one.
	// Empty disables it.
	Journal string
	// Log receives one progress line per test run; nil discards them.
	Log io.Writer
	// RunTest runs a test; nil means go test.
	RunTest TestFunc

	g guard
	// tree is held exclusively while a mutation is applied in place, and
	// shared while one goes through -overlay.
	tree  sync.RWMutex
	logMu sync.Mutex
	// halted is set by the first error about the tree.
	halted atomic.Bool
	// mu guards baselines, bins and pkgs.
	mu        sync.Mutex
	baselines map[Test]*baselineResult
	bins      binaries
	pkgs      map[string]pkgInfo
}

func (r *Runner) logf(format string, a ...any) {
	r.logMu.Lock()
	defer r.logMu.Unlock()
	if r.Log != nil {
		fmt.Fprintf(r.Log, format+"\n", a...)
	}
}

// inPlace reports whether m is applied to the tree rather than handed to
// the go command through -overlay.
func (r *Runner) inPlace(m *Mutation) bool {
	return !r.Overlay && (r.Jobs <= 1 || !m.goOnly())
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
	if r.Overlay && !m.goOnly() {
		return broken("%s is not Go source: a test reads it at run time, where -overlay does not reach; run without -overlay", m.notGo())
	}
	inPlace := r.inPlace(m)
	if inPlace {
		r.tree.Lock()
		defer r.tree.Unlock()
	} else {
		r.tree.RLock()
		defer r.tree.RUnlock()
	}
	start = time.Now() // waiting for the tree is not this mutation's time
	if r.halted.Load() {
		return broken("not run: an earlier mutation stopped the run")
	}
	if err := ctx.Err(); err != nil {
		return broken("not run: %v", err)
	}
	// A tree error stops the run before the tree is free again, so that
	// no mutation waiting for it starts.
	defer func() {
		if err != nil {
			r.halted.Store(true)
		}
	}()
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

	// work holds this run's test binary and, through -overlay, the mutated
	// files and the run's TMPDIR.
	work, err := os.MkdirTemp("", "mutate-run-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(work)
	if err := os.Chmod(work, 0o755); err != nil {
		return res, err
	}
	overlay := ""
	if !inPlace {
		if overlay, err = writeOverlay(work, files, mutated); err != nil {
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
	run, terr := r.runMutated(ctx, m, work, overlay)
	res.Output = run.Output
	res.Status, res.Detail = classify(m, run, terr)
	if res.Status == Broken && terr == nil && !run.Passed && !run.BuildFailed && !buildFailed(run.Output) {
		// The test failed, but not on its assertion: something else went
		// wrong first (a control plane slow to start on a loaded machine).
		// One more run decides; it counts as caught only if it fails
		// printing the assertion, and the first failure stays in Detail.
		first := res.Detail
		r.logf("%-28s %s; running it once more", m.ID, first)
		run, terr = r.runMutated(ctx, m, work, overlay)
		res.Output = run.Output
		res.Status, res.Detail = classify(m, run, terr)
		if res.Status == Caught {
			res.Detail = "caught on a second run; the first " + strings.TrimPrefix(first, "test ")
		} else {
			res.Detail += " (a second run; the first " + strings.TrimPrefix(first, "test ") + ")"
		}
	}
	return res, nil
}

// classify says what one mutated run of m's test shows.
func classify(m *Mutation, run TestRun, terr error) (Status, string) {
	switch {
	case terr != nil:
		return Broken, terr.Error()
	case run.BuildFailed || buildFailed(run.Output):
		return Broken, "mutated code does not build: " + firstLines(run.Output, 3)
	case run.Passed && noTests(run.Output):
		return Broken, "test.run matches no test"
	case run.Passed:
		return Survived, "test passed with the rule broken"
	case strings.Contains(run.Output, m.Assert):
		return Caught, ""
	default:
		return Broken, "test failed without printing the assert text: " + failureLines(run.Output, 4)
	}
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

// writeOverlay writes the mutated files and the overlay file naming them
// into dir, and returns the overlay file's path. It also makes dir/tmp, the
// mutated run's TMPDIR, open to all and sticky as /tmp is: a check that
// runs as a transient uid works in it.
func writeOverlay(dir string, files []origFile, mutated [][]byte) (string, error) {
	tmp := filepath.Join(dir, "tmp")
	if err := os.Mkdir(tmp, 0o755); err != nil {
		return "", err
	}
	if err := os.Chmod(tmp, 0o777|os.ModeSticky); err != nil {
		return "", err
	}
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

// baselineResult is the outcome of one test's baseline, known once done
// is closed.
type baselineResult struct {
	done chan struct{}
	err  error
}

// baseline runs t once without any mutation: it must pass and run at least
// one test. Each test's baseline runs once; a caller asking while it runs
// waits for it.
func (r *Runner) baseline(ctx context.Context, t Test) error {
	r.mu.Lock()
	b, ok := r.baselines[t]
	if !ok {
		if r.baselines == nil {
			r.baselines = map[Test]*baselineResult{}
		}
		b = &baselineResult{done: make(chan struct{})}
		r.baselines[t] = b
	}
	r.mu.Unlock()
	if ok {
		select {
		case <-b.done:
			return b.err
		case <-ctx.Done():
			return fmt.Errorf("baseline: %w", ctx.Err())
		}
	}
	defer close(b.done)
	r.logf("%-28s go test -run '%s' %s", "(baseline)", t.Run, t.Pkg)
	run, err := r.runBaseline(ctx, t)
	switch {
	case err != nil:
		err = fmt.Errorf("baseline: %w", err)
	case !run.Passed:
		err = fmt.Errorf("baseline: the test fails without the mutation: %s", failureLines(run.Output, 3))
	case noTests(run.Output):
		err = errors.New("baseline: test.run matches no test")
	}
	b.err = err
	if ctx.Err() != nil {
		// Cancelled, not answered: a later call runs it again.
		r.mu.Lock()
		delete(r.baselines, t)
		r.mu.Unlock()
	}
	return err
}

func (r *Runner) runBaseline(ctx context.Context, t Test) (TestRun, error) {
	if r.RunTest != nil {
		return r.RunTest(ctx, t, "", true)
	}
	return r.baselineTest(ctx, t)
}

func (r *Runner) runMutated(ctx context.Context, m *Mutation, work, overlay string) (TestRun, error) {
	if r.RunTest != nil {
		return r.RunTest(ctx, m.Test, overlay, false)
	}
	return r.goTest(ctx, m, work, overlay)
}

// goTest builds m's test binary in work and runs m's test from it as go
// test -count=1 would. The overlay goes in GOFLAGS, so that a go command
// the test itself runs (a test that builds cmd/signet) builds the mutated
// code too, as it would from a tree mutated in place; and the run gets its
// own TMPDIR in work, so that what it leaves at a stable temporary path
// (testenv's signet binary, built from the mutated code) is neither seen by
// another run nor left behind.
//
// A mutation of no .go file starts from a copy of the baseline's binary:
// go test -c then only checks that it is up to date (it relinks when the
// file is embedded), instead of linking the same binary again.
func (r *Runner) goTest(ctx context.Context, m *Mutation, work, overlay string) (TestRun, error) {
	t := m.Test
	var env []string
	if overlay != "" {
		if strings.ContainsAny(overlay, " \t\n") {
			return TestRun{}, fmt.Errorf("overlay path %q has white space, which GOFLAGS cannot carry", overlay)
		}
		env = []string{
			"GOFLAGS=" + strings.TrimSpace(os.Getenv("GOFLAGS")+" -overlay="+overlay),
			"TMPDIR=" + filepath.Join(work, "tmp"),
		}
	}
	pkg, err := r.pkgInfo(ctx, t.Pkg)
	if err != nil || !pkg.listed.Passed {
		return pkg.listed, err
	}
	bin := filepath.Join(work, "mutated.test")
	if !m.editsGo() {
		if err := r.seedBinary(t, bin); err != nil {
			return TestRun{}, err
		}
	}
	build, ok, err := r.buildTest(ctx, t, bin, env)
	if err != nil || !ok {
		return build, err
	}
	return r.runBinary(ctx, t, pkg, bin, env)
}

func (r *Runner) timeout() time.Duration {
	if r.Timeout <= 0 {
		return 10 * time.Minute
	}
	return r.Timeout
}

func (r *Runner) goCmd() string {
	if r.Go == "" {
		return "go"
	}
	return r.Go
}

// command runs name in dir in its own process group, killed as a group on
// timeout (Timeout plus 30s) or cancellation; what names it in that error.
// env nil means the environment of this process.
func (r *Runner) command(ctx context.Context, what, dir string, env []string, name string, args ...string) (TestRun, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout()+30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		return TestRun{Output: string(out)}, fmt.Errorf("%s did not finish: %w", what, ctx.Err())
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
	return strings.Contains(out, "[no tests to run]") || strings.Contains(out, "no test files") ||
		strings.Contains(out, "testing: warning: no tests to run")
}

func firstLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, " | ")
}

// testMessage is a line a test logged (t.Fatalf, t.Errorf, t.Logf), as go
// test prints it: "file.go:LINE: message".
var testMessage = regexp.MustCompile(`^[\w.-]+\.go:\d+: \S`)

// failureLines returns the first n lines that say why a test failed:
// failure headers, testify's Error lines, panics and the test's own
// messages (not the tails of logs a harness dumps).
func failureLines(s string, n int) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "--- FAIL") || strings.HasPrefix(t, "Error:") || strings.HasPrefix(t, "panic:") ||
			testMessage.MatchString(t) && !strings.Contains(t, "---- tail of") {
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
