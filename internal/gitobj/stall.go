package gitobj

import (
	"context"
	"fmt"
	"io"
	"time"
)

// StalledError is the cause of a fetch cancelled because the remote sent
// nothing for Quiet while signet waited on it.
type StalledError struct{ Quiet time.Duration }

func (e *StalledError) Error() string {
	return fmt.Sprintf("the remote sent nothing for %s", e.Quiet)
}

// stallGuard cancels a context when one wait on the remote lasts longer
// than its limit. Only the waits count: the time signet spends between
// reads (parsing and writing what came) does not, so a long transfer
// that keeps moving is never cut, however long it takes (a first fetch of
// a 10^5-run branch), and a remote that goes quiet is given up on after
// the limit, as git's http.lowSpeedTime does.
type stallGuard struct {
	timer *time.Timer // nil when there is no limit
	limit time.Duration
}

// newStallGuard returns a context derived from parent, a guard that
// cancels it with a *StalledError, and a func that releases both. The
// guard's timer starts stopped: arm starts it.
func newStallGuard(parent context.Context, limit time.Duration) (context.Context, *stallGuard, func()) {
	ctx, cancel := context.WithCancelCause(parent)
	g := &stallGuard{limit: limit}
	if limit > 0 {
		g.timer = time.AfterFunc(limit, func() {
			// When the caller's deadline has come too, it is what ended
			// the fetch (its cancellation may not have run yet).
			if d, ok := parent.Deadline(); ok && !time.Now().Before(d) {
				return
			}
			cancel(&StalledError{Quiet: limit})
		})
		g.timer.Stop()
	}
	return ctx, g, func() {
		if g.timer != nil {
			g.timer.Stop()
		}
		cancel(nil)
	}
}

// arm starts a wait on the remote; rest ends it.
func (g *stallGuard) arm() {
	if g.timer != nil {
		g.timer.Reset(g.limit)
	}
}

func (g *stallGuard) rest() {
	if g.timer != nil {
		g.timer.Stop()
	}
}

// reader counts every read of r as a wait on the remote. Keepalive
// packets (which git upload-pack sends while it prepares a pack) are read
// here, below the sideband demultiplexer, so they count as the remote
// still talking.
func (g *stallGuard) reader(r io.Reader) io.Reader { return guardedReader{r: r, g: g} }

type guardedReader struct {
	r io.Reader
	g *stallGuard
}

func (gr guardedReader) Read(p []byte) (int, error) {
	gr.g.arm()
	defer gr.g.rest()
	return gr.r.Read(p)
}
