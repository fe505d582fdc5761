package gittest_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/internal/testing/gittest"
)

func TestHTTPServerPushFetch(t *testing.T) {
	auth := gittest.Auth{Token: "s3cret-token", Username: "alice", Password: "pw"}
	tests := []struct {
		name    string
		auth    *gittest.Auth
		url     func(base string) string
		wantErr bool
	}{
		{name: "open", url: func(u string) string { return u }},
		{name: "basic auth", auth: &auth, url: func(u string) string { return strings.Replace(u, "http://", "http://alice:pw@", 1) }},
		{name: "token as basic password", auth: &auth, url: func(u string) string { return strings.Replace(u, "http://", "http://x:s3cret-token@", 1) }},
		{name: "wrong password", auth: &auth, url: func(u string) string { return strings.Replace(u, "http://", "http://alice:nope@", 1) }, wantErr: true},
		{name: "no credentials", auth: &auth, url: func(u string) string { return u }, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var opts []gittest.Option
			if tt.auth != nil {
				opts = append(opts, gittest.WithAuth(*tt.auth))
			}
			srv := gittest.NewHTTPServer(t, opts...)
			url, dir := srv.NewRepo("r")
			work := t.TempDir()
			gittest.Git(t, work, "init", "--quiet", "-b", "main")
			require.NoError(t, os.WriteFile(filepath.Join(work, "a"), []byte("a\n"), 0o644))
			gittest.Git(t, work, "add", "a")
			gittest.Git(t, work, "commit", "--quiet", "-m", "a")
			_, err := gittest.Run(t, work, nil, "push", tt.url(url), "main")
			if tt.wantErr {
				require.Error(t, err)
				assert.Positive(t, srv.Denied())
				return
			}
			require.NoError(t, err)
			assert.Equal(t, gittest.Git(t, work, "rev-parse", "HEAD"), gittest.Git(t, dir, "rev-parse", "main"))

			// A non-fast-forward push is refused even when forced.
			gittest.Git(t, work, "commit", "--quiet", "--amend", "-m", "b")
			_, err = gittest.Run(t, work, nil, "push", "--force", tt.url(url), "main")
			require.Error(t, err)
			assert.Contains(t, err.Error(), "non-fast-forward")
		})
	}
}
