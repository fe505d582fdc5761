package specs

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseDigest(t *testing.T) {
	hex := strings.Repeat("0123456789abcdef", 4)
	tests := []struct {
		name, in string
		ok       bool
	}{
		{"canonical", "sha256:" + hex, true},
		{"bare", hex, false},
		{"uppercase hex", "sha256:" + strings.ToUpper(hex), false},
		{"uppercase algorithm", "SHA256:" + hex, false},
		{"other algorithm", "sha512:" + hex + hex, false},
		{"truncated", "sha256:" + hex[:63], false},
		{"extended", "sha256:" + hex + "0", false},
		{"leading space", " sha256:" + hex, false},
		{"trailing newline", "sha256:" + hex + "\n", false},
		{"empty", "", false},
		{"prefix only", "sha256:", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := ParseDigest(tt.in)
			if !tt.ok {
				require.Error(t, err)
				assert.Contains(t, err.Error(), "sha256:<64 lowercase hex>")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.in, d.String())
			assert.Equal(t, hex, d.Hex())
		})
	}
}

var canonicalDigestRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

func FuzzParseDigest(f *testing.F) {
	f.Add("sha256:" + strings.Repeat("ab", 32))
	f.Add(strings.Repeat("ab", 32))
	f.Add("sha256:" + strings.Repeat("AB", 32))
	f.Add("sha512:" + strings.Repeat("ab", 64))
	f.Add(" sha256:" + strings.Repeat("ab", 32))
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDigest(s)
		if err != nil {
			require.False(t, canonicalDigestRE.MatchString(s), "refused a canonical digest %q", s)
			return
		}
		require.True(t, canonicalDigestRE.MatchString(s), "accepted %q", s)
		require.Equal(t, s, d.String())
		again, err := ParseDigest(d.String())
		require.NoError(t, err)
		require.Equal(t, d, again)
	})
}
