package specs_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/internal/testing/corpus"
	"signet.dev/signet/specs"
)

const corpusDir = "testdata/corpus"

// specsReasons are the rejection reasons the specs package states: its
// sentinel errors and the format of every finding its validator (r.addf)
// and strict decoder (d.addf) report, less those in Ignore.
func specsReasons(t *testing.T) []corpus.Reason {
	t.Helper()
	rs, err := corpus.Scan(corpus.Source{
		Dir:       ".",
		Formats:   map[string]int{"r.addf": 1, "d.addf": 2},
		Sentinels: true,
		Ignore: []string{
			// Only wraps another error's text (reached by its own reason).
			"%v",
			// The strict decoder's guards against its own bugs: they
			// depend on the kinds' Go types, not on the input, and
			// TestDecoderInvariants proves no field type reaches them.
			"cannot decode into %s", "cannot convert to JSON: %v",
			// DecodeStrict's refusals of a whole file (a config, a trust
			// policy), which Render never calls: the signing and
			// reconciler corpora reach them.
			"is empty", "holds more than one YAML document",
		},
	})
	require.NoError(t, err)
	require.NotEmpty(t, rs)
	return rs
}

// corpusBase is the tree every archive input is laid over: a valid
// bundle, so that an input needs to hold only what it breaks.
var corpusBase = fstest.MapFS{
	"bundles/ok/check.sh": {Data: []byte("#!/bin/sh\nexit 0\n"), Mode: 0o755},
}

// corpusMessages runs one input through the real code and returns every
// finding and error text:
//
//   - X.bundle.txtar: specs.BundleDigest of the directory its BUNDLE file names;
//   - X.load.txtar: specs.LoadDocuments of its spec path;
//   - X.txtar: specs.Render of its spec path;
//   - X.result: specs.ParseResult.
//
// The spec path of an archive is the content of its SPECPATH file, the
// root when it has none.
func corpusMessages(t *testing.T, input string) []string {
	t.Helper()
	arg := func(fsys fstest.MapFS, name, def string) string {
		f, ok := fsys[name]
		if !ok {
			return def
		}
		delete(fsys, name)
		return strings.TrimSpace(string(f.Data))
	}
	switch {
	case strings.HasSuffix(input, ".bundle.txtar"):
		fsys, err := corpus.ReadArchive(input, corpusBase)
		require.NoError(t, err)
		if _, _, err := specs.BundleDigest(fsys, arg(fsys, "BUNDLE", "")); err != nil {
			return []string{err.Error()}
		}
		return nil
	case strings.HasSuffix(input, ".load.txtar"):
		fsys, err := corpus.ReadArchive(input, corpusBase)
		require.NoError(t, err)
		if _, err := specs.LoadDocuments(fsys, arg(fsys, "SPECPATH", ".")); err != nil {
			return []string{err.Error()}
		}
		return nil
	case strings.HasSuffix(input, ".txtar"):
		fsys, err := corpus.ReadArchive(input, corpusBase)
		require.NoError(t, err)
		r, err := specs.Render(fsys, arg(fsys, "SPECPATH", "."))
		if err != nil {
			return []string{err.Error()}
		}
		var out []string
		for _, f := range r.Findings {
			out = append(out, f.String())
		}
		return out
	case strings.HasSuffix(input, ".result"):
		b, err := os.ReadFile(input)
		require.NoError(t, err)
		if _, err := specs.ParseResult(b); err != nil {
			return []string{err.Error()}
		}
		return nil
	}
	require.Failf(t, "unknown input kind", "%s: want .txtar or .result", input)
	return nil
}

// TestCorpus runs every checked-in bad input and requires the reason the
// manifest names for it.
func TestCorpus(t *testing.T) {
	reasons := specsReasons(t)
	entries, err := corpus.Load(corpusDir)
	require.NoError(t, err)
	for _, e := range entries {
		t.Run(e.Input, func(t *testing.T) {
			msgs := corpusMessages(t, filepath.Join(corpusDir, e.Input))
			if e.Reason == "" { // a control input: valid
				assert.Empty(t, msgs)
				return
			}
			r, ok := corpus.Find(reasons, e.Reason)
			require.True(t, ok, "the manifest names %q, which the specs source no longer states", e.Reason)
			assert.True(t, r.Matches(msgs), "want reason %q (%s); got:\n%s", r.ID, r.Where, strings.Join(msgs, "\n"))
		})
	}
}

// TestCorpusCoverage lists every reason of the specs source that no input
// reaches, and fails when there is one.
func TestCorpusCoverage(t *testing.T) {
	reasons := specsReasons(t)
	entries, err := corpus.Load(corpusDir)
	require.NoError(t, err)
	corpus.RequireCovered(t, corpusDir, reasons, entries)
}
