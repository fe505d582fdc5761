package evidence

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAddedInNamesTheCommitThatAddedAPath guards the receipt's binding of
// the commit where evidence landed: after later commits, AddedIn must
// still name the commit that added the file, never the tip.
func TestAddedInNamesTheCommitThatAddedAPath(t *testing.T) {
	signer, _ := testSigner(t)
	s := openStore(t, testOptions(t, bareRemote(t), signer))
	ctx := t.Context()
	first, err := s.Append(ctx, "first", []File{{Path: "runs/a/evidence.json", Data: []byte("a")}})
	require.NoError(t, err)
	second, err := s.Append(ctx, "second", []File{{Path: "runs/b/evidence.json", Data: []byte("b")}})
	require.NoError(t, err)
	_, err = s.Append(ctx, "third", []File{{Path: "runs/c/evidence.json", Data: []byte("c")}})
	require.NoError(t, err)

	got, err := s.AddedIn(ctx, "runs/a/evidence.json")
	require.NoError(t, err)
	assert.Equal(t, first, got, "the root commit added runs/a")
	got, err = s.AddedIn(ctx, "runs/b/evidence.json")
	require.NoError(t, err)
	assert.Equal(t, second, got, "the second commit added runs/b, not the tip")
	_, err = s.AddedIn(ctx, "runs/missing.json")
	assert.ErrorIs(t, err, ErrNotFound)
}
