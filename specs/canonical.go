package specs

import (
	"encoding/json"
	"fmt"

	"github.com/gowebpki/jcs"
)

// CanonicalJSON returns the RFC 8785 (JCS) canonical JSON of v as
// encoding/json marshals it: object members sorted by UTF-16 code units,
// no insignificant whitespace, ES6 number formatting. Equal values always
// give equal bytes, so their sha256 can be signed.
func CanonicalJSON(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("canonical JSON: %w", err)
	}
	out, err := jcs.Transform(b)
	if err != nil {
		return nil, fmt.Errorf("canonical JSON: %w", err)
	}
	return out, nil
}

// canonicalMeta is the metadata that canonical forms keep: the name only.
// Labels and annotations never change what a run does (ObjectMeta), so an
// overlay that adds them does not invalidate approvals.
type canonicalMeta struct {
	Name string `json:"name"`
}

type canonicalProfile struct {
	TypeMeta `json:",inline"`
	Metadata canonicalMeta `json:"metadata"`
	Spec     ProfileSpec   `json:"spec"`
}

// requestExecution is the execution part of a RequestSpec: everything but
// cancel and release (DESIGN §2).
type requestExecution struct {
	Profile  string            `json:"profile"`
	Nodes    []string          `json:"nodes,omitempty"`
	Selector map[string]string `json:"selector,omitempty"`
	Count    int               `json:"count,omitempty"`
}

type canonicalRequest struct {
	TypeMeta `json:",inline"`
	Metadata canonicalMeta    `json:"metadata"`
	Spec     requestExecution `json:"spec"`
}

// CanonicalProfile returns the canonical JSON that approvals of p sign:
// apiVersion, kind, metadata.name and the spec, with onFailure defaulted to
// "continue" so that omitting it and writing the default digest alike.
func CanonicalProfile(p *CertificationProfile) ([]byte, error) {
	spec := p.Spec
	if spec.OnFailure == "" {
		spec.OnFailure = OnFailureContinue
	}
	return CanonicalJSON(canonicalProfile{
		TypeMeta: TypeMeta{APIVersion: APIVersion, Kind: KindProfile},
		Metadata: canonicalMeta{Name: p.Metadata.Name},
		Spec:     spec,
	})
}

// CanonicalRequest returns the canonical JSON that approvals of r and of its
// cancel and release actions sign: apiVersion, kind, metadata.name and the
// execution fields of the spec (profile, nodes, selector, count). cancel and
// release are left out, so setting them does not change the digest.
func CanonicalRequest(r *CertificationRequest) ([]byte, error) {
	return CanonicalJSON(canonicalRequest{
		TypeMeta: TypeMeta{APIVersion: APIVersion, Kind: KindRequest},
		Metadata: canonicalMeta{Name: r.Metadata.Name},
		Spec: requestExecution{
			Profile:  r.Spec.Profile,
			Nodes:    r.Spec.Nodes,
			Selector: r.Spec.Selector,
			Count:    r.Spec.Count,
		},
	})
}

type canonicalStanding struct {
	TypeMeta `json:",inline"`
	Metadata canonicalMeta     `json:"metadata"`
	Spec     standingExecution `json:"spec"`
}

// standingExecution is a StandingSpec without Release, with the intervals
// written as time.Duration writes them ("168h0m0s") so that "168h" and
// "10080m" digest alike. An interval that does not parse is kept as written
// (validation reports it).
type standingExecution struct {
	Profile      string            `json:"profile"`
	Nodes        []string          `json:"nodes,omitempty"`
	Selector     map[string]string `json:"selector,omitempty"`
	NodesPerRun  int               `json:"nodesPerRun"`
	Every        Interval          `json:"every,omitempty"`
	BeforeExpiry Interval          `json:"beforeExpiry,omitempty"`
	Triggers     []Trigger         `json:"triggers,omitempty"`
	Budget       Budget            `json:"budget"`
}

// CanonicalStanding returns the canonical JSON that approvals of s sign:
// apiVersion, kind, metadata.name and every field of the spec but release
// (an action, approved on its own), intervals normalised.
func CanonicalStanding(s *StandingCertification) ([]byte, error) {
	return CanonicalJSON(canonicalStanding{
		TypeMeta: TypeMeta{APIVersion: APIVersion, Kind: KindStanding},
		Metadata: canonicalMeta{Name: s.Metadata.Name},
		Spec: standingExecution{
			Profile:      s.Spec.Profile,
			Nodes:        s.Spec.Nodes,
			Selector:     s.Spec.Selector,
			NodesPerRun:  s.Spec.NodesPerRun,
			Every:        s.Spec.Every.normalized(),
			BeforeExpiry: s.Spec.BeforeExpiry.normalized(),
			Triggers:     s.Spec.Triggers,
			Budget:       s.Spec.Budget,
		},
	})
}
