package faultproxy_test

import (
	"crypto/rand"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/internal/testing/faultproxy"
	"signet.dev/signet/internal/testing/gittest"
)

// TestFaults drives stock git through each fault and back to healthy.
func TestFaults(t *testing.T) {
	srv := gittest.NewHTTPServer(t)
	url, _ := srv.NewRepo("r")
	work := t.TempDir()
	gittest.Git(t, work, "init", "-q", "-b", "main")
	big := make([]byte, 256<<10) // under http.postBuffer: git http-backend refuses a chunked push
	_, err := rand.Read(big)     // incompressible: the pack is as large
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(work, "big"), big, 0o644))
	gittest.Git(t, work, "add", "big")
	gittest.Git(t, work, "commit", "-q", "-m", "big")
	gittest.Git(t, work, "push", "-q", url, "main")

	p := faultproxy.New(t, srv.URL())
	purl := p.URL() + "/r.git"
	lsRemote := func() error {
		_, err := gittest.Run(t, "", nil, "ls-remote", purl)
		return err
	}
	require.NoError(t, lsRemote())

	p.Set(faultproxy.Fault{Kind: faultproxy.Refuse})
	err = lsRemote()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "connect")
	p.Heal()
	require.NoError(t, lsRemote(), "the proxy listens again on the same address")

	// A reset in the middle of the pack: the advertisement passes, the
	// clone fails.
	p.Set(faultproxy.Fault{Kind: faultproxy.Reset, After: 64 << 10})
	require.NoError(t, lsRemote())
	_, err = gittest.Run(t, "", nil, "clone", "-q", "--bare", purl, filepath.Join(t.TempDir(), "c.git"))
	require.Error(t, err)
	assert.Positive(t, p.Faulted())
	p.Heal()
	gittest.Git(t, "", "clone", "-q", "--bare", purl, filepath.Join(t.TempDir(), "c.git"))

	// A stall answers nothing, even after the proxy heals.
	p.Set(faultproxy.Fault{Kind: faultproxy.Stall})
	client := &http.Client{Timeout: 500 * time.Millisecond}
	start := time.Now()
	_, err = client.Get(purl + "/info/refs?service=git-upload-pack")
	require.Error(t, err)
	assert.GreaterOrEqual(t, time.Since(start), 400*time.Millisecond)
	p.Heal()
	require.NoError(t, lsRemote())

	// A race runs the hook before each push reaches the server.
	var raced atomic.Int64
	p.Set(faultproxy.Fault{Kind: faultproxy.Race, Race: func() error { raced.Add(1); return nil }})
	gittest.Git(t, work, "commit", "-q", "--allow-empty", "-m", "second")
	gittest.Git(t, work, "push", "-q", purl, "main")
	assert.Equal(t, int64(1), raced.Load())
}

// TestCompetitor: a competing push moves the branch, and a compare-and-swap
// push from the old tip through a racing proxy is refused.
func TestCompetitor(t *testing.T) {
	srv := gittest.NewHTTPServer(t)
	url, dir := srv.NewRepo("r")
	work := t.TempDir()
	gittest.Git(t, work, "init", "-q", "-b", "main")
	gittest.Git(t, work, "commit", "-q", "--allow-empty", "-m", "one")
	gittest.Git(t, work, "push", "-q", url, "main")

	c := faultproxy.NewCompetitor(t, url, "main")
	p := faultproxy.New(t, srv.URL())
	p.Set(faultproxy.Fault{Kind: faultproxy.Race, Race: c.Push})
	gittest.Git(t, work, "commit", "-q", "--allow-empty", "-m", "two")
	_, err := gittest.Run(t, work, nil, "push", "-q", p.URL()+"/r.git", "main")
	require.Error(t, err, "the competitor moved the branch first")
	assert.Equal(t, []string{"race/000"}, c.Files())
	assert.Equal(t, "race/000", gittest.Git(t, dir, "ls-tree", "-r", "--name-only", "main"))
}
