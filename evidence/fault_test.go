package evidence

import (
	"context"
	"crypto/rand"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/internal/gitobj"
	"signet.dev/signet/internal/testing/faultproxy"
	"signet.dev/signet/internal/testing/gittest"
)

// faultTimeout is StoreOptions.Timeout in the fault tests, and faultSlack
// what an Append may take beyond it: a correctness bound (no socket
// timeout spent per retry), not a benchmark, so it is generous.
const (
	faultTimeout = 3 * time.Second
	faultSlack   = 5 * time.Second
)

// TestFaultStore appends through a proxy that misbehaves, heals it, and
// checks the branch with stock git: every document exactly once, added by
// exactly one commit, no file changed or deleted, `git fsck --strict`
// clean. While the remote misbehaves an Append returns within its Timeout
// (or succeeds, when the fault cannot hide the outcome); once it heals the
// store works again without being reopened.
func TestFaultStore(t *testing.T) {
	tests := []struct {
		name string
		// prepare runs before the fault with the competitor that pushes
		// directly to the server.
		prepare func(t *testing.T, c *faultproxy.Competitor)
		fault   func(c *faultproxy.Competitor) faultproxy.Fault
		// mayLand: the Append under the fault may succeed (its push
		// reaches the server); otherwise it must fail as unreachable.
		mayLand bool
		// mustLand: the Append under the fault must succeed.
		mustLand bool
		// timeout overrides faultTimeout.
		timeout time.Duration
	}{
		{name: "refuse", fault: func(*faultproxy.Competitor) faultproxy.Fault { return faultproxy.Fault{Kind: faultproxy.Refuse} }},
		{name: "stall", fault: func(*faultproxy.Competitor) faultproxy.Fault { return faultproxy.Fault{Kind: faultproxy.Stall} }},
		{
			// Another writer added a large file: the store must fetch a
			// pack, and the connection is reset in its middle.
			name: "reset-mid-pack",
			prepare: func(t *testing.T, c *faultproxy.Competitor) {
				require.NoError(t, c.PushFile("big/blob", randomBytes(t, 256<<10)))
			},
			fault: func(*faultproxy.Competitor) faultproxy.Fault {
				return faultproxy.Fault{Kind: faultproxy.Reset, After: 32 << 10}
			},
		},
		{
			// The push reaches the server but its answer never comes back:
			// the store must recognize its own commit on the next fetch and
			// neither push it again nor report a conflict with itself.
			name: "reset-push-answer",
			fault: func(*faultproxy.Competitor) faultproxy.Fault {
				return faultproxy.Fault{Kind: faultproxy.Reset, After: 0}
			},
			mayLand: true,
		},
		{
			// A middlebox answers the push "200 OK" with an empty body and
			// drops it: the store must not take the silence for success.
			name:  "swallow-push",
			fault: func(*faultproxy.Competitor) faultproxy.Fault { return faultproxy.Fault{Kind: faultproxy.Swallow} },
		},
		{
			// Three pushes in a row lose the compare-and-swap: the store
			// re-fetches and re-applies on the competitor's tip each time.
			name: "race",
			fault: func(c *faultproxy.Competitor) faultproxy.Fault {
				n := 0
				return faultproxy.Fault{Kind: faultproxy.Race, Race: func() error {
					if n++; n > 3 {
						return nil
					}
					return c.Push()
				}}
			},
			// Each competing push is several stock git commands.
			mayLand: true, mustLand: true, timeout: time.Minute,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := gittest.NewHTTPServer(t)
			url, dir := srv.NewRepo("evidence")
			proxy := faultproxy.New(t, srv.URL())
			signer, _ := testSigner(t)
			opts := testOptions(t, proxy.URL()+"/evidence.git", signer)
			opts.Timeout = faultTimeout
			if tt.timeout != 0 {
				opts.Timeout = tt.timeout
			}
			s := openStore(t, opts)
			comp := faultproxy.NewCompetitor(t, url, DefaultBranch)
			ctx := t.Context()

			before := runFiles("c1", "before", 3, 200)
			_, err := s.Append(ctx, "before", before)
			require.NoError(t, err)
			if tt.prepare != nil {
				tt.prepare(t, comp)
			}

			during := runFiles("c1", "during", 3, 200)
			requests := proxy.Requests()
			proxy.Set(tt.fault(comp))
			start := time.Now()
			_, err = s.Append(ctx, "during", during)
			elapsed := time.Since(start)
			assert.Less(t, elapsed, opts.Timeout+faultSlack, "an Append under a %s fault must end within its Timeout", tt.name)
			if tt.name == "refuse" {
				// The kernel refuses: no request reached the proxy.
				assert.Equal(t, requests, proxy.Requests())
			} else {
				assert.Positive(t, proxy.Faulted(), "the fault was never applied")
			}
			switch {
			case tt.mustLand:
				require.NoError(t, err)
			case err == nil:
				assert.True(t, tt.mayLand, "an Append through a %s fault cannot succeed", tt.name)
			default:
				require.ErrorIs(t, err, ErrUnreachable)
				assert.NotErrorIs(t, err, ErrExists)
			}
			landed := err == nil

			proxy.Heal()
			healed := time.Now()
			if !landed {
				// The caller retries the step, as the reconciler does. A
				// push that landed unheard makes the retry find its own
				// documents: ErrExists, and they are on the branch.
				for {
					_, err = s.Append(ctx, "during (retry)", during)
					if err == nil || errors.Is(err, ErrExists) {
						break
					}
					t.Logf("retry after heal: %v", err)
					require.Less(t, time.Since(healed), 30*time.Second, "the store did not resume after the remote healed: %v", err)
				}
			}
			t.Logf("fault=%s resume_after=%s layer=store", tt.name, time.Since(healed).Round(time.Millisecond))
			after := runFiles("c1", "after", 2, 200)
			_, err = s.Append(ctx, "after", after)
			require.NoError(t, err)

			var want []string
			for _, f := range slices.Concat(before, during, after) {
				want = append(want, f.Path)
			}
			want = append(want, comp.Files()...)
			checkBranch(t, dir, DefaultBranch, want)
			require.NoError(t, s.Close())
			gittest.Git(t, filepath.Join(opts.StateDir, mirrorDir), "fsck", "--strict", "--no-dangling")
		})
	}
}

// TestFaultStallBoundsOpenAndRefresh: Open and Refresh against a remote
// that never answers end within the Timeout too.
func TestFaultStallBoundsOpenAndRefresh(t *testing.T) {
	srv := gittest.NewHTTPServer(t)
	srv.NewRepo("evidence")
	proxy := faultproxy.New(t, srv.URL())
	signer, _ := testSigner(t)
	opts := testOptions(t, proxy.URL()+"/evidence.git", signer)
	opts.Timeout = faultTimeout
	s := openStore(t, opts)

	proxy.Set(faultproxy.Fault{Kind: faultproxy.Stall})
	start := time.Now()
	err := s.Refresh(context.Background())
	assert.Less(t, time.Since(start), faultTimeout+faultSlack)
	require.ErrorIs(t, err, ErrUnreachable)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	opts2 := testOptions(t, proxy.URL()+"/evidence.git", signer)
	opts2.Timeout = faultTimeout
	start = time.Now()
	_, err = Open(context.Background(), opts2)
	assert.Less(t, time.Since(start), faultTimeout+faultSlack)
	require.ErrorIs(t, err, ErrUnreachable)

	proxy.Heal()
	require.NoError(t, s.Refresh(context.Background()))
}

// TestFaultFirstFetchOutlastsTimeout: a new store's first fetch brings the
// whole branch, which on a long branch takes longer than Timeout, the
// bound of one append (issue 19: a new reconciler could not open a
// 10^5-run branch, a 1.4 GB pack, within the 2 minutes its appends get,
// and so restarted forever). Through a link so slow that the fetch takes
// several Timeouts, Open succeeds: the remote never goes quiet for a
// Timeout. A remote that goes quiet in the middle of the pack is given up
// on about a Timeout later, and a later Open in the same StateDir fetches
// it whole.
func TestFaultFirstFetchOutlastsTimeout(t *testing.T) {
	const timeout = 400 * time.Millisecond
	srv := gittest.NewHTTPServer(t)
	url, dir := srv.NewRepo("evidence")
	signer, _ := testSigner(t)
	writer := openStore(t, testOptions(t, url, signer))
	_, err := writer.Append(t.Context(), "first", runFiles("c1", "first", 1, 200))
	require.NoError(t, err)
	comp := faultproxy.NewCompetitor(t, url, DefaultBranch)
	require.NoError(t, comp.PushFile("big/blob", randomBytes(t, 512<<10)))
	tip := strings.TrimSpace(gittest.Git(t, dir, "rev-parse", DefaultBranch))

	proxy := faultproxy.New(t, srv.URL())
	opts := testOptions(t, proxy.URL()+"/evidence.git", signer)
	opts.Timeout = timeout
	opts.AcceptCurrentTip = true

	t.Run("slow", func(t *testing.T) {
		// 16 KiB every 50 ms: the 512 KiB pack takes about 1.6 s.
		proxy.Set(faultproxy.Fault{Kind: faultproxy.Trickle, After: 16 << 10, Pause: 50 * time.Millisecond})
		start := time.Now()
		s, err := Open(t.Context(), opts)
		elapsed := time.Since(start)
		require.NoError(t, err, "a first fetch that keeps moving must not be cut at Timeout")
		require.Positive(t, proxy.Faulted())
		require.Greater(t, elapsed, 2*timeout, "the fetch did not outlast Timeout: the test proves nothing")
		assert.Equal(t, tip, s.Tip())
		require.NoError(t, s.Close())
	})

	t.Run("quiet", func(t *testing.T) {
		opts := opts
		opts.StateDir = t.TempDir()
		proxy.Set(faultproxy.Fault{Kind: faultproxy.Hang, After: 64 << 10})
		// The caller's deadline is far away: only the stall limit ends it.
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		start := time.Now()
		_, err := Open(ctx, opts)
		elapsed := time.Since(start)
		require.ErrorIs(t, err, ErrUnreachable)
		var stalled *gitobj.StalledError
		require.ErrorAs(t, err, &stalled)
		assert.ErrorContains(t, err, "the remote sent nothing for 400ms")
		assert.NotErrorIs(t, err, context.DeadlineExceeded)
		assert.Less(t, elapsed, timeout+faultSlack)

		proxy.Heal()
		s, err := Open(t.Context(), opts)
		require.NoError(t, err)
		assert.Equal(t, tip, s.Tip())
		require.NoError(t, s.Close())
		gittest.Git(t, filepath.Join(opts.StateDir, mirrorDir), "fsck", "--strict", "--no-dangling")
	})
}

// checkBranch requires that branch of the bare repository dir holds
// exactly the files want, each added by exactly one commit, that no commit
// modified or deleted a file, and that `git fsck --strict` is clean.
func checkBranch(t *testing.T, dir, branch string, want []string) {
	t.Helper()
	gittest.Git(t, dir, "fsck", "--strict", "--no-dangling")
	files := strings.Split(gittest.Git(t, dir, "ls-tree", "-r", "--name-only", branch), "\n")
	assert.ElementsMatch(t, want, files, "files on %s", branch)
	added := strings.Fields(gittest.Git(t, dir, "log", "--diff-filter=A", "--name-only", "--format=", branch))
	counts := map[string]int{}
	for _, f := range added {
		counts[f]++
	}
	for _, f := range want {
		assert.Equal(t, 1, counts[f], "%s must be added by exactly one commit", f)
	}
	assert.Empty(t, gittest.Git(t, dir, "log", "--diff-filter=MDRT", "--name-status", "--format=", branch), "a commit changed or deleted a file")
	assert.Empty(t, gittest.Git(t, dir, "rev-list", "--merges", branch), "merge commits")
}

func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return b
}
