package gitobj

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRemoteNeverShowsCredentials: a URL's userinfo and the secrets of
// Auth appear in no error and no printed Auth.
func TestRemoteNeverShowsCredentials(t *testing.T) {
	assert.Equal(t, "https://REDACTED@example.invalid/r.git", scrubURL("https://u:pw-secret-3@example.invalid/r.git"))
	a := Auth{Token: "tok-secret-1", Username: "u", Password: "pw-secret-2"}
	for _, s := range []string{fmt.Sprint(a), fmt.Sprintf("%#v", a)} {
		assert.NotContains(t, s, "tok-secret-1")
		assert.NotContains(t, s, "pw-secret-2")
	}
	for _, url := range []string{"ftp://u:pw-secret-3@example.invalid/r.git", "https://u:pw-secret-3@exa mple.invalid/%zz"} {
		_, err := NewRemote(url, a)
		require.Error(t, err, url)
		assert.NotContains(t, err.Error(), "pw-secret-3")
	}
	r, err := NewRemote("https://u:pw-secret-3@example.invalid/r.git", a)
	require.NoError(t, err)
	assert.Equal(t, "https://example.invalid/r.git", r.URL())
	assert.Equal(t, "moved REDACTED and REDACTED", r.scrub("moved pw-secret-3 and tok-secret-1"))
}
