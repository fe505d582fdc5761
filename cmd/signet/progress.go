package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/pflag"

	"signet.dev/signet/evidence/audit"
)

// progressOptions are --progress-interval of the commands that audit a
// whole evidence branch (audit, report): an audit of 10^5 runs takes tens
// of minutes, and a command that prints nothing for that long looks hung.
type progressOptions struct {
	Interval time.Duration
}

// defaultProgressInterval: an audit that ends sooner prints no progress.
const defaultProgressInterval = 10 * time.Second

// AddFlags registers --progress-interval.
func (o *progressOptions) AddFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&o.Interval, "progress-interval", defaultProgressInterval,
		"print how far the audit has come to stderr at most this often, the first line after this long (an audit that ends sooner prints none); 0 for never")
}

// validate refuses a negative interval.
func (o *progressOptions) validate() error {
	if o.Interval < 0 {
		return &usageError{fmt.Errorf("--progress-interval %s: want 0 (never) or a positive duration", o.Interval)}
	}
	return nil
}

// reporter returns the audit.Options.Progress that prints to w, or nil
// when the interval is 0. Lines go to stderr so that stdout (the report,
// or -o json) stays what a machine reads.
func (o *progressOptions) reporter(w io.Writer) func(audit.Progress) {
	if o.Interval <= 0 {
		return nil
	}
	start := time.Now()
	last := start
	return func(p audit.Progress) {
		t := time.Now()
		if t.Sub(last) < o.Interval {
			return
		}
		last = t
		fmt.Fprintf(w, "audit: %s (%s)\n", describeProgress(p), t.Sub(start).Round(time.Second))
	}
}

// describeProgress says where an audit is, in words.
func describeProgress(p audit.Progress) string {
	switch p.Phase {
	case audit.PhaseHistory:
		return fmt.Sprintf("reading the history: %d commits back from the tip", p.Commits)
	case audit.PhaseReplay:
		pct := 0
		if p.Total > 0 {
			pct = p.Commits * 100 / p.Total
		}
		return fmt.Sprintf("checking commit %d of %d (%d%%), %d finished runs checked", p.Commits, p.Total, pct, p.Runs)
	default:
		return fmt.Sprintf("%s, %d finished runs checked", p.Phase, p.Runs)
	}
}
