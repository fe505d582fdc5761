package faultproxy

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"signet.dev/signet/internal/testing/gittest"
)

// Competitor pushes competing commits to a branch with stock git, through
// the server directly (not through the proxy). Each commit adds one new
// file race/<n>, so that the branch stays append-only.
type Competitor struct {
	t      testing.TB
	url    string
	branch string
	work   string

	mu    sync.Mutex
	files []string
}

// NewCompetitor returns a competitor for branch of the repository at url
// (the server's URL, not the proxy's).
func NewCompetitor(t testing.TB, url, branch string) *Competitor {
	t.Helper()
	c := &Competitor{t: t, url: url, branch: branch, work: t.TempDir()}
	gittest.Git(t, c.work, "init", "-q", "-b", "competitor")
	return c
}

// Push adds one file on the branch's current tip and pushes it; the
// branch must exist. It is a Fault.Race hook.
func (c *Competitor) Push() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	name := fmt.Sprintf("race/%03d", len(c.files))
	return c.push(name, []byte(name+" written by a competing writer\n"))
}

// PushFile adds the file name holding data on the branch's current tip
// and pushes it; the branch must exist.
func (c *Competitor) PushFile(name string, data []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.push(name, data)
}

func (c *Competitor) push(name string, data []byte) error {
	run := func(args ...string) error {
		_, err := gittest.Run(c.t, c.work, nil, args...)
		return err
	}
	if err := run("fetch", "-q", c.url, "+refs/heads/"+c.branch+":refs/remotes/server/"+c.branch); err != nil {
		return err
	}
	if err := run("checkout", "-q", "-B", "competitor", "refs/remotes/server/"+c.branch); err != nil {
		return err
	}
	p := filepath.Join(c.work, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		return err
	}
	if err := run("add", name); err != nil {
		return err
	}
	if err := run("-c", "user.name=competitor", "-c", "user.email=competitor@example.invalid", "commit", "-q", "-m", "competing "+name); err != nil {
		return err
	}
	if err := run("push", "-q", c.url, "competitor:refs/heads/"+c.branch); err != nil {
		return err
	}
	c.files = append(c.files, name)
	return nil
}

// Files lists the files the competitor's pushes added, in order.
func (c *Competitor) Files() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.files...)
}
