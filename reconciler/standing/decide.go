// Package standing decides when a StandingCertification fires and for
// which nodes (docs/proposals/standing-certification.md). Decide is a pure
// function of the standing certification, the pool's facts and the time, so
// that two reconcilers that see the same evidence and cluster decide the
// same firings, and so that the audit can recompute a firing's reasons.
package standing

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"signet.dev/signet/evidence"
	"signet.dev/signet/specs"
)

// Identity is what a node is, as a snapshot records it: a change of any
// identity field (evidence.IdentityChanges) is an identity trigger.
type Identity = evidence.NodeSnapshot

// LastRun is a node's latest finished run of the standing certification's
// profile, as the evidence branch records it.
type LastRun struct {
	Run     string        `json:"run"`
	EndedAt time.Time     `json:"endedAt"`
	Verdict specs.Verdict `json:"verdict"`
	// CertifiedUntil is the expiry of the certification the run gave the
	// node; zero when it gave none (not a Pass, or labelling off).
	CertifiedUntil time.Time `json:"certifiedUntil,omitzero"`
	// Identity is the node as the run's admission snapshot recorded it.
	Identity Identity `json:"identity"`
}

// Node is one pool node's facts at decision time.
type Node struct {
	Name     string   `json:"name"`
	Identity Identity `json:"identity"`
	// Last is nil when the node has no finished run of the profile.
	Last *LastRun `json:"last,omitempty"`
	// Held: signet holds the node (reserved by a run without a receipt,
	// or retained after a non-Pass until an approved release). Held nodes
	// count against the budget and are never due.
	Held bool `json:"held,omitempty"`
	// Claimed: a firing record names the node and its run has no receipt
	// yet (it may not be reserved yet). Claimed nodes count against the
	// budget and are never due.
	Claimed bool `json:"claimed,omitempty"`
	// Busy: the node cannot be reserved now (not Ready, a GPU pod runs).
	// A busy node stays due and is passed over.
	Busy bool `json:"busy,omitempty"`
}

// Reason kinds, as a firing records them (evidence.DueJoined, …).
const (
	ReasonJoined   = evidence.DueJoined
	ReasonSchedule = evidence.DueSchedule
	ReasonExpiry   = evidence.DueExpiry
	ReasonExpired  = evidence.DueExpired
	ReasonIdentity = evidence.DueIdentity
	ReasonFailed   = evidence.DueFailed
)

// Reason is why one node is due: its kind, the run it refers to (none for
// joined) and the words a person reads. It is the firing record's type, so
// that a firing records exactly what Decide returned.
type Reason = evidence.DueReason

// Due is a node that is due, since when, and why.
type Due struct {
	Node   string    `json:"node"`
	Since  time.Time `json:"since"`
	Reason Reason    `json:"reason"`
}

// Decision is what one standing certification does now.
type Decision struct {
	// PoolSize is the number of pool nodes, the denominator of a
	// percentage budget.
	PoolSize int `json:"poolSize"`
	// Allowed is the budget in nodes; InUse the pool nodes held or claimed.
	Allowed int `json:"allowed"`
	InUse   int `json:"inUse"`
	// Due are the due nodes, first the one to certify first.
	Due []Due `json:"due,omitempty"`
	// Firings are the groups to fire now, in order; each has between the
	// profile's minimum and NodesPerRun nodes, and InUse plus all their
	// nodes never exceeds Allowed.
	Firings [][]Due `json:"firings,omitempty"`
	// Next is when the next node not yet due becomes due; zero when none
	// will by time alone.
	Next time.Time `json:"next,omitzero"`
	// Waiting says why due nodes were not fired (budget spent, nodes
	// busy); empty when all were.
	Waiting string `json:"waiting,omitempty"`
}

// Decide returns the firings of spec over pool at now. minNodes is the
// profile's participants.min: a group smaller than that is not fired.
// The order is deterministic: nodes due earliest first (never certified
// first of all, as the oldest), then by name.
func Decide(spec specs.StandingSpec, minNodes int, pool []Node, now time.Time) Decision {
	every, _ := intervalOf(spec.Every)
	before, _ := intervalOf(spec.BeforeExpiry)
	triggers := map[specs.Trigger]bool{}
	for _, t := range spec.Triggers {
		triggers[t] = true
	}
	d := Decision{PoolSize: len(pool), Allowed: Allowed(spec.Budget, len(pool))}
	for _, n := range pool {
		if n.Held || n.Claimed {
			d.InUse++
			continue
		}
		due, next := dueOf(n, every, before, triggers, now)
		if due != nil {
			d.Due = append(d.Due, *due)
		} else if !next.IsZero() && (d.Next.IsZero() || next.Before(d.Next)) {
			d.Next = next
		}
	}
	slices.SortFunc(d.Due, func(a, b Due) int {
		return cmp.Or(a.Since.Compare(b.Since), cmp.Compare(a.Node, b.Node))
	})
	busy := map[string]bool{}
	for _, n := range pool {
		busy[n.Name] = n.Busy
	}
	free := d.Allowed - d.InUse
	var group []Due
	skippedBusy := 0
	for _, due := range d.Due {
		if busy[due.Node] {
			skippedBusy++
			continue
		}
		if free <= 0 {
			break
		}
		group = append(group, due)
		free--
		if len(group) == spec.NodesPerRun {
			d.Firings = append(d.Firings, group)
			group = nil
		}
	}
	if len(group) > 0 && len(group) >= max(minNodes, 1) {
		d.Firings = append(d.Firings, group)
		group = nil
	}
	fired := 0
	for _, f := range d.Firings {
		fired += len(f)
	}
	if waiting := len(d.Due) - fired; waiting > 0 {
		d.Waiting = fmt.Sprintf("%d due nodes wait: budget %d, %d held or claimed, %d busy", waiting, d.Allowed, d.InUse, skippedBusy)
	}
	return d
}

// Allowed is the budget in nodes for a pool of size nodes
// (specs.Budget.Nodes, which the audit checks firings with).
func Allowed(b specs.Budget, size int) int { return b.Nodes(size) }

// dueOf returns why n is due at now, or nil and when it becomes due by time
// alone (zero when never).
func dueOf(n Node, every, before time.Duration, triggers map[specs.Trigger]bool, now time.Time) (*Due, time.Time) {
	if n.Last == nil {
		if triggers[specs.TriggerJoined] || every > 0 {
			// Never certified by this profile: the oldest of all.
			return &Due{Node: n.Name, Reason: Reason{Kind: ReasonJoined, Detail: "no run of the profile covers the node"}}, time.Time{}
		}
		return nil, time.Time{}
	}
	last := n.Last
	if last.Verdict != specs.VerdictPass {
		// Released after a non-Pass: not certified, due at once.
		return &Due{Node: n.Name, Since: last.EndedAt, Reason: Reason{Kind: ReasonFailed, Run: last.Run,
			Detail: fmt.Sprintf("run %s ended %s for the node, which is released and not certified", last.Run, last.Verdict)}}, time.Time{}
	}
	if triggers[specs.TriggerIdentity] {
		if ch := evidence.IdentityChanges(last.Identity, n.Identity); len(ch) > 0 {
			var words []string
			for _, f := range ch {
				words = append(words, fmt.Sprintf("%s: %q → %q", f.Field, f.Was, f.Now))
			}
			return &Due{Node: n.Name, Since: last.EndedAt, Reason: Reason{Kind: ReasonIdentity, Run: last.Run,
				Detail: fmt.Sprintf("identity changed since run %s: %s", last.Run, strings.Join(words, ", "))}}, time.Time{}
		}
	}
	var candidates []Due
	if triggers[specs.TriggerExpired] && !last.CertifiedUntil.IsZero() && !now.Before(last.CertifiedUntil) {
		candidates = append(candidates, Due{Node: n.Name, Since: last.CertifiedUntil, Reason: Reason{Kind: ReasonExpired, Run: last.Run,
			Detail: fmt.Sprintf("certification of run %s expired at %s", last.Run, last.CertifiedUntil.UTC().Format(time.RFC3339))}})
	}
	var next time.Time
	if before > 0 && !last.CertifiedUntil.IsZero() {
		at := last.CertifiedUntil.Add(-before)
		if !now.Before(at) {
			candidates = append(candidates, Due{Node: n.Name, Since: at, Reason: Reason{Kind: ReasonExpiry, Run: last.Run,
				Detail: fmt.Sprintf("certification of run %s expires at %s, within %s", last.Run, last.CertifiedUntil.UTC().Format(time.RFC3339), before)}})
		} else {
			next = at
		}
	}
	if every > 0 {
		at := last.EndedAt.Add(every)
		if !now.Before(at) {
			candidates = append(candidates, Due{Node: n.Name, Since: at, Reason: Reason{Kind: ReasonSchedule, Run: last.Run,
				Detail: fmt.Sprintf("run %s ended at %s, more than %s ago", last.Run, last.EndedAt.UTC().Format(time.RFC3339), every)}})
		} else if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	if len(candidates) == 0 {
		return nil, next
	}
	// The reason given is the first found (expired, then expiry, then
	// schedule); the node is due since the earliest of them.
	due := candidates[0]
	for _, c := range candidates[1:] {
		if c.Since.Before(due.Since) {
			due.Since = c.Since
		}
	}
	return &due, time.Time{}
}

func intervalOf(i specs.Interval) (time.Duration, error) {
	if i == "" {
		return 0, nil
	}
	return i.Duration()
}
