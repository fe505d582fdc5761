package specs

import (
	"bytes"
	"runtime"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

func TestParseDocumentsReportsEachBadDocumentByIndex(t *testing.T) {
	data := []byte(`apiVersion: v1
kind: ConfigMap
metadata: {name: ignored}
---
apiVersion: signet.dev/v1alpha1
kind: CertificationRequest
metadata: {name: ok}
spec: {profile: p, nodes: [n1]}
---
apiVersion: signet.dev/v1alpha1
kind: CertificationRequest
metadata: {name: bad-one}
spec: {profile: p, nodes: [n1], colour: red}
---
# only a comment
---
apiVersion: signet.dev/v1alpha1
kind: CertificationRequest
metadata: {name: bad-two}
spec: {profile: p, count: "3"}
`)
	objs, findings := ParseDocuments("requests.yaml", data)
	require.Len(t, objs, 1)
	assert.Equal(t, "CertificationRequest/ok", objs[0].Ref())
	assert.Equal(t, Source{File: "requests.yaml", Index: 1, Line: 5}, objs[0].Source)
	require.Len(t, findings, 2)
	assert.Equal(t, Finding{File: "requests.yaml", Document: 2, Line: 13, Column: 33, Field: "spec.colour", Message: "unknown field"}, findings[0])
	assert.Equal(t, 4, findings[1].Document)
	assert.Equal(t, "spec.count", findings[1].Field)
}

func TestParseDocumentNonSignetAndEmpty(t *testing.T) {
	tests := []struct{ name, data string }{
		{"empty", ""},
		{"comment", "# nothing\n"},
		{"null", "null\n"},
		{"scalar", "hello\n"},
		{"list", "- a\n- b\n"},
		{"other group", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {x: &a 1, y: *a}\n"},
		{"kustomization", "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [a.yaml]\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, f := ParseDocument(SourceDocument{File: "x.yaml", Data: []byte(tt.data)})
			assert.Nil(t, o)
			assert.Empty(t, f)
		})
	}
}

func TestParseDocumentRefusesSeveralDocuments(t *testing.T) {
	_, f := ParseDocument(SourceDocument{File: "x.yaml", Index: 3, Data: []byte("a: 1\n---\nb: 2\n")})
	require.Len(t, f, 1)
	assert.Equal(t, "x.yaml[doc 3]: holds more than one YAML document", f[0].String())
}

// TestFindingsPointAtTheLine asserts findings carry the line and column of
// the field in the file, whether the file is read whole or as documents
// split out of it, for YAML syntax errors, strict-parsing findings and
// validation findings, and that a misspelt field names the nearest known
// one.
func TestFindingsPointAtTheLine(t *testing.T) {
	fsys := fstest.MapFS{
		"bundles/ok/check.sh": {Data: []byte("#!/bin/sh\n")},
		"profiles/p.yaml": {Data: []byte(`# a comment
apiVersion: v1
kind: ConfigMap
metadata: {name: other}
---
apiVersion: signet.dev/v1alpha1
kind: CertificationProfile
metadata:
  name: p
spec:
  bundle:
    path: bundles/ok
    digest: sha256:0000000000000000000000000000000000000000000000000000000000000000
  participants: {min: 1, max: 1}
  checks:
  - name: one
    script: check.sh
    backend: local
    deadlien: 60s
`)},
		"requests/r.yaml": {Data: []byte(`apiVersion: signet.dev/v1alpha1
kind: CertificationRequest
metadata:
  name: r
spec:
  profile: p
  nodes: [a, a]
`)},
		"requests/broken.yaml": {Data: []byte(`apiVersion: signet.dev/v1alpha1
kind: CertificationRequest
metadata:
  name: broken
spec:
  profile: p
   nodes: [a]
`)},
	}
	r, err := Render(fsys, ".")
	require.NoError(t, err)
	var got []string
	for _, f := range r.Findings {
		got = append(got, f.String())
	}
	assert.Contains(t, got, `profiles/p.yaml:19:5: spec.checks[0].deadlien: unknown field; did you mean "deadline"?`)
	assert.Contains(t, got, `requests/r.yaml:7:14: spec.nodes[1]: "a" is also spec.nodes[0]`)
	assert.Contains(t, got, `requests/broken.yaml:7:1: YAML: mapping values are not allowed in this context`)
}

func TestNearestField(t *testing.T) {
	known := []string{"deadline", "backend", "script", "name", "stage", "workload", "gpuCount"}
	for name, want := range map[string]string{
		"deadlien": "deadline", "dedline": "deadline", "Deadline": "deadline", "backnd": "backend",
		"gpucount": "gpuCount", "scripts": "script", "retries": "", "x": "", "command": "",
	} {
		assert.Equal(t, want, nearest(name, known), name)
	}
}

func TestFindingString(t *testing.T) {
	assert.Equal(t, `profiles/h100.yaml:13:5: spec.checks[3].deadline: "90" is not whole seconds ("90s")`,
		Finding{File: "profiles/h100.yaml", Document: 2, Line: 13, Column: 5, Field: "spec.checks[3].deadline", Message: `"90" is not whole seconds ("90s")`}.String())
	assert.Equal(t, `profiles/h100.yaml[doc 2]: spec.checks[3].deadline: "90" is not whole seconds ("90s")`,
		Finding{File: "profiles/h100.yaml", Document: 2, Field: "spec.checks[3].deadline", Message: `"90" is not whole seconds ("90s")`}.String())
	assert.Equal(t, "big.yaml: too big", Finding{File: "big.yaml", Document: -1, Message: "too big"}.String())
}

// aliasBomb is the "billion laughs" document: expanded, it would hold 9^9
// strings. It is a signet document, so it is not skipped as foreign.
const aliasBomb = `apiVersion: signet.dev/v1alpha1
kind: CertificationRequest
metadata:
  name: bomb
spec:
  profile: p
  selector:
    a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
    b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
    c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
    d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
    e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
    f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
    g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
    h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
    i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
  nodes: *i
`

// allocated returns the bytes f allocates, from runtime.MemStats.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

func TestAliasBombRefusedWithBoundedMemory(t *testing.T) {
	var findings []Finding
	n := allocated(func() { _, findings = ParseDocuments("bomb.yaml", []byte(aliasBomb)) })
	require.NotEmpty(t, findings)
	assert.Contains(t, findings[0].Message, "anchors are not allowed")
	// Expanded, the bomb is gigabytes; refused on the node tree it costs
	// about what its 1 KB of text does.
	assert.Less(t, n, uint64(1<<20), "bytes allocated")
	allocs := testing.AllocsPerRun(5, func() { ParseDocuments("bomb.yaml", []byte(aliasBomb)) })
	assert.Less(t, allocs, 5000.0)
}

func TestHugeSpecFileRefusedWithBoundedMemory(t *testing.T) {
	big := bytes.Repeat([]byte("# padding padding padding padding\n"), 20<<20/34)
	require.Greater(t, len(big), 20<<20-64)

	t.Run("ParseDocuments", func(t *testing.T) {
		var findings []Finding
		n := allocated(func() { _, findings = ParseDocuments("big.yaml", big) })
		require.Len(t, findings, 1)
		assert.Contains(t, findings[0].Message, "over the 1048576-byte limit")
		assert.Less(t, n, uint64(64<<10), "bytes allocated")
	})
	t.Run("Render", func(t *testing.T) {
		m := fstest.MapFS{"profiles/big.yaml": {Data: big}}
		var r *Rendering
		var err error
		// MapFS holds the bytes already; Render must not copy or parse them.
		n := allocated(func() { r, err = Render(m, ".") })
		require.NoError(t, err)
		require.Len(t, r.Findings, 1)
		assert.Equal(t, "profiles/big.yaml", r.Findings[0].File)
		assert.Less(t, n, uint64(1<<20), "bytes allocated")
	})
}

func TestParseDocumentsDeepNesting(t *testing.T) {
	data := "apiVersion: signet.dev/v1alpha1\nkind: CertificationRequest\nmetadata:\n  name: " + strings.Repeat("[", 20000) + "\n"
	_, f := ParseDocuments("deep.yaml", []byte(data))
	require.NotEmpty(t, f)
}

func FuzzParseDocuments(f *testing.F) {
	f.Add([]byte(baseGPUProfile))
	f.Add([]byte(baseLocalProfile))
	f.Add([]byte(baseRequests))
	f.Add([]byte(aliasBomb))
	f.Add([]byte("apiVersion: signet.dev/v1alpha1\nkind: CertificationProfile\nspec: {checks: [{deadline: 1m}]}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		objs, findings := ParseDocuments("fuzz.yaml", data)
		for _, o := range objs {
			// A parsed object always has a canonical form that parses back
			// as JSON and digests to Digest.
			require.NotEmpty(t, o.Canonical)
			require.Equal(t, DigestOf(o.Canonical), o.Digest)
			require.True(t, o.Kind == KindProfile || o.Kind == KindRequest)
			again, err := CanonicalJSON(jsonValue(t, o.Canonical))
			require.NoError(t, err)
			require.Equal(t, o.Canonical, again, "canonical JSON is a fixed point")
		}
		for _, fd := range findings {
			require.Equal(t, "fuzz.yaml", fd.File)
			require.NotEmpty(t, fd.Message)
		}
	})
}

// TestFindingsPointAtKustomizeSources: findings of a spec path built by
// kustomize name the source file and line of the object (found through
// kustomize's origin annotations), through a base, a namePrefix and a
// patch, not the kustomization's output; the rendered documents stay
// byte for byte what kustomize makes without the annotations.
func TestFindingsPointAtKustomizeSources(t *testing.T) {
	fsys := fstest.MapFS{
		"bundles/ok/check.sh":     {Data: []byte("#!/bin/sh\n")},
		"base/kustomization.yaml": {Data: []byte("resources:\n- profile.yaml\n- requests.yaml\n")},
		"base/profile.yaml": {Data: []byte(`apiVersion: signet.dev/v1alpha1
kind: CertificationProfile
metadata:
  name: p
spec:
  bundle:
    path: bundles/ok
    digest: sha256:0000000000000000000000000000000000000000000000000000000000000000
  participants: {min: 1, max: 1}
  checks:
  - name: one
    script: check.sh
    backend: local
    deadlien: 60s
`)},
		"base/requests.yaml": {Data: []byte(`apiVersion: signet.dev/v1alpha1
kind: CertificationRequest
metadata:
  name: fine
spec:
  profile: p
  nodes: [b]
---
apiVersion: signet.dev/v1alpha1
kind: CertificationRequest
metadata:
  name: r
spec:
  profile: p
  nodes: [a, a]
`)},
		"overlay/kustomization.yaml": {Data: []byte("resources:\n- ../base\nnamePrefix: prod-\ncommonAnnotations: {version: \"1.10\", build: \"007\"}\npatches:\n- patch: |-\n    - {op: add, path: /metadata/labels, value: {team: gpu}}\n  target: {kind: CertificationRequest}\n")},
	}
	r, err := Render(fsys, "overlay")
	require.NoError(t, err)
	var got []string
	for _, f := range r.Findings {
		got = append(got, f.String())
	}
	assert.Contains(t, got, `base/profile.yaml:14:5: spec.checks[0].deadlien: unknown field; did you mean "deadline"?`)
	assert.Contains(t, got, `base/requests.yaml:15:14: spec.nodes[1]: "a" is also spec.nodes[0]`)
	// namePrefix renamed the profile, not the requests' references to it.
	assert.Contains(t, got, `base/requests.yaml:6:3: spec.profile: no CertificationProfile "p" in this rendering`)
	assert.Contains(t, got, `base/requests.yaml:14:3: spec.profile: no CertificationProfile "p" in this rendering`)

	// The annotations asked for are gone from what is rendered: the
	// documents are kustomize's own output of the unchanged files.
	docs, err := LoadDocuments(fsys, "overlay")
	require.NoError(t, err)
	mem := filesys.MakeFsInMemory()
	for name, f := range fsys {
		require.NoError(t, mem.WriteFile("/"+name, f.Data))
	}
	plain, _, err := runKustomize(mem, "/overlay", false)
	require.NoError(t, err)
	var rendered [][]byte
	for _, d := range docs {
		assert.NotContains(t, string(d.Data), "config.kubernetes.io/origin")
		rendered = append(rendered, d.Data)
	}
	assert.Equal(t, SplitDocuments(plain), rendered, "asking for origins changed what kustomize renders")
	assert.Len(t, got, 4, "%q", got)
}
