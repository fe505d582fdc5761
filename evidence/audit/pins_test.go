package audit

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/evidence"
)

func TestParsePins(t *testing.T) {
	tip := strings.Repeat("ab", 20)
	for _, tc := range []struct {
		name, in string
		want     map[string]string
		err      string
	}{
		{"what a clean audit prints", "# pins\n\nsignet/evidence " + tip + " 2026-12-01T13:00:00Z\n", map[string]string{"signet/evidence": tip}, ""},
		{"without a time", "a " + tip + "\nb " + strings.Repeat("0", 40), map[string]string{"a": tip, "b": strings.Repeat("0", 40)}, ""},
		{"uppercase commit", "a " + strings.ToUpper(tip), nil, "pins:1: commit"},
		{"one field", "a", nil, "pins:1: want"},
		{"four fields", "a " + tip + " 2026-12-01T13:00:00Z x", nil, "pins:1: want"},
		{"bad time", "a " + tip + " yesterday", nil, "pins:1: time"},
		{"ref, not a branch", "refs/heads/a " + tip, nil, "not a branch name"},
		{"twice", "a " + tip + "\n#\na " + tip, nil, "pins:3: branch a is pinned twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParsePins("pins", []byte(tc.in))
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

// FuzzParsePins: a pins file is an operator's input; whatever it holds,
// parsing does not panic, and what it accepts is branches and commit
// hashes that read back the same when written as pins.
func FuzzParsePins(f *testing.F) {
	f.Add([]byte("signet/evidence " + strings.Repeat("1", 40) + " 2026-12-01T13:00:00Z\n# c\n"))
	f.Add([]byte("a b c d"))
	f.Fuzz(func(t *testing.T, b []byte) {
		pins, err := ParsePins("f", b)
		if err != nil {
			return
		}
		var text strings.Builder
		for _, br := range slices.Sorted(maps.Keys(pins)) {
			require.True(t, evidence.IsCommitHash(pins[br]))
			text.WriteString(br + " " + pins[br] + "\n")
		}
		again, err := ParsePins("f", []byte(text.String()))
		require.NoError(t, err)
		assert.Equal(t, pins, again)
	})
}
