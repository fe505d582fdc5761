package main

// The backend families this binary offers: each registers itself with
// reconciler.RegisterFamily, and the configuration enables them.
import (
	_ "signet.dev/signet/reconciler/kube"
	_ "signet.dev/signet/reconciler/local"
)
