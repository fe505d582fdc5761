package evidence_test

import (
	"path"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"signet.dev/signet/evidence"
)

// TestParsePathRoundTrip: every path the layout's builders write parses
// back to the kind and fields it was built from, and builds again to the
// same path.
func TestParsePathRoundTrip(t *testing.T) {
	admitted := time.Date(2026, 3, 5, 23, 59, 0, 0, time.FixedZone("x", -3600))
	for _, run := range []string{"r1", "run-b", "a.b"} {
		dir := evidence.RunDir("prod", run, admitted)
		at := evidence.RunPath{Cluster: "prod", Date: "2026/03/06", Shard: evidence.Shard(run), Run: run}
		with := func(k evidence.FileKind, f func(*evidence.RunPath)) evidence.RunPath {
			rp := at
			rp.Kind = k
			if f != nil {
				f(&rp)
			}
			return rp
		}
		for _, tc := range []struct {
			path string
			want evidence.RunPath
		}{
			{evidence.IndexPath("prod", run), evidence.RunPath{Kind: evidence.KindIndex, Cluster: "prod", Shard: evidence.Shard(run), Run: run}},
			{evidence.ChainPath("prod", 1), evidence.RunPath{Kind: evidence.KindChainLink, Cluster: "prod", Seq: 1}},
			{evidence.ChainPath("prod", 123456789), evidence.RunPath{Kind: evidence.KindChainLink, Cluster: "prod", Seq: 123456789}},
			{dir, with(evidence.KindRunDir, nil)},
			{path.Join(dir, evidence.FiringFile), with(evidence.KindFiring, nil)},
			{path.Join(dir, evidence.AdmissionFile), with(evidence.KindAdmission, nil)},
			{path.Join(dir, evidence.EvidenceFile), with(evidence.KindEvidence, nil)},
			{path.Join(dir, evidence.CancelFile), with(evidence.KindCancel, nil)},
			{path.Join(dir, evidence.ReleaseFile), with(evidence.KindRelease, nil)},
			{path.Join(dir, evidence.ReceiptFile), with(evidence.KindReceipt, nil)},
			{evidence.NodePath(dir, "gpu-1.example.com"), with(evidence.KindNode, func(rp *evidence.RunPath) { rp.Node = "gpu-1.example.com" })},
			{evidence.ApprovalPath(dir, "request-a.json"), with(evidence.KindApproval, func(rp *evidence.RunPath) { rp.Name = "request-a.json" })},
			{evidence.CheckIntentPath(dir, 0, "nccl-all-reduce"), with(evidence.KindCheckIntent, func(rp *evidence.RunPath) { rp.Index, rp.Check = 0, "nccl-all-reduce" })},
			{evidence.CheckPath(dir, 7, "first"), with(evidence.KindCheck, func(rp *evidence.RunPath) { rp.Index, rp.Check = 7, "first" })},
			{evidence.CheckPath(dir, 123, "x"), with(evidence.KindCheck, func(rp *evidence.RunPath) { rp.Index, rp.Check = 123, "x" })},
			{evidence.LogPath(dir, 1, "second", "gpu-1.example.com", "stderr"), with(evidence.KindLog, func(rp *evidence.RunPath) {
				rp.Index, rp.Check, rp.Node, rp.Stream = 1, "second", "gpu-1.example.com", "stderr"
			})},
			{path.Join(dir, "stray", "file.txt"), with(evidence.KindRunFile, func(rp *evidence.RunPath) { rp.Name = "stray/file.txt" })},
		} {
			t.Run(tc.path, func(t *testing.T) {
				got, ok := evidence.ParsePath(tc.path)
				require.True(t, ok, "a path the layout builds must parse")
				assert.Equal(t, tc.want, got)
				assert.Equal(t, tc.path, got.String())
				if got.InRun() {
					assert.Equal(t, dir, got.Dir())
					assert.Equal(t, tc.path, path.Join(got.Dir(), got.Rel()))
				}
			})
		}
	}
}

// TestParsePathRefuses: paths the builders never write are not read as
// layout paths (or, inside a run directory, as a file the layout names).
func TestParsePathRefuses(t *testing.T) {
	dir := evidence.RunDir("prod", "r1", time.Date(2026, 3, 5, 0, 0, 0, 0, time.UTC))
	for _, p := range []string{
		"", "/", "runs", "ids/prod/ab", "ids/prod/AB/r1", "ids/prod/ab/r1/x",
		"chain/prod/00000000/1", "chain/prod/00000001/000000000001", "chain/prod/0000000/000000000001",
		"runs/prod/2026/3/05/ab/r1", "runs/prod/2026/02/30/ab/r1", "runs/prod/2026/03/05/abc/r1",
		dir + "/", dir + "//admission.json", dir + "/../r2/admission.json", "/" + dir,
	} {
		_, ok := evidence.ParsePath(p)
		assert.False(t, ok, "%q", p)
	}
	for _, rel := range []string{
		"checks/0-first.json", "checks/007-first.json", "checks/00-First.json", "checks/00-first.intent.intent.json",
		"checks/00-.json", "nodes/.json", "nodes/a/b.json", "logs/00-first/.stdout.log", "logs/00-first/n.log",
		"logs/00-first/n.stdout.", "approvals/a/b.json", "admission.json/x",
	} {
		rp, ok := evidence.ParsePath(path.Join(dir, rel))
		require.True(t, ok, rel)
		assert.Equal(t, evidence.KindRunFile, rp.Kind, rel)
		assert.Equal(t, rel, rp.Name)
	}
}

// TestIndexTarget: an index entry names exactly one directory of its run
// of its cluster, and a newline.
func TestIndexTarget(t *testing.T) {
	admitted := time.Date(2026, 3, 5, 0, 0, 0, 0, time.UTC)
	f := evidence.IndexEntry("prod", "r1", admitted)
	dir, ok := evidence.IndexTarget("prod", "r1", f.Data)
	assert.True(t, ok)
	assert.Equal(t, evidence.RunDir("prod", "r1", admitted), dir)
	for _, tc := range []struct{ cluster, run, data string }{
		{"prod", "r1", dir},
		{"prod", "r1", dir + "\n\n"},
		{"prod", "r2", dir + "\n"},
		{"dev", "r1", dir + "\n"},
		{"prod", "r1", dir + "/admission.json\n"},
	} {
		_, ok := evidence.IndexTarget(tc.cluster, tc.run, []byte(tc.data))
		assert.False(t, ok, "%+v", tc)
	}
}

// FuzzParsePath: whatever the bytes, ParsePath accepts only what String
// builds back to the same path, and a run file lies in its Dir.
func FuzzParsePath(f *testing.F) {
	dir := evidence.RunDir("prod", "r1", time.Date(2026, 3, 5, 0, 0, 0, 0, time.UTC))
	for _, p := range []string{
		evidence.IndexPath("prod", "r1"), evidence.ChainPath("prod", 42), dir,
		path.Join(dir, evidence.AdmissionFile), evidence.NodePath(dir, "n1"), evidence.ApprovalPath(dir, "a.json"),
		evidence.CheckIntentPath(dir, 1, "c"), evidence.CheckPath(dir, 1, "c"), evidence.LogPath(dir, 1, "c", "n1", "stdout"),
		path.Join(dir, "x/y"), "runs/a/2026/02/29/zz/r", "chain/c/00000000/00000000000a",
	} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, p string) {
		rp, ok := evidence.ParsePath(p)
		if !ok {
			return
		}
		if got := rp.String(); got != p {
			t.Fatalf("ParsePath(%q) = %+v, which builds %q", p, rp, got)
		}
		if rp.InRun() && path.Join(rp.Dir(), rp.Rel()) != p {
			t.Fatalf("ParsePath(%q): %q is not in %q", p, rp.Rel(), rp.Dir())
		}
		if again, _ := evidence.ParsePath(rp.String()); again != rp {
			t.Fatalf("ParsePath(%q) = %+v, then %+v", p, rp, again)
		}
	})
}
