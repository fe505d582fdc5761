// Command synth writes evidencetest's synthetic evidence branch of -runs
// finished runs (cached under $TMPDIR, as the benchmarks that read it
// find it) and prints where it is, so that a measurement of a long branch
// (hack/bench-scale.sh) does not count the writer's memory or time in the
// process it measures. A branch already cached is only printed.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"time"

	"signet.dev/signet/internal/testing/evidencetest"
)

func main() {
	runs := flag.Int("runs", 1000, "finished runs on the branch")
	checks := flag.Int("checks", 4, "checks per run (the benchmarks read 4)")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the writing to this file")
	flag.Parse()
	if *runs < 1 || *checks < 1 {
		fmt.Fprintln(os.Stderr, "synth: -runs and -checks must be at least 1")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "synth:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	start := time.Now()
	s, err := evidencetest.SynthesizeCached(ctx, *runs, *checks)
	if err != nil {
		fmt.Fprintln(os.Stderr, "synth:", err)
		os.Exit(1)
	}
	dir := filepath.Dir(s.Remote)
	out, _ := json.MarshalIndent(map[string]any{
		"dir": dir, "remote": s.Remote, "trustPolicy": filepath.Join(dir, "trust.yaml"),
		"runs": s.Runs, "documents": s.Documents, "seconds": time.Since(start).Seconds(),
	}, "", "  ")
	fmt.Println(string(out))
}
