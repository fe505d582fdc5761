package specdiff

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"signet.dev/signet/specs"
)

func profile(name string, checks ...specs.Check) *specs.Object {
	p := &specs.CertificationProfile{Metadata: specs.ObjectMeta{Name: name}}
	p.Spec.Bundle = specs.BundleRef{Path: "bundles/" + name, Digest: "sha256:00"}
	p.Spec.Participants = specs.Participants{Min: 1, Max: 1}
	p.Spec.Checks = checks
	return &specs.Object{Kind: specs.KindProfile, Name: name, Profile: p, Digest: specs.DigestOf([]byte(name + fieldsKey(checks)))}
}

func fieldsKey(cs []specs.Check) string {
	s := ""
	for _, c := range cs {
		s += c.Name + c.Script + string(c.Backend) + string(rune('0'+c.GPUCount)) + string(rune(c.Deadline))
	}
	return s
}

func request(name string, spec specs.RequestSpec, digest string) *specs.Object {
	return &specs.Object{Kind: specs.KindRequest, Name: name, Request: &specs.CertificationRequest{Metadata: specs.ObjectMeta{Name: name}, Spec: spec}, Digest: specs.DigestOf([]byte(digest))}
}

func rendering(objs ...*specs.Object) *specs.Rendering {
	return &specs.Rendering{Objects: objs, Bundles: map[string]specs.BundleInfo{}}
}

func TestDiff(t *testing.T) {
	a := specs.Check{Name: "a", Script: "a.sh", Backend: specs.BackendPod, GPUCount: 8, Deadline: 60}
	b := specs.Check{Name: "b", Script: "b.sh", Backend: specs.BackendPod, GPUCount: 8, Deadline: 60}
	c := specs.Check{Name: "c", Script: "c.sh", Backend: specs.BackendPod, GPUCount: 8, Deadline: 60}
	b4 := b
	b4.GPUCount = 4
	b90 := b
	b90.Deadline = 90
	for _, tc := range []struct {
		name       string
		base, head *specs.Rendering
		want       []FieldChange
		change     string
		actions    []string
	}{
		{"check added", rendering(profile("p", a)), rendering(profile("p", a, b)), []FieldChange{{Field: "spec.checks[1]", New: "b", Note: "check added"}}, Changed, nil},
		{"check removed", rendering(profile("p", a, b)), rendering(profile("p", a)), []FieldChange{{Field: "spec.checks[1]", Old: "b", Note: "check removed"}}, Changed, nil},
		{"checks reordered", rendering(profile("p", a, b, c)), rendering(profile("p", c, a, b)), []FieldChange{{Field: "spec.checks", Old: `["a","b","c"]`, New: `["c","a","b"]`, Note: "checks reordered"}}, Changed, nil},
		{"gpu count", rendering(profile("p", a, b)), rendering(profile("p", a, b4)), []FieldChange{{Field: "spec.checks[b].gpuCount", Old: "8", New: "4"}}, Changed, nil},
		{"deadline", rendering(profile("p", a, b)), rendering(profile("p", a, b90)), []FieldChange{{Field: "spec.checks[b].deadline", Old: "60s", New: "90s"}}, Changed, nil},
		{"profile added", rendering(), rendering(profile("p", a)), nil, Added, nil},
		{"profile removed", rendering(profile("p", a)), rendering(), nil, Removed, nil},
		{"nodes", rendering(request("r", specs.RequestSpec{Profile: "p", Nodes: []string{"n1"}}, "1")), rendering(request("r", specs.RequestSpec{Profile: "p", Nodes: []string{"n1", "n2"}}, "2")),
			[]FieldChange{{Field: "spec.nodes", Old: `["n1"]`, New: `["n1","n2"]`}}, Changed, nil},
		{"release asked, digest unchanged", rendering(request("r", specs.RequestSpec{Profile: "p"}, "1")), rendering(request("r", specs.RequestSpec{Profile: "p", Release: true}, "1")),
			[]FieldChange{{Field: "spec.release", Old: "false", New: "true"}}, Changed, []string{"release"}},
		{"added with cancel", rendering(), rendering(request("r", specs.RequestSpec{Profile: "p", Cancel: true}, "1")), nil, Added, []string{"cancel"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Diff(tc.base, tc.head)
			if !assert.Len(t, got, 1) {
				return
			}
			assert.Equal(t, tc.change, got[0].Change)
			assert.Equal(t, tc.want, got[0].Fields)
			assert.Equal(t, tc.actions, got[0].Actions)
		})
	}
	assert.Empty(t, Diff(rendering(profile("p", a)), rendering(profile("p", a))))
}
