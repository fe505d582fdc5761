package reconciler

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"signet.dev/signet/specs"
)

// CeilingViolation is one way a profile asks for more than the ceiling.
type CeilingViolation struct {
	Field   string
	Message string
}

func (v CeilingViolation) String() string { return v.Field + ": " + v.Message }

// specKinds are the check kinds spec validation accepts: one that no
// family serves is "not enabled", any other "not available".
var specKinds = []specs.Backend{specs.BackendLocal, specs.BackendPod, specs.BackendMPIJob}

// Check returns every way p asks for more than the ceiling, or for a
// check kind no backend family of this reconciler serves (enabled says
// which do). An empty result means p fits. It runs at admission, before
// any node is touched.
func (c Ceiling) Check(p *specs.CertificationProfile, enabled func(specs.Backend) bool) []CeilingViolation {
	var out []CeilingViolation
	add := func(field, format string, args ...any) {
		out = append(out, CeilingViolation{Field: field, Message: fmt.Sprintf(format, args...)})
	}
	for i, ck := range p.Spec.Checks {
		f := fmt.Sprintf("spec.checks[%d]", i)
		switch {
		case enabled(ck.Backend):
		case slices.Contains(specKinds, ck.Backend):
			add(f+".backend", "the %s backend is not enabled in this reconciler's config", ck.Backend)
		default:
			add(f+".backend", "backend %q is not available in this reconciler", ck.Backend)
		}
		if c.MaxGPUs > 0 && ck.GPUCount > c.MaxGPUs {
			add(f+".gpuCount", "%d is over the ceiling of %d", ck.GPUCount, c.MaxGPUs)
		}
		w := ck.Workload
		if w == nil {
			continue
		}
		wf := f + ".workload"
		if !c.registryAllowed(w.Image) {
			add(wf+".image", "%q is not in an allowed registry (%s)", w.Image, strings.Join(c.Registries, ", "))
		}
		if w.HostNetwork && !c.HostNetwork {
			add(wf+".hostNetwork", "host network is not allowed by the ceiling")
		}
		for j, hp := range w.HostPaths {
			if !c.hostPathAllowed(hp.Path) {
				add(fmt.Sprintf("%s.hostPaths[%d].path", wf, j), "%q is not under an allowed host path", hp.Path)
			}
		}
		if sc := w.SecurityContext; sc != nil {
			if sc.Privileged && !c.AllowPrivileged {
				add(wf+".securityContext.privileged", "privileged containers are not allowed by the ceiling")
			}
			for j, capName := range sc.Capabilities {
				if !slices.Contains(c.Capabilities, capName) {
					add(fmt.Sprintf("%s.securityContext.capabilities[%d]", wf, j), "capability %q is not allowed by the ceiling", capName)
				}
			}
		}
	}
	return out
}

// registryAllowed reports whether image names a repository of an allowed
// entry, matched on whole path components of the repository name (issue 21,
// finding 11): an entry is a registry host ("registry.example") or a
// repository prefix under one ("registry.example/team"). The repository
// must name its registry explicitly (a first component with "." or ":", or
// "localhost"), as container runtimes read it: "registry.example@sha256:…"
// or "localhost:5000@sha256:…" is Docker Hub's library/registry.example or
// library/localhost, and matches no entry.
func (c Ceiling) registryAllowed(image string) bool {
	name, _, _ := strings.Cut(image, "@")
	if i := strings.LastIndex(name, "/"); i >= 0 {
		if j := strings.LastIndex(name[i:], ":"); j >= 0 {
			name = name[:i+j] // a tag
		}
	}
	host, _, ok := strings.Cut(name, "/")
	if !ok || !(strings.ContainsAny(host, ".:") || host == "localhost") {
		return false
	}
	for _, r := range c.Registries {
		r = strings.TrimSuffix(r, "/")
		if r == "" {
			continue
		}
		if name == r || strings.HasPrefix(name, r+"/") {
			return true
		}
	}
	return false
}

func (c Ceiling) hostPathAllowed(p string) bool {
	p = path.Clean(p)
	for _, allowed := range c.HostPaths {
		if p == allowed || strings.HasPrefix(p, strings.TrimSuffix(allowed, "/")+"/") {
			return true
		}
	}
	return false
}
