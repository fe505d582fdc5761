package signing

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/gowebpki/jcs"
	"go.yaml.in/yaml/v3"

	"signet.dev/signet/specs"
)

// TrustPolicyKind is the kind of a trust policy document.
const TrustPolicyKind = "TrustPolicy"

// MaxTrustPolicySize bounds a trust policy file.
const MaxTrustPolicySize = 1 << 20

// Threshold keys: the kinds and actions an approval threshold is set for.
const (
	ActionCancel  = specs.ActionCancel
	ActionRelease = specs.ActionRelease
)

var keyIDRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// TrustPolicy is the operator's decision of which keys may approve spec
// objects and actions, how many distinct keys each needs, which keys may
// sign evidence and (optionally) spec commits. It is never read from the
// spec repository. A parsed TrustPolicy is immutable and safe for
// concurrent use.
type TrustPolicy struct {
	name     string
	doc      TrustPolicyDocument
	keys     map[string]*trustedKey
	order    []string // key ids in file order
	approver map[string]bool
	evidence map[string]bool
	commit   map[string]bool
	auditor  map[string]bool
	digest   specs.Digest
}

type trustedKey struct {
	id        string
	owner     string
	pub       *PublicKey
	notBefore time.Time // zero: no lower bound
	notAfter  time.Time // zero: no upper bound
	revoked   bool
	revokedAt time.Time // zero: not revoked at a time
	// revokedAfterCommit: the evidence commit after which (in first-parent
	// order) nothing the key signed counts; "" when none.
	revokedAfterCommit string
}

// TrustPolicyDocument is a TrustPolicy file as written (its JSON Schema is
// generated from it). Times are strings so that errors can name them.
type TrustPolicyDocument struct {
	APIVersion string `yaml:"apiVersion" json:"apiVersion"`
	Kind       string `yaml:"kind" json:"kind"`
	// Metadata names the policy.
	Metadata TrustPolicyMetadata `yaml:"metadata" json:"metadata"`
	// Spec is the policy: keys, roles and thresholds.
	Spec TrustPolicySpec `yaml:"spec" json:"spec"`
}

// TrustPolicyMetadata names a trust policy.
type TrustPolicyMetadata struct {
	// Name of the policy, shown in audits.
	Name string `yaml:"name" json:"name"`
}

// TrustPolicySpec is the body of a TrustPolicy document (see doc.go).
type TrustPolicySpec struct {
	// Keys are every key the policy knows, by id.
	Keys []TrustedKeySpec `yaml:"keys" json:"keys"`
	// Approvers are the ids of the keys whose approvals count.
	Approvers []string `yaml:"approvers" json:"approvers"`
	// Thresholds is how many distinct approver keys each kind and action
	// needs (omitted: 1).
	Thresholds Thresholds `yaml:"thresholds" json:"thresholds"`
	// EvidenceSigners are the ids of the keys that may sign evidence (the
	// reconcilers'); never also approvers.
	EvidenceSigners []string `yaml:"evidenceSigners,omitempty" json:"evidenceSigners,omitempty"`
	// CommitSigners, when set, are the ids of the keys whose SSH signature
	// a spec commit must carry before the reconciler reads it.
	CommitSigners []string `yaml:"commitSigners,omitempty" json:"commitSigners,omitempty"`
	// Auditors are the ids of the keys that may sign audit checkpoints
	// (signet audit --write-checkpoint), which a later audit starts
	// from; never also evidence signers.
	Auditors []string `yaml:"auditors,omitempty" json:"auditors,omitempty"`
}

// TrustedKeySpec is one key entry of a trust policy.
type TrustedKeySpec struct {
	// ID is the key's id: the sha256 of its public key's DER, 64 hex (what
	// `signet keygen` prints); a mismatch is refused.
	ID string `yaml:"id" json:"id"`
	// Owner names who holds the key (shown instead of the id).
	Owner string `yaml:"owner,omitempty" json:"owner,omitempty"`
	// PublicKey is the key: PKIX PEM or one authorized_keys line.
	PublicKey string `yaml:"publicKey" json:"publicKey"`
	// NotBefore (RFC 3339) is when the key starts to count.
	NotBefore string `yaml:"notBefore,omitempty" json:"notBefore,omitempty"`
	// NotAfter (RFC 3339) is when the key stops counting.
	NotAfter string `yaml:"notAfter,omitempty" json:"notAfter,omitempty"`
	// Revoked, when true, makes the key count nowhere.
	Revoked bool `yaml:"revoked,omitempty" json:"revoked,omitempty"`
	// RevokedAt (RFC 3339) is when the key stops counting; see
	// docs/trust-policy.md for what a time alone can prove.
	RevokedAt string `yaml:"revokedAt,omitempty" json:"revokedAt,omitempty"`
	// RevokedAfterCommit is the hash (40 lowercase hex) of an evidence
	// commit: the audit refuses whatever the key signed after it in the
	// branch's first-parent order, whatever times it states.
	RevokedAfterCommit string `yaml:"revokedAfterCommit,omitempty" json:"revokedAfterCommit,omitempty"`
}

// Thresholds is the number of distinct valid approver keys each kind and
// action needs. A nil (omitted) value means 1; an explicit 0 and negative
// values are refused (nothing runs without an approval). Fields are
// pointers so that an omitted value and a written 0 stay apart. After
// parsing, every field is set.
type Thresholds struct {
	// CertificationProfile is the approvals a profile needs.
	CertificationProfile *int `yaml:"CertificationProfile,omitempty" json:"CertificationProfile"`
	// CertificationRequest is the approvals a request needs.
	CertificationRequest *int `yaml:"CertificationRequest,omitempty" json:"CertificationRequest"`
	// Cancel is the approvals canceling a run needs.
	Cancel *int `yaml:"cancel,omitempty" json:"cancel"`
	// Release is the approvals releasing a run's retained nodes needs.
	Release *int `yaml:"release,omitempty" json:"release"`
}

// LoadTrustPolicy reads and parses the trust policy file at path.
func LoadTrustPolicy(path string) (*TrustPolicy, error) {
	b, err := readBounded(path, MaxTrustPolicySize)
	if err != nil {
		return nil, err
	}
	return ParseTrustPolicy(path, b)
}

// ParseTrustPolicy parses one TrustPolicy YAML (or JSON) document; name is
// used in errors. Unknown fields, duplicate keys, YAML anchors and aliases,
// more than one document, malformed times, key ids that do not match their
// key, unknown key references and unsatisfiable thresholds are refused.
func ParseTrustPolicy(name string, b []byte) (*TrustPolicy, error) {
	if len(b) > MaxTrustPolicySize {
		return nil, fmt.Errorf("%s: %d bytes is more than the limit of %d", name, len(b), MaxTrustPolicySize)
	}
	var doc TrustPolicyDocument
	if fs := specs.DecodeStrict(name, b, &doc); fs != nil {
		return nil, fs
	}
	p, err := newTrustPolicy(doc)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	p.name = name
	return p, nil
}

func parseTime(field, s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s: %q is not an RFC 3339 time", field, s)
	}
	return t, nil
}

func newTrustPolicy(doc TrustPolicyDocument) (*TrustPolicy, error) {
	if doc.APIVersion != specs.APIVersion {
		return nil, fmt.Errorf("apiVersion: %q is not %q", doc.APIVersion, specs.APIVersion)
	}
	if doc.Kind != TrustPolicyKind {
		return nil, fmt.Errorf("kind: %q is not %q", doc.Kind, TrustPolicyKind)
	}
	if doc.Metadata.Name == "" {
		return nil, errors.New("metadata.name: required")
	}
	p := &TrustPolicy{doc: doc, keys: map[string]*trustedKey{}}
	if len(doc.Spec.Keys) == 0 {
		return nil, errors.New("spec.keys: at least one key is required")
	}
	for i, ks := range doc.Spec.Keys {
		f := fmt.Sprintf("spec.keys[%d]", i)
		if !keyIDRE.MatchString(ks.ID) {
			return nil, fmt.Errorf("%s.id: %q is not 64 lowercase hex (sha256 of the DER public key)", f, ks.ID)
		}
		if p.keys[ks.ID] != nil {
			return nil, fmt.Errorf("%s.id: %s appears twice", f, ks.ID)
		}
		var (
			pub *PublicKey
			err error
		)
		text := strings.TrimSpace(ks.PublicKey)
		switch {
		case text == "":
			return nil, fmt.Errorf("%s.publicKey: required", f)
		case strings.HasPrefix(text, "-----BEGIN"):
			pub, err = ParsePublicKeyPEM([]byte(text))
		default:
			pub, err = ParseSSHAuthorizedKey([]byte(text))
		}
		if err != nil {
			return nil, fmt.Errorf("%s.publicKey: %w", f, err)
		}
		if pub.KeyID() != ks.ID {
			return nil, fmt.Errorf("%s.id: %s does not match its public key, whose id is %s", f, ks.ID, pub.KeyID())
		}
		tk := &trustedKey{id: ks.ID, owner: ks.Owner, pub: pub, revoked: ks.Revoked}
		if tk.notBefore, err = parseTime(f+".notBefore", ks.NotBefore); err != nil {
			return nil, err
		}
		if tk.notAfter, err = parseTime(f+".notAfter", ks.NotAfter); err != nil {
			return nil, err
		}
		if tk.revokedAt, err = parseTime(f+".revokedAt", ks.RevokedAt); err != nil {
			return nil, err
		}
		if ks.RevokedAfterCommit != "" && !commitHashRE.MatchString(ks.RevokedAfterCommit) {
			return nil, fmt.Errorf("%s.revokedAfterCommit: %q is not a commit hash (40 lowercase hex)", f, ks.RevokedAfterCommit)
		}
		tk.revokedAfterCommit = ks.RevokedAfterCommit
		if !tk.notBefore.IsZero() && !tk.notAfter.IsZero() && !tk.notBefore.Before(tk.notAfter) {
			return nil, fmt.Errorf("%s: notBefore %s is not before notAfter %s", f, ks.NotBefore, ks.NotAfter)
		}
		p.keys[ks.ID] = tk
		p.order = append(p.order, ks.ID)
	}
	var err error
	if p.approver, err = p.idSet("spec.approvers", doc.Spec.Approvers); err != nil {
		return nil, err
	}
	if p.evidence, err = p.idSet("spec.evidenceSigners", doc.Spec.EvidenceSigners); err != nil {
		return nil, err
	}
	if p.commit, err = p.idSet("spec.commitSigners", doc.Spec.CommitSigners); err != nil {
		return nil, err
	}
	if p.auditor, err = p.idSet("spec.auditors", doc.Spec.Auditors); err != nil {
		return nil, err
	}
	// Separation of duties: the reconciler's evidence key lives next to the
	// runs it records; it must never be able to approve them.
	for i, id := range doc.Spec.EvidenceSigners {
		if p.approver[id] {
			return nil, fmt.Errorf("spec.evidenceSigners[%d]: key %s is also an approver; a key that signs evidence may not approve", i, short(id))
		}
		// An audit checkpoint vouches for the evidence: the key that
		// wrote it must not vouch for it.
		if p.auditor[id] {
			return nil, fmt.Errorf("spec.evidenceSigners[%d]: key %s is also an auditor; a key that signs evidence may not sign audit checkpoints", i, short(id))
		}
	}
	th := &p.doc.Spec.Thresholds
	for _, t := range []struct {
		name string
		v    **int
	}{
		{specs.KindProfile, &th.CertificationProfile},
		{specs.KindRequest, &th.CertificationRequest},
		{ActionCancel, &th.Cancel},
		{ActionRelease, &th.Release},
	} {
		// A fresh pointer: the policy never shares memory with the caller's spec.
		n := 1
		if *t.v != nil {
			n = **t.v
		}
		if n < 1 {
			return nil, fmt.Errorf("spec.thresholds.%s: %d is not a positive number of keys", t.name, n)
		}
		if n > len(p.approver) {
			return nil, fmt.Errorf("spec.thresholds.%s: %d is more than the %d approvers, so nothing could ever be approved", t.name, n, len(p.approver))
		}
		*t.v = &n
	}
	canon, err := p.canonical()
	if err != nil {
		return nil, err
	}
	p.digest = specs.DigestOf(canon)
	return p, nil
}

func (p *TrustPolicy) idSet(field string, ids []string) (map[string]bool, error) {
	set := make(map[string]bool, len(ids))
	for i, id := range ids {
		if p.keys[id] == nil {
			return nil, fmt.Errorf("%s[%d]: %q is not the id of a key in spec.keys", field, i, id)
		}
		if set[id] {
			return nil, fmt.Errorf("%s[%d]: %s appears twice", field, i, id)
		}
		set[id] = true
	}
	return set, nil
}

// canonical returns the RFC 8785 JSON of the policy after defaults (times
// as written, thresholds filled in).
func (p *TrustPolicy) canonical() ([]byte, error) {
	b, err := json.Marshal(p.doc)
	if err != nil {
		return nil, fmt.Errorf("encoding trust policy: %w", err)
	}
	c, err := jcs.Transform(b)
	if err != nil {
		return nil, fmt.Errorf("canonicalizing trust policy: %w", err)
	}
	return c, nil
}

// Name returns metadata.name.
func (p *TrustPolicy) Name() string { return p.doc.Metadata.Name }

// Digest returns the sha256 of the policy's RFC 8785 canonical JSON (with
// defaults applied). Any change to a key, window, revocation, threshold or
// role changes it, so a reconcile keyed on it re-decides at once.
func (p *TrustPolicy) Digest() specs.Digest { return p.digest }

// CanonicalJSON returns the bytes Digest hashes.
func (p *TrustPolicy) CanonicalJSON() []byte {
	c, _ := p.canonical() // checked at parse time
	return c
}

// Thresholds returns the thresholds after defaults: every field is set.
// The pointers are copies; changing what they point to changes nothing.
func (p *TrustPolicy) Thresholds() Thresholds {
	th := p.doc.Spec.Thresholds
	return Thresholds{
		CertificationProfile: new(*th.CertificationProfile),
		CertificationRequest: new(*th.CertificationRequest),
		Cancel:               new(*th.Cancel),
		Release:              new(*th.Release),
	}
}

// Key returns the public key with id, or nil when the policy has none.
func (p *TrustPolicy) Key(id string) *PublicKey {
	if k := p.keys[id]; k != nil {
		return k.pub
	}
	return nil
}

// Owner returns the owner recorded for key id ("" when none).
func (p *TrustPolicy) Owner(id string) string {
	if k := p.keys[id]; k != nil {
		return k.owner
	}
	return ""
}

// EvidenceSigners returns the public keys allowed to sign evidence, in file
// order.
func (p *TrustPolicy) EvidenceSigners() []*PublicKey { return p.keysIn(p.evidence) }

// Approvers returns the public keys allowed to approve, in file order.
func (p *TrustPolicy) Approvers() []*PublicKey { return p.keysIn(p.approver) }

// CommitSigners returns the public keys allowed to sign spec commits.
func (p *TrustPolicy) CommitSigners() []*PublicKey { return p.keysIn(p.commit) }

// Auditors returns the public keys allowed to sign audit checkpoints, in
// file order.
func (p *TrustPolicy) Auditors() []*PublicKey { return p.keysIn(p.auditor) }

func (p *TrustPolicy) keysIn(set map[string]bool) []*PublicKey {
	var out []*PublicKey
	for _, id := range p.order {
		if set[id] {
			out = append(out, p.keys[id].pub)
		}
	}
	return out
}

// KeyValidAt returns "" when key id is in the policy, inside its validity
// window at t (notBefore ≤ t < notAfter) and not revoked at t (revoked is
// false and t < revokedAt); otherwise the reason it is not.
func (p *TrustPolicy) KeyValidAt(id string, t time.Time) string {
	k := p.keys[id]
	if k == nil {
		return fmt.Sprintf("key %s is not in the trust policy", short(id))
	}
	switch {
	case k.revoked:
		return fmt.Sprintf("key %s is revoked", short(id))
	case !k.revokedAt.IsZero() && !t.Before(k.revokedAt):
		return fmt.Sprintf("key %s was revoked at %s", short(id), k.revokedAt.UTC().Format(time.RFC3339))
	case !k.notBefore.IsZero() && t.Before(k.notBefore):
		return fmt.Sprintf("key %s is not valid before %s", short(id), k.notBefore.UTC().Format(time.RFC3339))
	case !k.notAfter.IsZero() && !t.Before(k.notAfter):
		return fmt.Sprintf("key %s expired at %s", short(id), k.notAfter.UTC().Format(time.RFC3339))
	}
	return ""
}

// short abbreviates a key id for messages.
func short(id string) string {
	if len(id) > 16 {
		return id[:16]
	}
	return id
}

// NewTrustPolicy builds a policy from spec as if parsed from a document
// named name; it applies the same checks as ParseTrustPolicy.
func NewTrustPolicy(name string, spec TrustPolicySpec) (*TrustPolicy, error) {
	p, err := newTrustPolicy(TrustPolicyDocument{APIVersion: specs.APIVersion, Kind: TrustPolicyKind, Metadata: TrustPolicyMetadata{Name: name}, Spec: spec})
	if err != nil {
		return nil, fmt.Errorf("trust policy %s: %w", name, err)
	}
	p.name = name
	return p, nil
}

// KeySpec returns a trust-policy key entry for pub (id and PEM filled in).
func KeySpec(pub *PublicKey) TrustedKeySpec {
	return TrustedKeySpec{ID: pub.KeyID(), PublicKey: string(pub.MarshalPEM())}
}

// MarshalYAML returns the policy as a TrustPolicy YAML document (defaults
// applied) that ParseTrustPolicy reads back to the same Digest.
func (p *TrustPolicy) MarshalYAML() ([]byte, error) {
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(p.doc); err != nil {
		return nil, fmt.Errorf("encoding trust policy: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("encoding trust policy: %w", err)
	}
	return b.Bytes(), nil
}

var commitHashRE = regexp.MustCompile(`^[0-9a-f]{40}$`)

// RevokedAfterCommit returns the evidence commit (hex) after which, in
// first-parent order, nothing key id signed counts; "" when the policy
// names none. It is not a time: KeyValidAt does not apply it; the audit
// does, by the branch's own order, which a signer cannot backdate.
func (p *TrustPolicy) RevokedAfterCommit(id string) string {
	if k := p.keys[id]; k != nil {
		return k.revokedAfterCommit
	}
	return ""
}
