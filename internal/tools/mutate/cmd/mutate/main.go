// Command mutate applies each mutation of a checked-in list to signet's
// source, runs only the test named for it and requires that test to fail on
// the named assertion; it restores the source after each one and prints a
// table. See package signet.dev/signet/internal/tools/mutate.
//
// Exit status: 0 when every mutation was caught, 1 when one survived or is
// broken, 2 for a bad list or flags, 3 when the tree could not be restored
// or was changed by someone else meanwhile (read the message: nothing was
// overwritten).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"signet.dev/signet/internal/tools/mutate"
)

func main() { os.Exit(run()) }

func run() int {
	var (
		list     = flag.String("list", "hack/mutations.yaml", "mutation list, relative to -root")
		root     = flag.String("root", ".", "repository root")
		only     = flag.String("only", "", "comma-separated ids to run (default: all)")
		overlay  = flag.Bool("overlay", false, "hand mutated files to go test with -overlay instead of writing the tree (.go files only)")
		jobs     = flag.Int("jobs", 1, "mutations run at once; above 1, mutations of .go files only go through -overlay and the others run in place, alone")
		times    = flag.String("times", "bin/.mutate-times.json", "file of each mutation's last elapsed time, relative to -root, read to start the longest first (empty: none)")
		baseline = flag.Bool("baseline", true, "require each named test to pass without its mutation first")
		timeout  = flag.Duration("timeout", 10*time.Minute, "bound on one go test run, build included")
		verbose  = flag.Bool("v", false, "print the test output of every mutation")
		check    = flag.Bool("check", false, "only check that every target occurs exactly once; run no test")
	)
	flag.Parse()

	muts, err := mutate.LoadList(rootPath(*root, *list))
	if err != nil {
		fmt.Fprintln(os.Stderr, "mutate:", err)
		return 2
	}
	if *only != "" {
		want := map[string]bool{}
		for _, id := range strings.Split(*only, ",") {
			want[strings.TrimSpace(id)] = true
		}
		var sel []mutate.Mutation
		for _, m := range muts {
			if want[m.ID] {
				sel = append(sel, m)
				delete(want, m.ID)
			}
		}
		for id := range want {
			fmt.Fprintf(os.Stderr, "mutate: no mutation %q in %s\n", id, *list)
			return 2
		}
		muts = sel
	}

	if *jobs < 1 {
		fmt.Fprintln(os.Stderr, "mutate: -jobs must be at least 1")
		return 2
	}
	r := &mutate.Runner{
		Root: *root, Timeout: *timeout, Overlay: *overlay, Jobs: *jobs, Baseline: *baseline,
		Journal: rootPath(*root, "bin/.mutate-journal"), Log: os.Stderr,
	}
	defer r.Close()
	if *check {
		bad := 0
		for i := range muts {
			if err := r.Check(&muts[i]); err != nil {
				fmt.Printf("broken %s: %v\n", muts[i].ID, err)
				bad++
			}
		}
		fmt.Printf("%d mutations, %d broken\n", len(muts), bad)
		if bad > 0 {
			return 1
		}
		return 0
	}
	if restored, err := r.Recover(); err != nil {
		fmt.Fprintln(os.Stderr, "mutate: an earlier run left files mutated:", err)
		return 3
	} else if len(restored) > 0 {
		fmt.Fprintln(os.Stderr, "mutate: restored files an earlier run left mutated:", strings.Join(restored, ", "))
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		s := <-sigs
		fmt.Fprintf(os.Stderr, "mutate: %v: stopping the test and restoring the tree\n", s)
		cancel() // kills the go test process groups
		err := r.RestoreAll()
		r.Close()
		if err != nil {
			fmt.Fprintln(os.Stderr, "mutate: RESTORE FAILED:", err)
			os.Exit(3)
		}
		fmt.Fprintln(os.Stderr, "mutate: tree restored")
		os.Exit(130)
	}()

	timesPath := ""
	if *times != "" {
		timesPath = rootPath(*root, *times)
		if r.Expected, err = mutate.LoadTimes(timesPath); err != nil {
			fmt.Fprintln(os.Stderr, "mutate: ignoring earlier times:", err)
		}
	}
	start := time.Now()
	results, err := r.RunAll(ctx, muts, func(res mutate.Result) {
		if *verbose && res.Output != "" {
			fmt.Fprintf(os.Stderr, "---- %s output:\n%s\n", res.Mutation.ID, res.Output)
		}
	})
	if err != nil {
		var stop *mutate.StopError
		if errors.As(err, &stop) {
			fmt.Fprintf(os.Stderr, "\nmutate: STOPPED at %s: %v\n", stop.ID, stop.Err)
		} else {
			fmt.Fprintf(os.Stderr, "\nmutate: STOPPED: %v\n", err)
		}
		if rerr := r.RestoreAll(); rerr != nil {
			fmt.Fprintln(os.Stderr, "mutate: RESTORE FAILED:", rerr)
		}
		return 3
	}
	if timesPath != "" {
		if err := mutate.SaveTimes(timesPath, results); err != nil {
			fmt.Fprintln(os.Stderr, "mutate: could not record times:", err)
		}
	}
	fmt.Println()
	if err := mutate.WriteTable(os.Stdout, results); err != nil {
		fmt.Fprintln(os.Stderr, "mutate:", err)
		return 2
	}
	line, ok := mutate.Summary(results)
	fmt.Printf("\n%s in %s\n", line, time.Since(start).Round(time.Second))
	if !ok {
		return 1
	}
	return 0
}

func rootPath(root, p string) string {
	if strings.HasPrefix(p, "/") {
		return p
	}
	return root + "/" + p
}
