package gitobj

import (
	"crypto/ed25519"
	"crypto/rand"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/hiddeco/sshsig"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"

	"signet.dev/signet/internal/testing/gittest"
)

// testSign signs as the evidence store does (sshsig, namespace "git",
// SHA-512) with a fresh key.
func testSign(t testing.TB) SignFunc {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	signer, err := ssh.NewSignerFromKey(priv)
	require.NoError(t, err)
	return func(r io.Reader) ([]byte, error) {
		sig, err := sshsig.Sign(r, signer, sshsig.HashSHA512, "git")
		if err != nil {
			return nil, err
		}
		return sshsig.Armor(sig), nil
	}
}

var testWho = object.Signature{Name: "gitobj test", Email: "gitobj@example.invalid", When: time.Unix(1700000000, 0).UTC()}

// changesOf turns slash-separated paths and contents into Changes.
func changesOf(files map[string]string) *Changes {
	root := &Changes{}
	for p, data := range files {
		parts := strings.Split(p, "/")
		n := root
		for _, name := range parts[:len(parts)-1] {
			if n.Dirs == nil {
				n.Dirs = map[string]*Changes{}
			}
			if n.Dirs[name] == nil {
				n.Dirs[name] = &Changes{}
			}
			n = n.Dirs[name]
		}
		if n.Files == nil {
			n.Files = map[string][]byte{}
		}
		n.Files[parts[len(parts)-1]] = []byte(data)
	}
	return root
}

// bareRepo creates a bare repository and opens its objects directory.
func bareRepo(t *testing.T) (string, *Dir) {
	repo := filepath.Join(t.TempDir(), "repo.git")
	gittest.InitBare(t, repo)
	d, err := OpenDir(repo)
	require.NoError(t, err)
	t.Cleanup(d.Close)
	return repo, d
}

// commitPack builds a commit of files on parent, reading d, writes what
// it created into d as one pack and points refs/heads/main at it. It
// returns the builder (for what it created) and the commit; an error of
// the build is returned as is.
func commitPack(t *testing.T, repo string, d *Dir, sign SignFunc, parent plumbing.Hash, files map[string]string) (*Builder, plumbing.Hash, error) {
	b := NewBuilder(d)
	c, err := b.Commit(parent, changesOf(files), "gitobj test\n", testWho, sign)
	if err != nil {
		return b, c, err
	}
	_, err = d.AddPack(b.Objects(), b.Hashes())
	require.NoError(t, err)
	gittest.Git(t, repo, "update-ref", "refs/heads/main", c.String())
	return b, c, nil
}
