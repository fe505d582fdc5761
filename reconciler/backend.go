package reconciler

import "signet.dev/signet/reconciler/backend"

// The backend contract lives in package backend so that backends outside
// this package (reconciler/kube) implement it without an import cycle.
type (
	CheckRun          = backend.CheckRun
	ParticipantReport = backend.ParticipantReport
	CheckReport       = backend.CheckReport
	Backend           = backend.Backend
)
