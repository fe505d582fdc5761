package specs

import (
	"fmt"
	"maps"
	"path"
	"regexp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Finding is one problem with a spec: the file (repository-relative, or
// "kustomize build <dir>" for rendered output), the 0-based document in it
// (-1 when the whole file is meant), the field path (like
// spec.checks[3].deadline, empty for the whole document) and what is wrong.
type Finding struct {
	File     string `json:"file"`
	Document int    `json:"document"`
	// Line and Column (1-based) are where in File the finding points: the
	// field's key, the list element, or the YAML error; 0 when unknown.
	Line    int    `json:"line,omitempty"`
	Column  int    `json:"column,omitempty"`
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
}

// String returns the finding as one line, led by file:line:column as
// compilers print it (editors and CI annotate the line), or by the
// document index when the line is unknown:
// profiles/h100.yaml:13:5: spec.checks[3].deadline: "90" is not whole seconds ("90s").
func (f Finding) String() string {
	var b strings.Builder
	b.WriteString(f.File)
	switch {
	case f.Line > 0:
		fmt.Fprintf(&b, ":%d:%d", f.Line, max(f.Column, 1))
	case f.Document >= 0:
		fmt.Fprintf(&b, "[doc %d]", f.Document)
	}
	if f.Field != "" {
		b.WriteString(": ")
		b.WriteString(f.Field)
	}
	b.WriteString(": ")
	b.WriteString(f.Message)
	return b.String()
}

// MaxConfigMapBundleSize is the most bytes (the sum of its file sizes) the
// bundle of a profile with pod or mpijob checks may hold, so that its
// scripts fit one ConfigMap (DESIGN §2).
const MaxConfigMapBundleSize = 1 << 20

// MaxQueuedPodParticipants is the most participants a pod check sent
// through a Kueue queue (workload.queue) may have: Kueue groups a pod
// group's pods into pod sets by their scheduling shape, each participant's
// pod is pinned to its own node and so is its own pod set, and a Kueue
// Workload holds at most 8 pod sets (docs/decisions.md). A larger group is
// refused by Kueue's validation and would wait for capacity until its
// deadline; signet refuses the profile instead.
const MaxQueuedPodParticipants = 8

// BundleInfo is a profile's bundle as found in the repository: its path,
// the digest its bytes actually have (which may differ from the pin), its
// files in digest order and their total size.
type BundleInfo struct {
	Path   string       `json:"path"`
	Digest Digest       `json:"digest"`
	Size   int64        `json:"size"`
	Files  []BundleFile `json:"files"`
}

// has reports whether the bundle holds the regular file p.
func (b *BundleInfo) has(p string) bool {
	for _, f := range b.Files {
		if f.Path == p {
			return true
		}
	}
	return false
}

// reporter collects findings about one object.
type reporter struct {
	src      Source
	pos      positions
	findings []Finding
}

func (r *reporter) addf(field, format string, args ...any) {
	pos := r.pos.position(r.src, field)
	r.findings = append(r.findings, Finding{File: r.src.File, Document: r.src.Index, Line: pos.Line, Column: pos.Column, Field: field, Message: fmt.Sprintf(format, args...)})
}

func (r *reporter) dnsLabel(field, v string) {
	if v == "" {
		r.addf(field, "is required")
		return
	}
	if errs := validation.IsDNS1123Label(v); len(errs) > 0 {
		r.addf(field, "%q is not a DNS label: %s", v, strings.Join(errs, "; "))
	}
}

// imageRE is repo[:tag]@sha256:<64 hex>: an optional registry host (with
// port), lowercase path components, an optional tag that the digest
// overrides, and the digest that pins the image.
var imageRE = regexp.MustCompile(`^(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::[0-9]+)?/)?[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?@(.*)$`)

var capabilityRE = regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`)

// validateProfile checks every rule of DESIGN §2 and §3 for one profile.
// bundle is nil when the bundle could not be read (already reported).
func validateProfile(o *Object, bundle *BundleInfo) []Finding {
	p := o.Profile
	r := &reporter{src: o.Source, pos: o.positions}
	r.dnsLabel("metadata.name", p.Metadata.Name)
	s := p.Spec

	switch {
	case s.Bundle.Path == "":
		r.addf("spec.bundle.path", "is required")
	case !cleanRelative(s.Bundle.Path):
		r.addf("spec.bundle.path", "%q is not a clean relative path inside the repository (no \"..\", no leading \"/\")", s.Bundle.Path)
	}
	pinned, err := ParseDigest(s.Bundle.Digest)
	switch {
	case s.Bundle.Digest == "":
		r.addf("spec.bundle.digest", "is required")
	case err != nil:
		r.addf("spec.bundle.digest", "%v", err)
	case bundle != nil && bundle.Digest != pinned:
		r.addf("spec.bundle.digest", "bundle %s does not match its pin: expected %s, actual %s", s.Bundle.Path, pinned, bundle.Digest)
	}

	pa := s.Participants
	switch {
	case pa.Min < 1:
		r.addf("spec.participants.min", "%d is less than 1", pa.Min)
	case pa.Min > pa.Max:
		r.addf("spec.participants", "min %d is greater than max %d", pa.Min, pa.Max)
	}
	if pa.Max > MaxParticipants {
		r.addf("spec.participants.max", "%d is more than %d", pa.Max, MaxParticipants)
	}

	switch s.OnFailure {
	case "", OnFailureContinue, OnFailureStop:
	default:
		r.addf("spec.onFailure", "%q is not %q or %q", s.OnFailure, OnFailureContinue, OnFailureStop)
	}

	if len(s.Checks) == 0 {
		r.addf("spec.checks", "needs at least one check")
	}
	local, remote := 0, 0
	names := map[string]int{}
	for i, c := range s.Checks {
		f := fmt.Sprintf("spec.checks[%d]", i)
		r.dnsLabel(f+".name", c.Name)
		if j, dup := names[c.Name]; dup && c.Name != "" {
			r.addf(f+".name", "%q is also the name of spec.checks[%d]", c.Name, j)
		} else {
			names[c.Name] = i
		}
		switch {
		case c.Script == "":
			r.addf(f+".script", "is required")
		case !cleanRelative(c.Script):
			r.addf(f+".script", "%q is not a clean relative path inside the bundle (no \"..\", no leading \"/\")", c.Script)
		case bundle != nil && !bundle.has(c.Script):
			r.addf(f+".script", "%q is not a file of bundle %s", c.Script, s.Bundle.Path)
		}
		switch c.Backend {
		case BackendLocal:
			local++
		case BackendPod, BackendMPIJob:
			remote++
		case "":
			r.addf(f+".backend", "is required (%s, %s or %s)", BackendLocal, BackendPod, BackendMPIJob)
		default:
			r.addf(f+".backend", "%q is not %s, %s or %s", c.Backend, BackendLocal, BackendPod, BackendMPIJob)
		}
		if c.GPUCount < 0 {
			r.addf(f+".gpuCount", "%d is negative", c.GPUCount)
		}
		if c.Backend == BackendMPIJob && c.GPUCount < 1 {
			r.addf(f+".gpuCount", "an mpijob check needs at least 1 GPU per participant, got %d", c.GPUCount)
		}
		if c.Deadline <= 0 {
			r.addf(f+".deadline", "is required: whole positive seconds like \"600s\"")
		}
		if c.Stage != "" {
			r.dnsLabel(f+".stage", c.Stage)
		}
		switch {
		case c.Backend == BackendLocal && c.Workload != nil:
			r.addf(f+".workload", "a local check runs as a process on this machine; a workload is only for pod and mpijob checks")
		case (c.Backend == BackendPod || c.Backend == BackendMPIJob) && c.Workload == nil:
			r.addf(f+".workload", "is required for a %s check (at least the image, pinned by digest)", c.Backend)
		case c.Workload != nil:
			validateWorkload(r, f+".workload", c.Workload)
		}
		if c.Backend == BackendPod && c.Workload != nil && c.Workload.Queue != "" && pa.Max > MaxQueuedPodParticipants {
			r.addf(f+".workload.queue", "a pod check through a Kueue queue has at most %d participants (each participant's pod is pinned to its node, so each is its own Kueue pod set, and a Workload holds at most %d); spec.participants.max is %d", MaxQueuedPodParticipants, MaxQueuedPodParticipants, pa.Max)
		}
	}
	if local > 0 && remote > 0 {
		r.addf("spec.checks", "mixes local checks with pod/mpijob checks: local checks are only allowed in a local profile, where every check is local")
	}
	if local > 0 && remote == 0 && pa.Max > 1 {
		r.addf("spec.participants.max", "a local profile runs on this machine only: max must be 1, got %d", pa.Max)
	}
	if remote > 0 && bundle != nil && bundle.Size > MaxConfigMapBundleSize {
		r.addf("spec.bundle.path", "bundle %s holds %d bytes; a profile with pod or mpijob checks needs a bundle of at most %d bytes to fit a ConfigMap", s.Bundle.Path, bundle.Size, MaxConfigMapBundleSize)
	}
	return r.findings
}

func validateWorkload(r *reporter, f string, w *Workload) {
	switch m := imageRE.FindStringSubmatch(w.Image); {
	case w.Image == "":
		r.addf(f+".image", "is required, pinned by digest (repo@sha256:<64 hex>)")
	case m == nil:
		r.addf(f+".image", "%q is not an image reference pinned by digest (repo@sha256:<64 hex>)", w.Image)
	default:
		if _, err := ParseDigest(m[1]); err != nil {
			r.addf(f+".image", "%q: digest %v", w.Image, err)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(w.Resources.Requests)) {
		q := w.Resources.Requests[name]
		fr := join(f+".resources.requests", name)
		validateResourceName(r, fr, name)
		if q.Sign() < 0 {
			r.addf(fr, "%s is negative", q.String())
		}
		if l, ok := w.Resources.Limits[name]; ok && q.Cmp(l) > 0 {
			r.addf(fr, "request %s is more than the limit %s", q.String(), l.String())
		}
	}
	for _, name := range slices.Sorted(maps.Keys(w.Resources.Limits)) {
		q := w.Resources.Limits[name]
		fr := join(f+".resources.limits", name)
		validateResourceName(r, fr, name)
		if q.Sign() < 0 {
			r.addf(fr, "%s is negative", q.String())
		}
	}
	if sc := w.SecurityContext; sc != nil {
		seen := map[string]bool{}
		for i, c := range sc.Capabilities {
			fc := fmt.Sprintf("%s.securityContext.capabilities[%d]", f, i)
			switch {
			case !capabilityRE.MatchString(c) || strings.HasPrefix(c, "CAP_"):
				r.addf(fc, "%q is not a capability name like \"SYS_ADMIN\"", c)
			case seen[c]:
				r.addf(fc, "%q is listed twice", c)
			}
			seen[c] = true
		}
		if sc.RunAsUser != nil && *sc.RunAsUser < 0 {
			r.addf(f+".securityContext.runAsUser", "%d is negative", *sc.RunAsUser)
		}
		if sc.RunAsUser != nil && *sc.RunAsUser == 0 && sc.RunAsNonRoot != nil && *sc.RunAsNonRoot {
			r.addf(f+".securityContext", "runAsUser 0 contradicts runAsNonRoot true")
		}
	}
	mounts := map[string]int{}
	for i, h := range w.HostPaths {
		fh := fmt.Sprintf("%s.hostPaths[%d]", f, i)
		if !cleanAbsolute(h.Path) {
			r.addf(fh+".path", "%q is not a clean absolute path", h.Path)
		}
		if !cleanAbsolute(h.MountPath) {
			r.addf(fh+".mountPath", "%q is not a clean absolute path", h.MountPath)
		} else if sp, ok := overSignetPath(h.MountPath); ok {
			r.addf(fh+".mountPath", "%q would cover signet's own %s, which runs and reports the check", h.MountPath, sp)
		} else if j, dup := mounts[h.MountPath]; dup {
			r.addf(fh+".mountPath", "%q is also the mountPath of hostPaths[%d]", h.MountPath, j)
		} else {
			mounts[h.MountPath] = i
		}
	}
	if w.Queue != "" {
		if errs := validation.IsDNS1123Subdomain(w.Queue); len(errs) > 0 {
			r.addf(f+".queue", "%q is not a Kueue LocalQueue name: %s", w.Queue, strings.Join(errs, "; "))
		}
	}
	if w.RequiredTopologyLevel != "" {
		if w.Queue == "" {
			r.addf(f+".requiredTopologyLevel", "needs a queue: topology-aware scheduling is Kueue's, set workload.queue")
		}
		if errs := validation.IsQualifiedName(w.RequiredTopologyLevel); len(errs) > 0 {
			r.addf(f+".requiredTopologyLevel", "%q is not a node label key: %s", w.RequiredTopologyLevel, strings.Join(errs, "; "))
		}
	}
}

func validateResourceName(r *reporter, f, name string) {
	if name == GPUResource {
		r.addf(f, "GPUs are asked for with the check's gpuCount, not in resources")
		return
	}
	if errs := validation.IsQualifiedName(name); len(errs) > 0 {
		r.addf(f, "%q is not a resource name: %s", name, strings.Join(errs, "; "))
	}
}

// validateRequest checks the rules of DESIGN §2 for one request against the
// profiles of the same rendering (by name). A profile in broken exists but
// has findings of its own; the checks against it are skipped, not reported.
func validateRequest(o *Object, profiles map[string]*Object, broken map[string]bool) []Finding {
	q := o.Request
	r := &reporter{src: o.Source, pos: o.positions}
	r.dnsLabel("metadata.name", q.Metadata.Name)
	s := q.Spec
	prof := r.profileRef("spec.profile", s.Profile, profiles, broken)

	byNodes := len(s.Nodes) > 0
	bySelector := len(s.Selector) > 0 || s.Count != 0
	switch {
	case byNodes && bySelector:
		r.addf("spec", "names nodes and a selector/count: use either nodes, or selector and count, never both")
	case !byNodes && !bySelector:
		r.addf("spec", "names no nodes: set either nodes, or selector and count")
	}
	r.nodeNames("spec.nodes", s.Nodes)
	if bySelector && !byNodes {
		if len(s.Selector) == 0 {
			r.addf("spec.selector", "is required with count")
		}
		if s.Count < 1 {
			r.addf("spec.count", "%d is less than 1: a selector needs a count", s.Count)
		}
	}
	r.selector("spec.selector", s.Selector)
	if prof != nil {
		n, field := len(s.Nodes), "spec.nodes"
		if !byNodes {
			n, field = s.Count, "spec.count"
		}
		pa := prof.Spec.Participants
		if n > 0 && (n < pa.Min || n > pa.Max) {
			r.addf(field, "asks for %d nodes; profile %s allows %d to %d", n, s.Profile, pa.Min, pa.Max)
		}
		if prof.IsLocal() && !byNodes && bySelector {
			r.addf("spec.selector", "profile %s is local: name this machine in nodes (its hostname or localhost), not a selector", s.Profile)
		}
		if prof.IsLocal() && len(s.Nodes) > 1 {
			r.addf("spec.nodes", "profile %s is local: its only participant is this machine (its hostname or localhost)", s.Profile)
		}
	}
	return r.findings
}

// profileRef returns the profile that field names, or nil after reporting
// a missing or empty name; a profile in broken (it has findings of its own)
// is nil and not reported.
func (r *reporter) profileRef(field, name string, profiles map[string]*Object, broken map[string]bool) *CertificationProfile {
	switch po := profiles[name]; {
	case name == "":
		r.addf(field, "is required")
	case po == nil && broken[name]:
	case po == nil:
		r.addf(field, "no CertificationProfile %q in this rendering", name)
	default:
		return po.Profile
	}
	return nil
}

// nodeNames reports node names that are not DNS subdomains or are named
// twice in the list at field.
func (r *reporter) nodeNames(field string, nodes []string) {
	seen := map[string]int{}
	for i, n := range nodes {
		f := fmt.Sprintf("%s[%d]", field, i)
		if errs := validation.IsDNS1123Subdomain(n); len(errs) > 0 {
			r.addf(f, "%q is not a node name: %s", n, strings.Join(errs, "; "))
		}
		if j, dup := seen[n]; dup {
			r.addf(f, "%q is also %s[%d]", n, field, j)
		} else {
			seen[n] = i
		}
	}
}

// selector reports label keys and values of the selector at field that
// Kubernetes would refuse.
func (r *reporter) selector(field string, sel map[string]string) {
	for _, k := range slices.Sorted(maps.Keys(sel)) {
		v := sel[k]
		f := join(field, k)
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			r.addf(f, "%q is not a label key: %s", k, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			r.addf(f, "%q is not a label value: %s", v, strings.Join(errs, "; "))
		}
	}
}

// cleanRelative reports whether p is a clean, slash-separated relative path
// that stays inside its root: no "..", no leading "/", not ".".
func cleanRelative(p string) bool {
	return p != "." && path.Clean(p) == p && !strings.HasPrefix(p, "/") && p != ".." && !strings.HasPrefix(p, "../") &&
		!strings.Contains(p, "\\") && validPath(p)
}

func validPath(p string) bool {
	for _, elem := range strings.Split(p, "/") {
		if elem == "" || elem == "." || elem == ".." {
			return false
		}
	}
	return true
}

// cleanAbsolute reports whether p is an absolute, clean path.
// SignetMountPaths are the paths of a check container that signet itself
// mounts or writes: the installed `signet exec` binary, the verified script,
// the work directory and the termination message (the result). A workload
// mount at, under or above one of them is refused (issue 21, finding 8): it
// could replace what runs the check or what reports its result.
var SignetMountPaths = []string{"/signet-bin", "/signet-script", "/signet-work", "/dev/termination-log"}

// overSignetPath returns the signet path that mount path p equals, lies
// under or contains.
func overSignetPath(p string) (string, bool) {
	for _, sp := range SignetMountPaths {
		if p == sp || strings.HasPrefix(p, sp+"/") || strings.HasPrefix(sp, strings.TrimSuffix(p, "/")+"/") {
			return sp, true
		}
	}
	return "", false
}

func cleanAbsolute(p string) bool {
	return strings.HasPrefix(p, "/") && path.Clean(p) == p
}

// ParsePinnedImage checks that ref is an image reference pinned by digest
// (repo@sha256:<64 lowercase hex>) and returns its digest.
func ParsePinnedImage(ref string) (Digest, error) {
	m := imageRE.FindStringSubmatch(ref)
	if m == nil {
		return "", fmt.Errorf("%q is not an image reference pinned by digest (repo@sha256:<64 hex>)", ref)
	}
	return ParseDigest(m[1])
}
