package main

import (
	"encoding/json"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
	"time"

	"signet.dev/signet/evidence"
	"signet.dev/signet/evidence/audit"
	"signet.dev/signet/signing"
	"signet.dev/signet/specs"
)

// stderrTailLines is how many last lines of a non-Pass outcome's stderr
// the text output shows.
const stderrTailLines = 10

// outcome is one participant's outcome of one check, read from a check
// document the audit verified (never from the reconciler's memory).
type outcome struct {
	Index        int                        `json:"index"`
	Check        string                     `json:"check"`
	Node         string                     `json:"node,omitempty"`
	Verdict      specs.Verdict              `json:"verdict"`
	Reason       string                     `json:"reason,omitempty"`
	Skipped      bool                       `json:"skipped,omitempty"`
	Summary      string                     `json:"summary,omitempty"`
	ExitCode     *int                       `json:"exitCode,omitempty"`
	Signal       string                     `json:"signal,omitempty"`
	Measurements map[string]json.RawMessage `json:"measurements,omitempty"`
	DurationMS   int64                      `json:"durationMs,omitempty"`
	// StderrTail is the last lines of the recorded stderr tail, for a
	// non-Pass outcome only.
	StderrTail string `json:"stderrTail,omitempty"`
}

// outcomesOf lists the outcomes of d's checks, by check index and node;
// a check that never ran is one skipped line. Nil when d has no verified
// admission.
func outcomesOf(d *audit.RunDocuments) []outcome {
	if d == nil || d.Admission == nil {
		return nil
	}
	var out []outcome
	for i, ck := range d.Admission.ProfileObject.Spec.Checks {
		var ce *evidence.CheckEvidence
		if i < len(d.Checks) {
			ce = d.Checks[i]
		}
		if ce == nil {
			o := outcome{Index: i, Check: ck.Name, Skipped: true, Reason: "the check never started"}
			if d.Evidence != nil && i < len(d.Evidence.Checks) {
				o.Verdict = d.Evidence.Checks[i].Verdict
			}
			out = append(out, o)
			continue
		}
		for _, po := range ce.Participants {
			o := outcome{Index: i, Check: ck.Name, Node: po.Node, Verdict: po.Verdict, Reason: po.Reason, ExitCode: po.ExitCode, Signal: po.Signal}
			if !ce.StartedAt.IsZero() && !ce.EndedAt.IsZero() {
				o.DurationMS = ce.EndedAt.Sub(ce.StartedAt).Milliseconds()
			}
			if po.Result != nil {
				o.Summary, o.Measurements = po.Result.Summary, po.Result.Measurements
			}
			if po.Verdict != specs.VerdictPass {
				for _, l := range po.Logs {
					if strings.HasSuffix(path.Base(l.Path), ".stderr.log") {
						o.StderrTail = lastLines(string(d.Logs[d.Rel(l.Path)]), stderrTailLines)
					}
				}
			}
			out = append(out, o)
		}
	}
	return out
}

// lastLines returns the last n lines of s, without a trailing newline.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// printOutcomes writes one block per outcome: check, node, verdict and
// reason, then the summary, measurements, duration and, for a non-Pass,
// the stderr tail.
func printOutcomes(w io.Writer, outs []outcome) {
	if len(outs) == 0 {
		return
	}
	fmt.Fprintln(w, "OUTCOMES")
	for _, o := range outs {
		node := o.Node
		if node == "" {
			node = "-"
		}
		v := orDash(string(o.Verdict))
		if o.Skipped {
			v += " (skipped)"
		}
		fmt.Fprintf(w, "%02d %s on %s: %s", o.Index, o.Check, node, v)
		if o.Reason != "" {
			fmt.Fprintf(w, ": %s", o.Reason)
		}
		fmt.Fprintln(w)
		if o.Summary != "" {
			fmt.Fprintf(w, "   summary: %s\n", indentMore(o.Summary))
		}
		if len(o.Measurements) > 0 {
			var names []string
			for k := range o.Measurements {
				names = append(names, k)
			}
			sort.Strings(names)
			var kv []string
			for _, k := range names {
				kv = append(kv, k+"="+string(o.Measurements[k]))
			}
			fmt.Fprintf(w, "   measurements: %s\n", strings.Join(kv, " "))
		}
		if o.DurationMS > 0 {
			fmt.Fprintf(w, "   duration: %s\n", time.Duration(o.DurationMS)*time.Millisecond)
		}
		if o.StderrTail != "" {
			fmt.Fprintln(w, "   stderr (last lines):")
			for _, l := range strings.Split(o.StderrTail, "\n") {
				fmt.Fprintf(w, "     %s\n", l)
			}
		}
	}
}

// indentMore keeps a multi-line summary under its label.
func indentMore(s string) string { return strings.ReplaceAll(s, "\n", "\n            ") }

// owners names key ids by their owners in policy, "owner (id…)" or the
// short id when the policy records none; with ids, the full id follows.
func owners(policy *signing.TrustPolicy, keys []string, ids bool) []string {
	var out []string
	for _, k := range keys {
		name := policy.Owner(k)
		switch {
		case name == "":
			name = shortRev(k)
		case ids:
			name += " (" + k + ")"
		}
		out = append(out, name)
	}
	return out
}
