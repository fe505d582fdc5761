package reconciler

import (
	"context"
	"fmt"
	"strings"

	"signet.dev/signet/evidence"
	"signet.dev/signet/reconciler/backend"
	"signet.dev/signet/signing"
	"signet.dev/signet/specs"
)

// holdIdentity re-reads every participant's node identity at the end of a
// check and compares it with the node snapshot of the admission record
// (issue 21, finding 7): UID, systemUUID, bootID, kernel, GPU product and
// driver. A participant whose node changed (rebooted, driver or firmware
// swapped, deleted and re-created) or cannot be read loses its result: its
// termination carries ResultRefused with the difference, so the check is
// Error for that node, and the certification, written only for a Pass, is
// never written for an identity the evidence did not record. Families
// without a Fleet (local) are not re-read.
func (r *Reconciler) holdIdentity(ctx context.Context, rs *runState, cr *CheckRun, report *CheckReport) {
	if report == nil {
		return
	}
	fleet := r.fleetFor(&rs.adm.ProfileObject)
	if fleet == nil {
		return
	}
	// The nodes now, read together (one request where the Fleet batches).
	var nodes []string
	for _, part := range cr.Participants {
		nodes = append(nodes, part.Node)
	}
	now, readErrs := backend.Snapshots(ctx, fleet, r.cfg.Cluster, rs.id, nodes)
	for j := range report.Participants {
		p := &report.Participants[j]
		var why string
		for i, part := range cr.Participants {
			if part.Node != p.Node {
				continue
			}
			if readErrs[i] != nil {
				why = "node not readable: " + readErrs[i].Error()
			} else {
				why = r.identityChange(ctx, rs, part, now[i])
			}
		}
		if why == "" {
			continue
		}
		why = "node identity changed during the check: " + why
		r.log.Warn("node identity changed; result refused", "run", rs.id, "check", cr.Check.Name, "node", p.Node, "reason", why)
		p.Result = nil
		p.Termination.ResultRefused = why
		if p.Termination.Reason == "" {
			p.Termination.Reason = why
		} else {
			p.Termination.Reason = why + "; " + p.Termination.Reason
		}
	}
}

// identityChange says how part's node, now as read, differs from its
// admission snapshot; "" when it does not.
func (r *Reconciler) identityChange(ctx context.Context, rs *runState, part evidence.Participant, now *evidence.NodeSnapshot) string {
	b, err := r.store.Read(ctx, part.Snapshot.Path)
	if err != nil {
		return fmt.Sprintf("admission snapshot %s not readable: %v", part.Snapshot.Path, err)
	}
	if got := specs.DigestOf(b); got != part.Snapshot.Digest {
		return fmt.Sprintf("admission snapshot %s has digest %s, admitted %s", part.Snapshot.Path, got, part.Snapshot.Digest)
	}
	var was evidence.NodeSnapshot
	if err := signing.StrictUnmarshal(b, &was); err != nil {
		return fmt.Sprintf("admission snapshot %s: %v", part.Snapshot.Path, err)
	}
	var diffs []string
	for _, f := range evidence.IdentityChanges(was, *now) {
		diffs = append(diffs, fmt.Sprintf("%s %q, admitted %q", f.Field, f.Now, f.Was))
	}
	return strings.Join(diffs, ", ")
}
