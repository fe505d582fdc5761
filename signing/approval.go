package signing

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"signet.dev/signet/specs"
)

// ApprovalPredicateType is the in-toto predicate type of an approval.
const ApprovalPredicateType = "https://signet.dev/approval/v1"

// ApprovalsDir is where approvals live, relative to the rendered spec path.
const ApprovalsDir = ".signet/approvals"

// ApprovalPredicate is the predicate of an approval statement.
type ApprovalPredicate struct {
	// Clusters limits the approval to these clusters; empty means all.
	Clusters []string `json:"clusters,omitempty"`
	// Expires, when set, is the RFC 3339 time from which the approval no
	// longer counts.
	Expires string `json:"expires,omitempty"`
	// SignedAt is the RFC 3339 time the signer says it signed. It is
	// informational: trust decisions use the caller's clock.
	SignedAt string `json:"signedAt"`
}

var (
	subjectRE = regexp.MustCompile(`^(CertificationProfile|CertificationRequest|StandingCertification)/([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)(#(cancel|release|release:[a-z0-9][-a-z0-9]{0,80}))?$`)
	dnsLabel  = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)
)

// SubjectName returns the approval subject of an object or action:
// "KIND/NAME", or "CertificationRequest/NAME#ACTION" for action "cancel" or
// "release" (action "" names the object itself).
func SubjectName(kind, name, action string) string { return specs.SubjectName(kind, name, action) }

// ParseSubjectName splits an approval subject into kind, name and action
// and refuses anything but the forms SubjectName writes: cancel and
// release on a request, release:<run> on a standing certification for one
// of its firings (specs.StandingReleaseAction), none on a profile.
func ParseSubjectName(s string) (kind, name, action string, err error) {
	m := subjectRE.FindStringSubmatch(s)
	if m == nil {
		return "", "", "", fmt.Errorf("subject %q is not KIND/NAME, CertificationRequest/NAME#cancel|release or StandingCertification/NAME#release:RUN", s)
	}
	kind, name, action = m[1], m[2], m[5]
	switch {
	case action == "":
	case kind == specs.KindRequest && (action == ActionCancel || action == ActionRelease):
	case kind == specs.KindStanding && strings.HasPrefix(action, ActionRelease+":"):
		if _, ok := specs.FiringSequence(name, strings.TrimPrefix(action, ActionRelease+":")); !ok {
			return "", "", "", fmt.Errorf("subject %q: %s is not a firing of %s (%s-<sequence>)", s, strings.TrimPrefix(action, ActionRelease+":"), name, name)
		}
	default:
		return "", "", "", fmt.Errorf("subject %q: actions are cancel and release on a CertificationRequest and release:RUN on a StandingCertification", s)
	}
	return kind, name, action, nil
}

// NewApprovalStatement returns the approval statement of subjects (names
// from SubjectName, digests of the objects' canonical JSON).
func NewApprovalStatement(subjects []Subject, pred ApprovalPredicate) (*Statement, error) {
	for i, s := range subjects {
		if _, _, _, err := ParseSubjectName(s.Name); err != nil {
			return nil, fmt.Errorf("approval: subject[%d]: %w", i, err)
		}
	}
	if err := pred.check(); err != nil {
		return nil, fmt.Errorf("approval: %w", err)
	}
	return NewStatement(ApprovalPredicateType, subjects, pred)
}

func (p ApprovalPredicate) check() error {
	seen := map[string]bool{}
	for i, c := range p.Clusters {
		if !dnsLabel.MatchString(c) {
			return fmt.Errorf("predicate.clusters[%d]: %q is not a DNS label", i, c)
		}
		if seen[c] {
			return fmt.Errorf("predicate.clusters[%d]: %q appears twice", i, c)
		}
		seen[c] = true
	}
	if _, err := parseTime("predicate.expires", p.Expires); err != nil {
		return err
	}
	if p.SignedAt == "" {
		return errors.New("predicate.signedAt: required")
	}
	if _, err := parseTime("predicate.signedAt", p.SignedAt); err != nil {
		return err
	}
	return nil
}

// Approval is one parsed approval file. Its signatures are checked by
// Verify against a policy's approver keys; Decide uses that result.
type Approval struct {
	// Path is the file's path in the file system it was loaded from.
	Path string
	// Raw is the file's exact bytes (what admission copies into evidence).
	Raw []byte
	// Envelope and Statement are the parsed document.
	Envelope  *Envelope
	Statement *Statement
	// Predicate is the parsed approval predicate.
	Predicate ApprovalPredicate
	// Clusters is Predicate.Clusters; empty means every cluster.
	Clusters []string
	// Expires is the parsed expiry; zero means none.
	Expires time.Time
	// SignedAt is the signer's claimed signing time.
	SignedAt time.Time

	subjects map[string]specs.Digest
	signed   Envelope // the envelope as parsed: what Verify checks, whatever a caller does to Envelope

	mu         sync.Mutex
	verifiedBy *TrustPolicy // the policy verified was computed against
	verified   *VerifiedApproval
}

// VerifiedApproval is what Approval.Verify found against one policy's
// approver keys. It does not apply validity windows: Decide does, at its
// own time.
type VerifiedApproval struct {
	// Keys are the ids of approver keys with a valid signature, each once,
	// in signature order.
	Keys []string
	// Refused holds, in signature order, why each signature that no
	// approver key verifies did not count.
	Refused []*VerifyError
}

// ParseApproval parses the approval envelope b read from path: a strict
// DSSE envelope of an in-toto statement of ApprovalPredicateType whose
// subjects are approval subject names and whose predicate is an
// ApprovalPredicate with no unknown fields.
func ParseApproval(path string, b []byte) (*Approval, error) {
	env, err := ParseEnvelope(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	st, err := env.Statement()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if st.PredicateType != ApprovalPredicateType {
		return nil, fmt.Errorf("%s: statement: predicateType %q is not %q", path, st.PredicateType, ApprovalPredicateType)
	}
	a := &Approval{Path: path, Raw: b, Envelope: env, Statement: st, subjects: map[string]specs.Digest{}}
	if err := StrictUnmarshal(st.Predicate, &a.Predicate); err != nil {
		return nil, fmt.Errorf("%s: predicate: %w", path, err)
	}
	if err := a.Predicate.check(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	a.Clusters = a.Predicate.Clusters
	a.Expires, _ = parseTime("", a.Predicate.Expires)
	a.SignedAt, _ = parseTime("", a.Predicate.SignedAt)
	for i, s := range st.Subject {
		if _, _, _, err := ParseSubjectName(s.Name); err != nil {
			return nil, fmt.Errorf("%s: statement: subject[%d]: %w", path, i, err)
		}
		a.subjects[s.Name] = s.SubjectDigest()
	}
	a.signed = *env
	a.signed.Signatures = slices.Clone(env.Signatures)
	return a, nil
}

// Subjects returns the approval's subject names, sorted.
func (a *Approval) Subjects() []string {
	out := make([]string, 0, len(a.subjects))
	for s := range a.subjects {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// SubjectDigest returns the digest the approval gives subject, and whether
// it names subject at all.
func (a *Approval) SubjectDigest(subject string) (specs.Digest, bool) {
	d, ok := a.subjects[subject]
	return d, ok
}

// LoadApprovals reads every file under <dir>/.signet/approvals of fsys
// (recursively; names starting with "." such as .gitkeep are skipped) and
// parses each as an approval. A missing directory means no approvals. A file
// that cannot be read or parsed, or is not a regular file, gives an error
// naming it and never stops the others. Approvals are returned in path order.
func LoadApprovals(fsys fs.FS, dir string) ([]*Approval, []error) {
	root := path.Join(dir, ApprovalsDir)
	if dir == "" || dir == "." {
		root = ApprovalsDir
	}
	var (
		out  []*Approval
		errs []error
	)
	err := fs.WalkDir(fsys, root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == root && errors.Is(err, fs.ErrNotExist) {
				return fs.SkipAll
			}
			errs = append(errs, fmt.Errorf("could not read %s: %w", p, err))
			if d != nil && d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if p != root && strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return nil
		}
		if !d.Type().IsRegular() {
			errs = append(errs, fmt.Errorf("%s: not a regular file (%s)", p, d.Type()))
			return nil
		}
		b, err := readFSBounded(fsys, p, MaxEnvelopeSize)
		if err != nil {
			errs = append(errs, err)
			return nil
		}
		a, err := ParseApproval(p, b)
		if err != nil {
			errs = append(errs, err)
			return nil
		}
		out = append(out, a)
		return nil
	})
	if err != nil {
		errs = append(errs, fmt.Errorf("could not read %s: %w", root, err))
	}
	return out, errs
}

func readFSBounded(fsys fs.FS, p string, limit int64) ([]byte, error) {
	f, err := fsys.Open(p)
	if err != nil {
		return nil, fmt.Errorf("could not read %s: %w", p, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("could not read %s: %w", p, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s: more than the limit of %d bytes", p, limit)
	}
	return b, nil
}

// Decision is the outcome of deciding one subject.
type Decision struct {
	// Subject and Digest are what was decided.
	Subject string       `json:"subject"`
	Digest  specs.Digest `json:"digest"`
	// Approved is true when at least Threshold distinct keys count.
	Approved bool `json:"approved"`
	// Keys are the distinct approver key ids that count, sorted.
	Keys []string `json:"keys"`
	// Threshold is the number of distinct keys needed.
	Threshold int `json:"threshold"`
	// Reasons say why approvals or signatures did not count, and, when not
	// approved, that the threshold was not met.
	Reasons []string `json:"reasons,omitempty"`
	// Relied are the approvals that contributed at least one counted key.
	Relied []*Approval `json:"-"`
}

// ThresholdFor returns the threshold of subject: by action for "#cancel"
// and "#release", else by kind. It returns an error for a malformed subject.
func (p *TrustPolicy) ThresholdFor(subject string) (int, error) {
	kind, _, action, err := ParseSubjectName(subject)
	if err != nil {
		return 0, err
	}
	th := p.doc.Spec.Thresholds
	switch {
	case action == ActionCancel:
		return *th.Cancel, nil
	case action == ActionRelease || strings.HasPrefix(action, ActionRelease+":"):
		return *th.Release, nil
	case kind == specs.KindProfile:
		return *th.CertificationProfile, nil
	default:
		return *th.CertificationRequest, nil
	}
}

// Decide says whether subject, whose current canonical digest is d, is
// approved for cluster at now. An approval counts only if it names subject
// with exactly d, is not expired at now, names cluster (or no cluster; a
// cluster-scoped approval never counts for cluster ""), and carries a valid
// signature by an approver key that is inside its window and not revoked at
// now. Each key counts once however many approvals or signatures it made.
// The decision never fails: problems become Reasons.
func (p *TrustPolicy) Decide(subject string, d specs.Digest, approvals []*Approval, cluster string, now time.Time) Decision {
	var naming []*Approval
	for _, a := range approvals {
		if _, ok := a.subjects[subject]; ok {
			naming = append(naming, a)
		}
	}
	return p.decide(subject, d, naming, cluster, now)
}

// indexApprovals maps each subject name to the approvals naming it, in
// order.
func indexApprovals(approvals []*Approval) map[string][]*Approval {
	idx := map[string][]*Approval{}
	for _, a := range approvals {
		for s := range a.subjects {
			idx[s] = append(idx[s], a)
		}
	}
	return idx
}

// decide is Decide over approvals that all name subject.
func (p *TrustPolicy) decide(subject string, d specs.Digest, approvals []*Approval, cluster string, now time.Time) Decision {
	dec := Decision{Subject: subject, Digest: d, Keys: []string{}}
	th, err := p.ThresholdFor(subject)
	if err != nil {
		dec.Reasons = []string{err.Error()}
		return dec
	}
	dec.Threshold = th
	counted := map[string]bool{}
	named := false
	for _, a := range approvals {
		ad, ok := a.subjects[subject]
		if !ok {
			continue
		}
		named = true
		where := a.Path
		if ad != d {
			dec.Reasons = append(dec.Reasons, fmt.Sprintf("%s: changed since approval (approved %s, now %s)", where, ad, d))
			continue
		}
		if !a.Expires.IsZero() && !now.Before(a.Expires) {
			dec.Reasons = append(dec.Reasons, fmt.Sprintf("%s: expired at %s", where, a.Expires.UTC().Format(time.RFC3339)))
			continue
		}
		if len(a.Clusters) > 0 && !contains(a.Clusters, cluster) {
			if cluster == "" {
				dec.Reasons = append(dec.Reasons, fmt.Sprintf("%s: limited to clusters %s and no cluster was given", where, strings.Join(a.Clusters, ",")))
			} else {
				dec.Reasons = append(dec.Reasons, fmt.Sprintf("%s: for other clusters (%s), not %s", where, strings.Join(a.Clusters, ","), cluster))
			}
			continue
		}
		v, _ := a.Verify(p) // every refusal is in v.Refused
		for _, r := range v.Refused {
			dec.Reasons = append(dec.Reasons, fmt.Sprintf("%s: %v", where, r.Err))
		}
		relied := false
		for _, id := range v.Keys {
			if r := p.KeyValidAt(id, now); r != "" {
				dec.Reasons = append(dec.Reasons, fmt.Sprintf("%s: %s", where, r))
				continue
			}
			if counted[id] {
				dec.Reasons = append(dec.Reasons, fmt.Sprintf("%s: key %s already counted once", where, short(id)))
				continue
			}
			counted[id] = true
			relied = true
		}
		if relied {
			dec.Relied = append(dec.Relied, a)
		}
	}
	for id := range counted {
		dec.Keys = append(dec.Keys, id)
	}
	sort.Strings(dec.Keys)
	dec.Approved = len(dec.Keys) >= th
	if !named {
		dec.Reasons = append(dec.Reasons, "no approval names "+subject)
	}
	if !dec.Approved {
		dec.Reasons = append(dec.Reasons, fmt.Sprintf("threshold not met: %d of %d distinct keys", len(dec.Keys), th))
	}
	return dec
}

// Verify checks a's signatures against p's approver keys and returns what
// verified. The error is nil when at least one signature verifies, else the
// first refusal (a *VerifyError: KindBadSignature, KindNotAllowed or
// KindUnknownKey); the result is never nil and lists every refusal either
// way. The outcome is computed once per policy and kept, so a caller may
// run Verify ahead of Decide (on a worker pool) to spend the signature
// checks there; it is safe for concurrent use.
func (a *Approval) Verify(p *TrustPolicy) (*VerifiedApproval, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.verifiedBy != p {
		a.verified, a.verifiedBy = a.verify(p), p
	}
	if len(a.verified.Keys) == 0 && len(a.verified.Refused) > 0 {
		return a.verified, a.verified.Refused[0]
	}
	return a.verified, nil
}

func (a *Approval) verify(p *TrustPolicy) *VerifiedApproval {
	v := &VerifiedApproval{}
	found := map[string]bool{}
	for i, c := range a.signed.checkSignatures(p.Approvers()) {
		if c.key != nil {
			if !found[c.key.id] {
				found[c.key.id] = true
				v.Keys = append(v.Keys, c.key.id)
			}
			continue
		}
		s := a.signed.Signatures[i]
		var r *VerifyError
		switch {
		case s.KeyID != "" && c.hinted:
			r = verifyErrorf(KindBadSignature, a.Path, "signature %d: bad signature (keyid %s)", i, s.KeyID)
		case s.KeyID != "" && p.keyByHint(s) != "":
			r = verifyErrorf(KindNotAllowed, a.Path, "signature %d: key %s is not an approver", i, short(p.keyByHint(s)))
		case s.KeyID != "":
			r = verifyErrorf(KindUnknownKey, a.Path, "signature %d: untrusted key (keyid %s is not in the trust policy)", i, s.KeyID)
		default:
			r = verifyErrorf(KindBadSignature, a.Path, "signature %d: bad signature or untrusted key (no approver key verifies it)", i)
		}
		v.Refused = append(v.Refused, r)
	}
	return v
}

// keyByHint returns the id of the policy key a signature's keyid names.
func (p *TrustPolicy) keyByHint(s Signature) string {
	for _, id := range p.order {
		if s.hints(p.keys[id].pub) {
			return id
		}
	}
	return ""
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// SignApproval returns the envelope of an approval of subjects, signed by
// keys. pred.SignedAt defaults to the current time.
func SignApproval(subjects []Subject, pred ApprovalPredicate, keys ...*PrivateKey) ([]byte, error) {
	if pred.SignedAt == "" {
		pred.SignedAt = time.Now().UTC().Format(time.RFC3339)
	}
	st, err := NewApprovalStatement(subjects, pred)
	if err != nil {
		return nil, err
	}
	return SignStatement(st, keys...)
}

// ApprovalFileName returns the deterministic file name of an approval
// envelope under ApprovalsDir: a slug of its first subject (or the subject
// count), the first 12 hex of the first signer's key id and the first 16 hex
// of the sha256 of the payload, e.g.
// "certificationprofile-h100-3f2a…-9b1c….json". Names differ whenever the
// statement (which includes signedAt) or the signer does.
func ApprovalFileName(st *Statement, signer *PublicKey) (string, error) {
	if st == nil || len(st.Subject) == 0 {
		return "", errors.New("approval file name: no subject")
	}
	payload, err := json.Marshal(st)
	if err != nil {
		return "", fmt.Errorf("approval file name: %w", err)
	}
	slug := strings.NewReplacer("/", "-", "#", "-").Replace(strings.ToLower(st.Subject[0].Name))
	if len(st.Subject) > 1 {
		slug = fmt.Sprintf("%s-and-%d-more", slug, len(st.Subject)-1)
	}
	return fmt.Sprintf("%s-%s-%s.json", slug, signer.KeyID()[:12], specs.DigestOf(payload).Hex()[:16]), nil
}
