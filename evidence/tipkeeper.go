package evidence

import (
	"context"
	"errors"
)

var (
	// ErrUnanchored means the branch exists but the store has no tip to
	// hold it to: StateDir remembers none, the TipKeeper keeps none and no
	// tip is pinned. It cannot tell the branch from a rolled-back one, so
	// it refuses to open until a person pins a tip (StoreOptions.Pinned)
	// or accepts the current one (StoreOptions.AcceptCurrentTip).
	ErrUnanchored = errors.New("evidence: no remembered or pinned tip for an existing evidence branch")
	// ErrTipConflict means a TipKeeper's kept tip changed since the store
	// read it (another writer, or a stale one), and the store's new tip
	// does not descend from the one kept now. Nothing was overwritten; the
	// next Refresh holds the remote to the newly kept tip.
	ErrTipConflict = errors.New("evidence: the kept tip changed under the store")
)

// KeptTip is what a TipKeeper keeps: the remote (as shown, credentials
// removed) and branch it is for, the tip, and the keeper's version of the
// record. The zero KeptTip (Tip "") means nothing is kept.
type KeptTip struct {
	URL    string
	Branch string
	Tip    string
	// Version is the keeper's compare-and-swap token (a Kubernetes
	// resourceVersion); opaque to the store.
	Version string
}

// TipKeeper keeps the last tip a Store pushed or verified where a
// restart of the store cannot lose it (an object of the cluster the
// reconciler runs in, while StateDir is an emptyDir). The Store reads it
// at Open and, after every new verified tip, swaps it. Implementations
// live with what they wrap (reconciler/kube); the store names none.
type TipKeeper interface {
	// LoadTip returns the kept tip; the zero KeptTip (Version set) when
	// nothing is kept yet. An error means the keeper could not be read:
	// the store does not open.
	LoadTip(ctx context.Context) (KeptTip, error)
	// SwapTip replaces old (as LoadTip or SwapTip returned it, Version
	// included) with next and returns the new record. When the kept record
	// is no longer old it fails with an error wrapping ErrTipConflict and
	// changes nothing: never a blind overwrite.
	SwapTip(ctx context.Context, old, next KeptTip) (KeptTip, error)
	// String names where the tip is kept, for messages.
	String() string
}
