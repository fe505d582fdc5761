package mutate

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// concurrency records how many fake test runs overlap, and whether a run
// applied in place (no overlay) ever overlapped another.
type concurrency struct {
	mu              sync.Mutex
	running, max    int
	inPlaceRunning  bool
	inPlaceOverlaps int
}

func (c *concurrency) enter(inPlace bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inPlaceRunning || (inPlace && c.running > 0) {
		c.inPlaceOverlaps++
	}
	c.running++
	c.max = max(c.max, c.running)
	if inPlace {
		c.inPlaceRunning = true
	}
}

func (c *concurrency) leave(inPlace bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.running--
	if inPlace {
		c.inPlaceRunning = false
	}
}

// scheduleTree writes a repository of Go files a.go … and one YAML file,
// each holding "ok", and returns its root.
func scheduleTree(t *testing.T, goFiles ...string) string {
	t.Helper()
	root := t.TempDir()
	for _, f := range goFiles {
		require.NoError(t, os.WriteFile(filepath.Join(root, f), []byte("package x // ok\n"), 0o644))
	}
	require.NoError(t, os.WriteFile(filepath.Join(root, "config.yaml"), []byte("listen: ok\n"), 0o644))
	return root
}

// scheduled is a mutation of file whose test is named after id.
func scheduled(id, file string) Mutation {
	return Mutation{
		ID: id, Rule: "r.", File: file, Target: "ok", Replacement: "broken",
		Test: Test{Pkg: ".", Run: "^Test_" + id + "$"}, Assert: "caught " + id,
	}
}

// TestRunAllConcurrency: mutations of .go files overlap up to Jobs, one of
// another file is applied in place with no other mutation running, and the
// results come back in the list's order whatever order they finished in.
func TestRunAllConcurrency(t *testing.T) {
	root := scheduleTree(t, "a.go", "b.go", "c.go", "d.go", "e.go")
	muts := []Mutation{
		scheduled("a", "a.go"), scheduled("b", "b.go"), scheduled("yaml", "config.yaml"),
		scheduled("c", "c.go"), scheduled("d", "d.go"), scheduled("e", "e.go"),
	}
	var c concurrency
	r := &Runner{Root: root, Jobs: 3, Journal: filepath.Join(t.TempDir(), "journal"),
		RunTest: func(_ context.Context, test Test, overlay string, _ bool) (TestRun, error) {
			inPlace := overlay == ""
			if inPlace {
				b, err := os.ReadFile(filepath.Join(root, "config.yaml"))
				require.NoError(t, err)
				assert.Equal(t, "listen: broken\n", string(b), "applied in place while its test runs")
			}
			c.enter(inPlace)
			defer c.leave(inPlace)
			if !inPlace {
				// Hold until Jobs runs overlap (once), so that the
				// test does not depend on timing.
				for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
					c.mu.Lock()
					full := c.max >= 3
					c.mu.Unlock()
					if full {
						break
					}
				}
			}
			// The first in the list finishes last.
			if strings.Contains(test.Run, "_a$") {
				time.Sleep(100 * time.Millisecond)
			}
			return TestRun{Output: "--- FAIL\n caught " + strings.TrimSuffix(strings.TrimPrefix(test.Run, "^Test_"), "$")}, nil
		}}
	var doneOrder []string
	results, err := r.RunAll(t.Context(), muts, func(res Result) { doneOrder = append(doneOrder, res.Mutation.ID) })
	require.NoError(t, err)
	require.Len(t, results, len(muts))
	for i, res := range results {
		assert.Equal(t, muts[i].ID, res.Mutation.ID, "results in the list's order")
		assert.Equal(t, Caught, res.Status, "%s: %s", res.Mutation.ID, res.Detail)
	}
	assert.ElementsMatch(t, []string{"a", "b", "yaml", "c", "d", "e"}, doneOrder, "done called once per mutation")
	assert.Zero(t, c.inPlaceOverlaps, "a mutation applied in place overlapped another")
	assert.Equal(t, 3, c.max, "mutations of .go files run Jobs at once")
	b, err := os.ReadFile(filepath.Join(root, "config.yaml"))
	require.NoError(t, err)
	assert.Equal(t, "listen: ok\n", string(b), "restored")
}

// TestRunAllSerialInPlace: with Jobs 1 and no Overlay every mutation, .go
// files included, is applied in place, one at a time, as before RunAll.
func TestRunAllSerialInPlace(t *testing.T) {
	root := scheduleTree(t, "a.go", "b.go")
	muts := []Mutation{scheduled("a", "a.go"), scheduled("b", "b.go"), scheduled("yaml", "config.yaml")}
	var c concurrency
	r := &Runner{Root: root, RunTest: func(_ context.Context, test Test, overlay string, _ bool) (TestRun, error) {
		assert.Empty(t, overlay, "%s went through -overlay", test.Run)
		c.enter(true)
		defer c.leave(true)
		return TestRun{Output: "caught " + strings.TrimSuffix(strings.TrimPrefix(test.Run, "^Test_"), "$")}, nil
	}}
	results, err := r.RunAll(t.Context(), muts, nil)
	require.NoError(t, err)
	for i, res := range results {
		assert.Equal(t, muts[i].ID, res.Mutation.ID)
		assert.Equal(t, Caught, res.Status, res.Detail)
	}
	assert.Equal(t, 1, c.max)
}

// TestRunAllReportsEveryOutcome: a mutation that survives, one that is
// broken and one whose test errors do not keep the others from running and
// being reported.
func TestRunAllReportsEveryOutcome(t *testing.T) {
	root := scheduleTree(t, "a.go", "b.go", "c.go", "d.go")
	muts := []Mutation{scheduled("a", "a.go"), scheduled("b", "b.go"), scheduled("c", "c.go"), scheduled("d", "d.go"), scheduled("absent", "nowhere.go")}
	r := &Runner{Root: root, Jobs: 2, RunTest: func(_ context.Context, test Test, _ string, _ bool) (TestRun, error) {
		switch test.Run {
		case "^Test_a$":
			return TestRun{Output: "ok", Passed: true}, nil
		case "^Test_b$":
			return TestRun{}, errors.New("go test did not finish")
		}
		return TestRun{Output: "caught " + strings.TrimSuffix(strings.TrimPrefix(test.Run, "^Test_"), "$")}, nil
	}}
	results, err := r.RunAll(t.Context(), muts, nil)
	require.NoError(t, err)
	var got []Status
	for _, res := range results {
		got = append(got, res.Status)
	}
	assert.Equal(t, []Status{Survived, Broken, Caught, Caught, Broken}, got)
}

// TestRunAllStopsOnTreeError: someone edits a file mutated in place while
// its test runs; RunAll stops with a StopError naming the mutation, and no
// test starts after that.
func TestRunAllStopsOnTreeError(t *testing.T) {
	root := scheduleTree(t, "a.go", "b.go", "c.go")
	muts := []Mutation{scheduled("yaml", "config.yaml"), scheduled("a", "a.go"), scheduled("b", "b.go"), scheduled("c", "c.go")}
	var (
		mu                sync.Mutex
		conflicted        bool
		startedAfterwards []string
	)
	r := &Runner{Root: root, Jobs: 2, RunTest: func(_ context.Context, test Test, _ string, _ bool) (TestRun, error) {
		mu.Lock()
		defer mu.Unlock()
		if conflicted {
			startedAfterwards = append(startedAfterwards, test.Run)
		}
		if test.Run == "^Test_yaml$" {
			require.NoError(t, os.WriteFile(filepath.Join(root, "config.yaml"), []byte("theirs\n"), 0o644))
			conflicted = true
		}
		return TestRun{Passed: true}, nil
	}}
	results, err := r.RunAll(t.Context(), muts, nil)
	var stop *StopError
	require.ErrorAs(t, err, &stop)
	assert.Equal(t, "yaml", stop.ID)
	var ce *ConflictError
	require.ErrorAs(t, err, &ce)
	os.Remove(ce.Saved)
	assert.Nil(t, results)
	assert.Empty(t, startedAfterwards, "a test started after the tree error")
}

// TestOverlayRefusesOtherFiles: -overlay cannot hand a test a file it reads
// at run time, so such a mutation is broken there instead of surviving.
func TestOverlayRefusesOtherFiles(t *testing.T) {
	root := scheduleTree(t)
	m := scheduled("yaml", "config.yaml")
	r := &Runner{Root: root, Overlay: true, RunTest: func(context.Context, Test, string, bool) (TestRun, error) {
		t.Fatal("no test runs")
		return TestRun{}, nil
	}}
	res, err := r.Run(t.Context(), &m)
	require.NoError(t, err)
	assert.Equal(t, Broken, res.Status)
	assert.Contains(t, res.Detail, "config.yaml is not Go source")
}

// TestBaselineOncePerTest: mutations sharing a test run its baseline once,
// even when they start at the same time.
func TestBaselineOncePerTest(t *testing.T) {
	root := scheduleTree(t, "a.go", "b.go", "c.go")
	muts := []Mutation{scheduled("a", "a.go"), scheduled("b", "b.go"), scheduled("c", "c.go")}
	for i := range muts {
		muts[i].Test.Run = "^TestShared$"
		muts[i].Assert = "caught"
	}
	var mu sync.Mutex
	baselines := 0
	r := &Runner{Root: root, Jobs: 3, Baseline: true, RunTest: func(_ context.Context, _ Test, _ string, baseline bool) (TestRun, error) {
		if baseline {
			mu.Lock()
			baselines++
			mu.Unlock()
			time.Sleep(50 * time.Millisecond)
			return TestRun{Output: "ok", Passed: true}, nil
		}
		return TestRun{Output: "caught"}, nil
	}}
	results, err := r.RunAll(t.Context(), muts, nil)
	require.NoError(t, err)
	for _, res := range results {
		assert.Equal(t, Caught, res.Status, res.Detail)
	}
	assert.Equal(t, 1, baselines)
}

func TestOrder(t *testing.T) {
	muts := []Mutation{
		scheduled("short", "a.go"), scheduled("unknown", "b.go"), scheduled("long", "c.go"),
		scheduled("yaml", "config.yaml"), scheduled("unknown-2", "d.go"), scheduled("medium", "e.go"),
	}
	r := &Runner{Jobs: 2, Expected: map[string]time.Duration{
		"short": time.Second, "long": time.Minute, "medium": 10 * time.Second, "yaml": time.Second,
	}}
	var got []string
	for _, i := range r.order(muts) {
		got = append(got, muts[i].ID)
	}
	assert.Equal(t, []string{"yaml", "unknown", "unknown-2", "long", "medium", "short"}, got)
}

func TestTimes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bin", "times.json")
	times, err := LoadTimes(path)
	require.NoError(t, err)
	assert.Empty(t, times, "no file is no times")

	a, b := scheduled("a", "a.go"), scheduled("b", "b.go")
	require.NoError(t, SaveTimes(path, []Result{{Mutation: &a, Elapsed: 1500 * time.Millisecond}, {Mutation: &b, Elapsed: time.Minute}}))
	require.NoError(t, SaveTimes(path, []Result{{Mutation: &a, Elapsed: 2 * time.Second}}))
	times, err = LoadTimes(path)
	require.NoError(t, err)
	assert.Equal(t, map[string]time.Duration{"a": 2 * time.Second, "b": time.Minute}, times, "later times replace earlier ones, others are kept")

	require.NoError(t, os.WriteFile(path, []byte("{"), 0o644))
	_, err = LoadTimes(path)
	assert.ErrorContains(t, err, path)
}
