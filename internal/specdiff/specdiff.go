// Package specdiff compares two renderings of a spec path and describes
// what changed in terms an approver reads: objects added, removed or
// changed, and for each change the fields that differ (checks added,
// removed or reordered, deadlines, GPU counts, bundle digest and which
// scripts changed, …). It never decides approval; callers do that with the
// signing package.
package specdiff

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sort"

	"signet.dev/signet/specs"
)

// Change kinds of an object.
const (
	Added   = "added"
	Removed = "removed"
	Changed = "changed"
)

// ObjectChange is one object that differs between base and head.
type ObjectChange struct {
	// Ref is "KIND/NAME".
	Ref  string `json:"ref"`
	Kind string `json:"kind"`
	Name string `json:"name"`
	// Change is Added, Removed or Changed (canonical digest differs).
	Change string `json:"change"`
	// BaseDigest and HeadDigest are the canonical digests ("" when absent).
	BaseDigest specs.Digest `json:"baseDigest,omitempty"`
	HeadDigest specs.Digest `json:"headDigest,omitempty"`
	// Fields are the field-level differences of a changed object.
	Fields []FieldChange `json:"fields,omitempty"`
	// Actions are the request actions that became true in head
	// ("cancel", "release"), including on an added request.
	Actions []string `json:"actions,omitempty"`
}

// FieldChange is one field-level difference. Old and New are display
// values ("" when absent).
type FieldChange struct {
	Field string `json:"field"`
	Old   string `json:"old,omitempty"`
	New   string `json:"new,omitempty"`
	Note  string `json:"note,omitempty"`
}

// Diff returns the objects that differ between base and head, sorted by
// ref. An object whose canonical digest is unchanged is not listed, except
// a request whose cancel or release became true (those are not execution
// fields, so its digest is the same, but the action needs approval).
func Diff(base, head *specs.Rendering) []ObjectChange {
	bm, hm := index(base), index(head)
	var out []ObjectChange
	for ref, h := range hm {
		b, ok := bm[ref]
		if !ok {
			out = append(out, ObjectChange{Ref: ref, Kind: h.Kind, Name: h.Name, Change: Added, HeadDigest: h.Digest, Actions: newActions(nil, h)})
			continue
		}
		acts := newActions(b, h)
		if b.Digest == h.Digest && len(acts) == 0 {
			continue
		}
		c := ObjectChange{Ref: ref, Kind: h.Kind, Name: h.Name, Change: Changed, BaseDigest: b.Digest, HeadDigest: h.Digest, Actions: acts}
		switch {
		case b.Profile != nil && h.Profile != nil:
			c.Fields = profileFields(b.Profile, h.Profile, bundleOf(base, h.Name), bundleOf(head, h.Name))
		case b.Request != nil && h.Request != nil:
			c.Fields = requestFields(b.Request, h.Request)
		}
		out = append(out, c)
	}
	for ref, b := range bm {
		if _, ok := hm[ref]; !ok {
			out = append(out, ObjectChange{Ref: ref, Kind: b.Kind, Name: b.Name, Change: Removed, BaseDigest: b.Digest})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Ref < out[j].Ref })
	return out
}

func index(r *specs.Rendering) map[string]*specs.Object {
	m := map[string]*specs.Object{}
	if r == nil {
		return m
	}
	for _, o := range r.Objects {
		m[o.Ref()] = o
	}
	return m
}

func bundleOf(r *specs.Rendering, profile string) *specs.BundleInfo {
	if r == nil {
		return nil
	}
	if b, ok := r.Bundles[profile]; ok {
		return &b
	}
	return nil
}

func newActions(b, h *specs.Object) []string {
	if h == nil || h.Request == nil {
		return nil
	}
	var was specs.RequestSpec
	if b != nil && b.Request != nil {
		was = b.Request.Spec
	}
	var out []string
	if h.Request.Spec.Cancel && !was.Cancel {
		out = append(out, "cancel")
	}
	if h.Request.Spec.Release && !was.Release {
		out = append(out, "release")
	}
	return out
}

func str(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case nil:
		return ""
	}
	if rv := reflect.ValueOf(v); (rv.Kind() == reflect.Pointer || rv.Kind() == reflect.Map || rv.Kind() == reflect.Slice) && rv.IsNil() {
		return ""
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

func field(out []FieldChange, name string, old, new any) []FieldChange {
	o, n := str(old), str(new)
	if o == n {
		return out
	}
	return append(out, FieldChange{Field: name, Old: o, New: n})
}

func profileFields(b, h *specs.CertificationProfile, bb, hb *specs.BundleInfo) []FieldChange {
	var out []FieldChange
	out = field(out, "spec.bundle.path", b.Spec.Bundle.Path, h.Spec.Bundle.Path)
	out = field(out, "spec.bundle.digest", b.Spec.Bundle.Digest, h.Spec.Bundle.Digest)
	if b.Spec.Bundle.Digest != h.Spec.Bundle.Digest && bb != nil && hb != nil {
		out = append(out, scriptChanges(bb, hb)...)
	}
	out = field(out, "spec.participants.min", fmt.Sprint(b.Spec.Participants.Min), fmt.Sprint(h.Spec.Participants.Min))
	out = field(out, "spec.participants.max", fmt.Sprint(b.Spec.Participants.Max), fmt.Sprint(h.Spec.Participants.Max))
	out = field(out, "spec.onFailure", orDefault(string(b.Spec.OnFailure)), orDefault(string(h.Spec.OnFailure)))
	out = append(out, checkChanges(b.Spec.Checks, h.Spec.Checks)...)
	if len(out) == 0 {
		out = append(out, FieldChange{Field: "metadata", Note: "only labels, annotations or formatting changed the canonical form"})
	}
	return out
}

func orDefault(s string) string {
	if s == "" {
		return string(specs.OnFailureContinue)
	}
	return s
}

// scriptChanges lists the bundle files added, removed or changed.
func scriptChanges(b, h *specs.BundleInfo) []FieldChange {
	bf, hf := map[string]specs.Digest{}, map[string]specs.Digest{}
	for _, f := range b.Files {
		bf[f.Path] = f.Digest
	}
	for _, f := range h.Files {
		hf[f.Path] = f.Digest
	}
	var out []FieldChange
	for _, f := range h.Files {
		old, ok := bf[f.Path]
		switch {
		case !ok:
			out = append(out, FieldChange{Field: "bundle:" + f.Path, New: string(f.Digest), Note: "script added"})
		case old != f.Digest:
			out = append(out, FieldChange{Field: "bundle:" + f.Path, Old: string(old), New: string(f.Digest), Note: "script changed"})
		}
	}
	for _, f := range b.Files {
		if _, ok := hf[f.Path]; !ok {
			out = append(out, FieldChange{Field: "bundle:" + f.Path, Old: string(f.Digest), Note: "script removed"})
		}
	}
	return out
}

// checkChanges reports checks added, removed, reordered and the changed
// fields of checks present in both, matched by name.
func checkChanges(b, h []specs.Check) []FieldChange {
	bi, hi := map[string]int{}, map[string]int{}
	for i, c := range b {
		bi[c.Name] = i
	}
	for i, c := range h {
		hi[c.Name] = i
	}
	var out []FieldChange
	for i, c := range h {
		if _, ok := bi[c.Name]; !ok {
			out = append(out, FieldChange{Field: fmt.Sprintf("spec.checks[%d]", i), New: c.Name, Note: "check added"})
		}
	}
	for i, c := range b {
		if _, ok := hi[c.Name]; !ok {
			out = append(out, FieldChange{Field: fmt.Sprintf("spec.checks[%d]", i), Old: c.Name, Note: "check removed"})
		}
	}
	var bOrder, hOrder []string
	for _, c := range b {
		if _, ok := hi[c.Name]; ok {
			bOrder = append(bOrder, c.Name)
		}
	}
	for _, c := range h {
		if _, ok := bi[c.Name]; ok {
			hOrder = append(hOrder, c.Name)
		}
	}
	if !slices.Equal(bOrder, hOrder) {
		out = append(out, FieldChange{Field: "spec.checks", Old: str(bOrder), New: str(hOrder), Note: "checks reordered"})
	}
	for _, hc := range h {
		j, ok := bi[hc.Name]
		if !ok {
			continue
		}
		bc := b[j]
		p := fmt.Sprintf("spec.checks[%s]", hc.Name)
		out = field(out, p+".script", bc.Script, hc.Script)
		out = field(out, p+".backend", string(bc.Backend), string(hc.Backend))
		out = field(out, p+".gpuCount", fmt.Sprint(bc.GPUCount), fmt.Sprint(hc.GPUCount))
		out = field(out, p+".deadline", fmt.Sprintf("%ds", bc.Deadline), fmt.Sprintf("%ds", hc.Deadline))
		out = field(out, p+".stage", bc.Stage, hc.Stage)
		out = field(out, p+".workload", bc.Workload, hc.Workload)
	}
	return out
}

func requestFields(b, h *specs.CertificationRequest) []FieldChange {
	var out []FieldChange
	out = field(out, "spec.profile", b.Spec.Profile, h.Spec.Profile)
	out = field(out, "spec.nodes", b.Spec.Nodes, h.Spec.Nodes)
	out = field(out, "spec.selector", b.Spec.Selector, h.Spec.Selector)
	out = field(out, "spec.count", fmt.Sprint(b.Spec.Count), fmt.Sprint(h.Spec.Count))
	out = field(out, "spec.cancel", fmt.Sprint(b.Spec.Cancel), fmt.Sprint(h.Spec.Cancel))
	out = field(out, "spec.release", fmt.Sprint(b.Spec.Release), fmt.Sprint(h.Spec.Release))
	return out
}
