package specs

import (
	"fmt"
	"regexp"
	"strconv"
	"time"
)

// validateStanding checks a standing certification against the profiles of
// the same rendering (docs/reference/standingcertification.md has the
// rules). A profile in broken has findings of its own; the checks against
// it are skipped, not reported.
func validateStanding(o *Object, profiles map[string]*Object, broken map[string]bool) []Finding {
	st := o.Standing
	r := &reporter{src: o.Source, pos: o.positions}
	r.dnsLabel("metadata.name", st.Metadata.Name)
	s := st.Spec
	prof := r.profileRef("spec.profile", s.Profile, profiles, broken)

	switch byNodes, bySelector := len(s.Nodes) > 0, len(s.Selector) > 0; {
	case byNodes && bySelector:
		r.addf("spec", "names nodes and a selector: the pool is either nodes or selector, never both")
	case !byNodes && !bySelector:
		r.addf("spec", "names no pool: set either nodes or selector")
	}
	r.nodeNames("spec.nodes", s.Nodes)
	r.selector("spec.selector", s.Selector)

	if s.NodesPerRun < 1 {
		r.addf("spec.nodesPerRun", "%d is less than 1", s.NodesPerRun)
	} else if len(s.Nodes) > 0 && s.NodesPerRun > len(s.Nodes) {
		r.addf("spec.nodesPerRun", "%d is more than the %d nodes of the pool", s.NodesPerRun, len(s.Nodes))
	}

	every := r.interval("spec.every", s.Every)
	if every > 0 && every < MinInterval {
		r.addf("spec.every", "%q is shorter than %s", string(s.Every), MinInterval)
	}
	r.interval("spec.beforeExpiry", s.BeforeExpiry)
	seen := map[Trigger]int{}
	for i, t := range s.Triggers {
		f := fmt.Sprintf("spec.triggers[%d]", i)
		switch t {
		case TriggerIdentity, TriggerJoined, TriggerExpired:
		default:
			r.addf(f, "%q is not a trigger (%s, %s or %s)", t, TriggerIdentity, TriggerJoined, TriggerExpired)
		}
		if j, dup := seen[t]; dup {
			r.addf(f, "%q is also spec.triggers[%d]", t, j)
		} else {
			seen[t] = i
		}
	}
	if s.Every == "" && s.BeforeExpiry == "" && len(s.Triggers) == 0 {
		r.addf("spec", "never fires: set every, beforeExpiry or triggers")
	}

	b := s.Budget
	switch {
	case b.MaxNodes != 0 && b.MaxPercent != 0:
		r.addf("spec.budget", "sets maxNodes and maxPercent: set exactly one")
	case b.MaxNodes == 0 && b.MaxPercent == 0:
		r.addf("spec.budget", "is required: set maxNodes or maxPercent (the pool's nodes signet may hold at once)")
	case b.MaxNodes < 0:
		r.addf("spec.budget.maxNodes", "%d is less than 1", b.MaxNodes)
	case b.MaxPercent < 0 || b.MaxPercent > 100:
		r.addf("spec.budget.maxPercent", "%d is not a percentage from 1 to 100", b.MaxPercent)
	}

	if prof != nil {
		pa := prof.Spec.Participants
		if s.NodesPerRun > 0 && (s.NodesPerRun < pa.Min || s.NodesPerRun > pa.Max) {
			r.addf("spec.nodesPerRun", "%d nodes per run; profile %s allows %d to %d", s.NodesPerRun, s.Profile, pa.Min, pa.Max)
		}
		if b.MaxNodes > 0 && b.MaxNodes < pa.Min {
			r.addf("spec.budget.maxNodes", "%d is less than the %d nodes profile %s needs per run: it would never fire", b.MaxNodes, pa.Min, s.Profile)
		}
		if prof.IsLocal() && len(s.Selector) > 0 {
			r.addf("spec.selector", "profile %s is local: name this machine in nodes (its hostname or localhost), not a selector", s.Profile)
		}
		if prof.IsLocal() && len(s.Nodes) > 1 {
			r.addf("spec.nodes", "profile %s is local: its only participant is this machine (its hostname or localhost)", s.Profile)
		}
	}

	seenRun := map[string]int{}
	for i, run := range s.Release {
		f := fmt.Sprintf("spec.release[%d]", i)
		if _, ok := FiringSequence(st.Metadata.Name, run); !ok {
			r.addf(f, "%q is not a firing of %s (%s-<sequence>)", run, st.Metadata.Name, st.Metadata.Name)
		}
		if j, dup := seenRun[run]; dup {
			r.addf(f, "%q is also spec.release[%d]", run, j)
		} else {
			seenRun[run] = i
		}
	}
	return r.findings
}

// interval reports an Interval that is set but not a positive whole number
// of seconds, and returns its duration (0 when unset or invalid).
func (r *reporter) interval(field string, i Interval) time.Duration {
	if i == "" {
		return 0
	}
	d, err := time.ParseDuration(string(i))
	switch {
	case err != nil:
		r.addf(field, "%q is not a duration like 168h or 90m", string(i))
	case d <= 0:
		r.addf(field, "%q is not a positive duration", string(i))
	case d%time.Second != 0:
		r.addf(field, "%q is not a whole number of seconds", string(i))
	default:
		return d
	}
	return 0
}

var sequenceRE = regexp.MustCompile(`^[1-9][0-9]{0,17}$`)

// FiringRunID is the run ID of firing seq (from 1) of standing
// certification name: "<name>-<seq>".
func FiringRunID(name string, seq int64) string {
	return name + "-" + strconv.FormatInt(seq, 10)
}

// FiringSequence returns the sequence number of run ID run when it names a
// firing of standing certification name (FiringRunID).
func FiringSequence(name, run string) (int64, bool) {
	if len(run) <= len(name)+1 || run[:len(name)+1] != name+"-" || !sequenceRE.MatchString(run[len(name)+1:]) {
		return 0, false
	}
	n, err := strconv.ParseInt(run[len(name)+1:], 10, 64)
	return n, err == nil
}

// Nodes is the budget in nodes for a pool of size nodes: MaxNodes, or
// MaxPercent of size rounded down (0 when that rounds to 0: never fire
// rather than exceed what was allowed). The reconciler decides with it and
// the audit checks every firing with it.
func (b Budget) Nodes(size int) int {
	if b.MaxNodes > 0 {
		return b.MaxNodes
	}
	return b.MaxPercent * size / 100
}

// requestNotFiring reports a request whose name is the run ID of a firing
// of one of standings (FiringRunID): the request's run and that firing
// would collide on the run-ID index, and the standing certification could
// never fire that sequence number.
func requestNotFiring(o *Object, standings []string) []Finding {
	r := &reporter{src: o.Source, pos: o.positions}
	for _, name := range standings {
		if seq, ok := FiringSequence(name, o.Name); ok {
			r.addf("metadata.name", "%q is the run ID of firing %d of %s: a request may not take a standing certification's run ID", o.Name, seq, SubjectName(KindStanding, name, ""))
		}
	}
	return r.findings
}
