package mutate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"
)

// StopError says RunAll stopped because Run returned an error about the
// tree while running the mutation ID.
type StopError struct {
	ID  string
	Err error
}

func (e *StopError) Error() string { return fmt.Sprintf("stopped at %s: %v", e.ID, e.Err) }
func (e *StopError) Unwrap() error { return e.Err }

// RunAll runs every mutation of muts, up to Jobs at once (see Jobs for
// which go through -overlay), and returns their results in the order of
// muts. A mutation that survives or is broken does not stop the others.
// done, when not nil, is called with each result as soon as it is known,
// one call at a time. The first error Run returns stops the run: the
// mutations in progress are cancelled and RunAll returns a *StopError.
func (r *Runner) RunAll(ctx context.Context, muts []Mutation, done func(Result)) ([]Result, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	r.mu.Lock()
	r.bins.users = map[binKey]int{}
	for i := range muts {
		r.bins.users[keyOf(muts[i].Test)]++
	}
	r.mu.Unlock()

	results := make([]Result, len(muts))
	var (
		mu   sync.Mutex
		stop error
		wg   sync.WaitGroup
	)
	next := make(chan int)
	for range max(r.Jobs, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				res, err := r.Run(ctx, &muts[i])
				r.releaseBinary(muts[i].Test)
				mu.Lock()
				if err != nil && stop == nil {
					stop = &StopError{ID: muts[i].ID, Err: err}
					cancel()
				}
				stopped := stop != nil
				mu.Unlock()
				if stopped {
					continue
				}
				results[i] = res
				if done != nil {
					r.logMu.Lock()
					done(res)
					r.logMu.Unlock()
				}
			}
		}()
	}
feed:
	for _, i := range r.order(muts) {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if stop != nil {
		return nil, stop
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return results, nil
}

// order returns the indexes of muts in the order RunAll starts them: first
// those applied in place (each runs alone, so none is left for the end),
// then those with no expected time, then the longest expected first, so
// that the last to finish is a short one. Ties keep the list's order.
func (r *Runner) order(muts []Mutation) []int {
	idx := make([]int, len(muts))
	for i := range idx {
		idx[i] = i
	}
	expected := func(i int) time.Duration {
		if d, ok := r.Expected[muts[i].ID]; ok {
			return d
		}
		return math.MaxInt64
	}
	sort.SliceStable(idx, func(a, b int) bool {
		ia, ib := r.inPlace(&muts[idx[a]]), r.inPlace(&muts[idx[b]])
		if ia != ib {
			return ia
		}
		return expected(idx[a]) > expected(idx[b])
	})
	return idx
}

// LoadTimes reads the elapsed times SaveTimes wrote, by mutation id; a
// missing file is no times at all.
func LoadTimes(path string) (map[string]time.Duration, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var secs map[string]float64
	if err := json.Unmarshal(b, &secs); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	times := make(map[string]time.Duration, len(secs))
	for id, s := range secs {
		times[id] = time.Duration(s * float64(time.Second))
	}
	return times, nil
}

// SaveTimes records each result's elapsed time at path, over the times
// already there, replacing the file whole.
func SaveTimes(path string, results []Result) error {
	times, err := LoadTimes(path)
	if err != nil {
		times = nil // a damaged file is only a worse order: start over
	}
	secs := map[string]float64{}
	for id, d := range times {
		secs[id] = d.Seconds()
	}
	for _, res := range results {
		secs[res.Mutation.ID] = math.Round(res.Elapsed.Seconds()*10) / 10
	}
	b, err := json.MarshalIndent(secs, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".mutate-times-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
