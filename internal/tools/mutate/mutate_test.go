package mutate

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const src = "package x\n\nfunc Add(a, b int) int { return a + b }\n\nfunc Sub(a, b int) int { return a - b }\n"

// tree writes a one-file repository and returns its root.
func tree(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(root, "x.go"), []byte(src), 0o640))
	return root
}

func mutation(target, replacement string) *Mutation {
	return &Mutation{
		ID: "m", Rule: "Add adds.", File: "x.go", Target: target, Replacement: replacement,
		Test: Test{Pkg: ".", Run: "^TestAdd$"}, Assert: "Add(1, 2)",
	}
}

// fakeTest returns a TestFunc that calls fn with the content the test
// would build from (the overlay's file when given, else the tree's).
func fakeTest(t *testing.T, root string, fn func(content string) TestRun) TestFunc {
	return func(_ context.Context, _ Test, overlay string, _ bool) (TestRun, error) {
		p := filepath.Join(root, "x.go")
		if overlay != "" {
			b, err := os.ReadFile(overlay)
			require.NoError(t, err)
			require.Contains(t, string(b), `"Replace"`)
			dir := filepath.Dir(overlay)
			ents, err := os.ReadDir(dir)
			require.NoError(t, err)
			for _, e := range ents {
				if strings.HasSuffix(e.Name(), "x.go") {
					p = filepath.Join(dir, e.Name())
				}
			}
		}
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		return fn(string(b)), nil
	}
}

// addTest fails, printing the assertion, when Add no longer adds.
func addTest(content string) TestRun {
	if strings.Contains(content, "return a + b") {
		return TestRun{Output: "ok  \tx\t0.01s\n", Passed: true}
	}
	return TestRun{Output: "--- FAIL: TestAdd\n    Error: Add(1, 2) = -1, want 3\nFAIL\n"}
}

func assertTreeIntact(t *testing.T, root string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "x.go"))
	require.NoError(t, err)
	assert.Equal(t, src, string(b), "the tree was not restored byte for byte")
	st, err := os.Stat(filepath.Join(root, "x.go"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o640), st.Mode().Perm(), "mode changed")
}

func TestRunStatuses(t *testing.T) {
	tests := []struct {
		name        string
		m           *Mutation
		want        Status
		wantDetail  string
		wantNoTests bool
	}{
		{"caught", mutation("return a + b", "return a - b"), Caught, "", false},
		{"survived", mutation("return a - b", "return a + b"), Survived, "test passed with the rule broken", false},
		{"target twice", mutation("(a, b int) int", "(a, b int) (int)"), Broken, "occurs 2 times", false},
		{"target absent", mutation("return a * b", "return a / b"), Broken, "does not occur", false},
		{"wrong assertion", func() *Mutation { m := mutation("return a + b", "return a - b"); m.Assert = "Sub(1, 2)"; return m }(), Broken, "without printing the assert text", false},
		{"also target absent", func() *Mutation {
			m := mutation("return a + b", "return a - b")
			m.Also = []Edit{{Target: "nowhere", Replacement: "x"}}
			return m
		}(), Broken, `target "nowhere" does not occur`, false},
	}
	for _, overlay := range []bool{false, true} {
		for _, tt := range tests {
			t.Run(tt.name+map[bool]string{false: "/in place", true: "/overlay"}[overlay], func(t *testing.T) {
				root := tree(t)
				r := &Runner{Root: root, Overlay: overlay, Journal: filepath.Join(t.TempDir(), "journal"), RunTest: fakeTest(t, root, addTest)}
				res, err := r.Run(t.Context(), tt.m)
				require.NoError(t, err)
				assert.Equal(t, tt.want, res.Status, res.Detail)
				assert.Contains(t, res.Detail, tt.wantDetail)
				assertTreeIntact(t, root)
				ents, _ := os.ReadDir(r.Journal)
				assert.Empty(t, ents, "journal left behind")
			})
		}
	}
}

// TestFailureBesideTheAssertionRunsOnceMore: a mutated test that fails
// for another reason than its assertion (a harness slow to start) runs
// once more; only a second run that prints the assertion is Caught, and
// the first failure stays in the detail. A test that passes is never
// run again: Survived stands on one run.
func TestFailureBesideTheAssertionRunsOnceMore(t *testing.T) {
	flake := TestRun{Output: "--- FAIL: TestAdd (41.66s)\n    kueue.go:188: kubetest: kueue not ready: timeout\n    kubetest.go:478: kubetest: ---- tail of etcd-0\nFAIL\n"}
	for _, tt := range []struct {
		name       string
		second     TestRun
		want       Status
		wantDetail []string
	}{
		{"caught the second time", TestRun{Output: "--- FAIL: TestAdd\n    Error: Add(1, 2) = -1\n"}, Caught,
			[]string{"caught on a second run", "kueue not ready"}},
		{"the same failure twice", flake, Broken,
			[]string{"without printing the assert text", "kubetest: kueue not ready", "a second run; the first failed"}},
		{"passes the second time", TestRun{Output: "ok\n", Passed: true}, Survived,
			[]string{"test passed with the rule broken", "kueue not ready"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			root := tree(t)
			runs := 0
			r := &Runner{Root: root, Overlay: true, RunTest: func(context.Context, Test, string, bool) (TestRun, error) {
				runs++
				if runs == 1 {
					return flake, nil
				}
				return tt.second, nil
			}}
			res, err := r.Run(t.Context(), mutation("return a + b", "return a - b"))
			require.NoError(t, err)
			assert.Equal(t, 2, runs)
			assert.Equal(t, tt.want, res.Status, res.Detail)
			for _, d := range tt.wantDetail {
				assert.Contains(t, res.Detail, d)
			}
			assert.NotContains(t, res.Detail, "---- tail of", "a harness's log dump is not a reason")
		})
	}
	t.Run("survived is not run again", func(t *testing.T) {
		runs := 0
		r := &Runner{Root: tree(t), Overlay: true, RunTest: func(context.Context, Test, string, bool) (TestRun, error) {
			runs++
			return TestRun{Output: "ok\n", Passed: true}, nil
		}}
		res, err := r.Run(t.Context(), mutation("return a + b", "return a - b"))
		require.NoError(t, err)
		assert.Equal(t, Survived, res.Status)
		assert.Equal(t, 1, runs)
	})
}

func TestRunMutatesTheTreeOnlyDuringTheTest(t *testing.T) {
	root := tree(t)
	var seen string
	r := &Runner{Root: root, RunTest: fakeTest(t, root, func(c string) TestRun { seen = c; return addTest(c) })}
	res, err := r.Run(t.Context(), mutation("return a + b", "return a - b"))
	require.NoError(t, err)
	assert.Equal(t, Caught, res.Status)
	assert.Equal(t, strings.Replace(src, "return a + b", "return a - b", 1), seen)
	assertTreeIntact(t, root)
}

func TestBaseline(t *testing.T) {
	root := tree(t)
	calls := 0
	r := &Runner{Root: root, Baseline: true, RunTest: func(_ context.Context, _ Test, _ string, baseline bool) (TestRun, error) {
		calls++
		if baseline {
			return TestRun{Output: "--- FAIL: TestAdd\n    Error: Add(1, 2) = 0\n", Passed: false}, nil
		}
		return TestRun{Output: "Add(1, 2)"}, nil
	}}
	res, err := r.Run(t.Context(), mutation("return a + b", "return a - b"))
	require.NoError(t, err)
	assert.Equal(t, Broken, res.Status)
	assert.Contains(t, res.Detail, "fails without the mutation")
	assert.Equal(t, 1, calls, "the mutated test does not run when the baseline fails")

	r.RunTest = func(context.Context, Test, string, bool) (TestRun, error) {
		return TestRun{Output: "ok  \tx\t0.01s [no tests to run]\n", Passed: true}, nil
	}
	r.baselines = nil
	res, err = r.Run(t.Context(), mutation("return a + b", "return a - b"))
	require.NoError(t, err)
	assert.Equal(t, Broken, res.Status)
	assert.Contains(t, res.Detail, "matches no test")
	assertTreeIntact(t, root)
}

func TestRestoredOnPanic(t *testing.T) {
	root := tree(t)
	r := &Runner{Root: root, RunTest: func(context.Context, Test, string, bool) (TestRun, error) {
		b, _ := os.ReadFile(filepath.Join(root, "x.go"))
		require.Contains(t, string(b), "return a - b", "mutated while the test runs")
		panic("test runner blew up")
	}}
	assert.PanicsWithValue(t, "test runner blew up", func() {
		_, _ = r.Run(context.Background(), mutation("return a + b", "return a - b"))
	})
	assertTreeIntact(t, root)
}

// A signal handler calls RestoreAll while a test runs: the tree is restored
// at once and no further mutation is applied.
func TestRestoreAllWhileRunning(t *testing.T) {
	root := tree(t)
	var r *Runner
	r = &Runner{Root: root, RunTest: func(context.Context, Test, string, bool) (TestRun, error) {
		require.NoError(t, r.RestoreAll())
		b, err := os.ReadFile(filepath.Join(root, "x.go"))
		require.NoError(t, err)
		assert.Equal(t, src, string(b), "restored while the test was still running")
		return TestRun{Passed: true}, nil
	}}
	_, err := r.Run(t.Context(), mutation("return a + b", "return a - b"))
	require.NoError(t, err)
	_, err = r.Run(t.Context(), mutation("return a + b", "return a - b"))
	assert.ErrorIs(t, err, ErrClosed)
	assertTreeIntact(t, root)
}

// Someone edits the mutated file while its test runs: their edit is kept,
// the run stops with a ConflictError naming where the original bytes are.
func TestConcurrentEditIsNotOverwritten(t *testing.T) {
	root := tree(t)
	theirs := strings.Replace(src, "func Sub", "// their comment\nfunc Sub", 1)
	r := &Runner{Root: root, RunTest: func(context.Context, Test, string, bool) (TestRun, error) {
		require.NoError(t, os.WriteFile(filepath.Join(root, "x.go"), []byte(theirs), 0o640))
		return TestRun{Passed: true}, nil
	}}
	_, err := r.Run(t.Context(), mutation("return a + b", "return a - b"))
	var ce *ConflictError
	require.True(t, errors.As(err, &ce), "want a ConflictError, got %v", err)
	b, rerr := os.ReadFile(filepath.Join(root, "x.go"))
	require.NoError(t, rerr)
	assert.Equal(t, theirs, string(b), "someone else's edit was overwritten")
	saved, rerr := os.ReadFile(ce.Saved)
	require.NoError(t, rerr)
	assert.Equal(t, src, string(saved))
	os.Remove(ce.Saved)
}

// A run killed with SIGKILL leaves the mutated file and its journal; the
// next run restores it before doing anything else.
func TestRecoverFromJournal(t *testing.T) {
	root := tree(t)
	journal := filepath.Join(t.TempDir(), "journal")
	g := &guard{journal: journal}
	p := filepath.Join(root, "x.go")
	mutated := []byte(strings.Replace(src, "return a + b", "return a - b", 1))
	require.NoError(t, g.write(p, []byte(src), mutated)) // and then the process dies

	r := &Runner{Root: root, Journal: journal}
	restored, err := r.Recover()
	require.NoError(t, err)
	assert.Equal(t, []string{p}, restored)
	assertTreeIntact(t, root)
	ents, _ := os.ReadDir(journal)
	assert.Empty(t, ents)
}

func TestParseList(t *testing.T) {
	good := "- id: a-1\n  rule: r.\n  file: x.go\n  target: t\n  replacement: u\n  test: {pkg: ., run: ^T$}\n  assert: boom\n"
	list, err := ParseList([]byte(good))
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.Equal(t, "a-1", list[0].ID)

	for name, tc := range map[string]struct{ in, want string }{
		"unknown field":     {good + "  extra: 1\n", "field extra not found"},
		"duplicate id":      {good + good, `"a-1": duplicate id`},
		"no assert":         {strings.Replace(good, "  assert: boom\n", "", 1), "assert is empty"},
		"escaping file":     {strings.Replace(good, "file: x.go", "file: ../x.go", 1), "not a path inside the repository"},
		"same text":         {strings.Replace(good, "replacement: u", "replacement: t", 1), "replacement equals target"},
		"bad run regexp":    {strings.Replace(good, "run: ^T$", "run: '('", 1), "test.run"},
		"empty list":        {"[]\n", "no mutations"},
		"uppercase id":      {strings.Replace(good, "id: a-1", "id: A", 1), "is not lowercase"},
		"missing test pkg":  {strings.Replace(good, "test: {pkg: ., run: ^T$}", "test: {run: ^T$}", 1), "test.pkg and test.run"},
		"missing also text": {good + "  also: [{replacement: x}]\n", "also[0]: target is empty"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ParseList([]byte(tc.in))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// TestGoTest runs the real go command on a tiny module: a caught mutation,
// a survivor, a mutation that does not build, one whose test matches
// nothing, and one of a file the test reads at run time, which -overlay
// cannot reach.
func TestGoTest(t *testing.T) {
	goCmd, err := exec.LookPath("go")
	require.NoError(t, err, "the go command runs every mutation: it must be on PATH")
	root := tree(t)
	require.NoError(t, os.WriteFile(filepath.Join(root, "go.mod"), []byte("module x\n\ngo 1.22\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(root, "want.txt"), []byte("3\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(root, "x_test.go"), []byte(`package x

import (
	"os"
	"strings"
	"testing"
)

func TestAdd(t *testing.T) {
	if got := Add(1, 2); got != 3 {
		t.Fatalf("Add(1, 2) = %d, want 3", got)
	}
}

func TestWant(t *testing.T) {
	b, err := os.ReadFile("want.txt")
	if err != nil || strings.TrimSpace(string(b)) != "3" {
		t.Fatalf("want.txt says %q", b)
	}
}
`), 0o644))
	wantFile := &Mutation{
		ID: "w", Rule: "want.txt says 3.", File: "want.txt", Target: "3", Replacement: "4",
		Test: Test{Pkg: ".", Run: "^TestWant$"}, Assert: `want.txt says "4`,
	}
	noTest := mutation("return a + b", "return a - b")
	noTest.Test.Run = "^TestNothing$"
	for _, cfg := range []struct {
		name     string
		overlay  bool
		jobs     int
		wantFile Status
	}{
		{"in place", false, 1, Caught},
		{"overlay", true, 1, Broken},
		{"jobs", false, 2, Caught},
	} {
		t.Run(cfg.name, func(t *testing.T) {
			r := &Runner{Root: root, Go: goCmd, Overlay: cfg.overlay, Jobs: cfg.jobs, Baseline: true}
			defer r.Close()
			for _, tc := range []struct {
				m    *Mutation
				want Status
			}{
				{mutation("return a + b", "return a - b"), Caught},
				{mutation("return a - b", "return b - a"), Survived},
				{mutation("return a + b", "return a +"), Broken},
				{noTest, Broken},
				{wantFile, cfg.wantFile},
			} {
				res, err := r.Run(t.Context(), tc.m)
				require.NoError(t, err)
				assert.Equal(t, tc.want, res.Status, "%s %s: %s\n%s", tc.m.Test.Run, tc.m.Replacement, res.Detail, res.Output)
				assertTreeIntact(t, root)
				b, err := os.ReadFile(filepath.Join(root, "want.txt"))
				require.NoError(t, err)
				assert.Equal(t, "3\n", string(b), "want.txt restored")
			}
		})
	}
}
