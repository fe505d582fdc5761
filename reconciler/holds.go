package reconciler

import (
	"fmt"
	"sort"
	"strings"
	"sync"
)

// holds records which run holds each node: a node is never in two runs.
// Running runs hold all their participants; a finished run keeps holding
// the nodes it retained (non-Pass) until an approved release. The table is
// rebuilt from the evidence branch at start-up.
type holds struct {
	mu    sync.Mutex
	nodes map[string]hold
}

type hold struct {
	run      string
	retained bool
	// release is the object whose release action frees a retained node
	// ("CertificationRequest/<run>", or the standing certification that
	// fired the run).
	release string
}

func newHolds() *holds { return &holds{nodes: map[string]hold{}} }

// reserve takes every node for run, or none: if any node is held by
// another run it returns an error naming the node and the holder.
func (h *holds) reserve(run string, nodes []string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, n := range nodes {
		if cur, ok := h.nodes[n]; ok && cur.run != run {
			state := "running"
			if cur.retained {
				state = "retained after a non-passing verdict until an approved release: signet sign --key KEY --object " + cur.release + " --action release"
				if strings.HasPrefix(cur.release, "StandingCertification/") {
					state += " (with " + cur.run + " in its spec.release)"
				}
			}
			return fmt.Errorf("node %q is held by run %q (%s)", n, cur.run, state)
		}
	}
	for _, n := range nodes {
		h.nodes[n] = hold{run: run}
	}
	return nil
}

// release frees nodes held by run. Nodes held by another run are untouched.
func (h *holds) release(run string, nodes []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, n := range nodes {
		if cur, ok := h.nodes[n]; ok && cur.run == run {
			delete(h.nodes, n)
		}
	}
}

// retain marks nodes of run as retained until the release action of
// object release ("KIND/NAME") is approved.
func (h *holds) retain(run string, nodes []string, release string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, n := range nodes {
		h.nodes[n] = hold{run: run, retained: true, release: release}
	}
}

// retainedBy lists the nodes run still retains, sorted.
func (h *holds) retainedBy(run string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for n, cur := range h.nodes {
		if cur.run == run && cur.retained {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// snapshot returns node → holding run.
func (h *holds) snapshot() map[string]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]string, len(h.nodes))
	for n, cur := range h.nodes {
		out[n] = cur.run
	}
	return out
}
