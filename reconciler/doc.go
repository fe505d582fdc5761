// Package reconciler is signet's loop (DESIGN §5): it reads the spec
// repository and the trust policy, admits approved requests through an
// ordered list of gates (admission.go), and drives each admitted run
// through reservation, checks, evidence, release and receipt on the
// evidence branch, resuming from that branch alone after a restart.
//
// Nodes and checks belong to backend families (reconciler/backend.Family:
// a Fleet and its backends by check kind), which register themselves with
// RegisterFamily from their own packages (reconciler/local,
// reconciler/kube) and are enabled by the configuration. A run uses the
// one family that serves every check kind of its profile.
//
// The package refuses to:
//   - name a backend family: it imports none, and decides nothing by
//     which family a run uses (adding one touches no file here);
//   - admit a request a gate stops, or set a request's condition anywhere
//     but in one place (pass.settle) from the gates' typed errors;
//   - take a step of a run before the record of the step before it is
//     durable on the evidence branch, create a check's backend twice, or
//     trust a record it reads back that its own key did not sign;
//   - read the spec repository's current state for a run already
//     admitted: a run is built from its admission record and intents;
//   - start a pass for a trigger (POST /reconcile, a webhook) that does
//     not carry its token or signature, keep more than one triggered pass
//     pending, or serve a request on a listener without read, write and
//     idle timeouts and a header bound (server.go).
package reconciler
