package signing

import (
	"sort"
	"strings"
	"time"
)

// Role is what a key of the trust policy is allowed to sign.
type Role int

const (
	// RoleApprover: approvals of spec objects and actions.
	RoleApprover Role = iota + 1
	// RoleEvidenceSigner: evidence documents and evidence commits, each
	// judged at the time it was committed.
	RoleEvidenceSigner
	// RoleCommitSigner: spec commits (the optional SSH gate).
	RoleCommitSigner
	// RoleAuditor: audit checkpoints, judged at the time of the audit
	// that starts from them.
	RoleAuditor
)

// roleText is how messages name a role and the time its keys are judged at.
var roleText = map[Role]struct{ name, verb, judged string }{
	RoleApprover:       {"an approver of the trust policy", "approve", ""},
	RoleEvidenceSigner: {"an evidence signer of the trust policy", "sign evidence", "committed"},
	RoleCommitSigner:   {"a commit signer of the trust policy", "sign spec commits", ""},
	RoleAuditor:        {"an auditor of the trust policy", "sign audit checkpoints", "audited"},
}

// Signers are the keys whose signature counts on one kind of document, and
// the policy that says when each of them counts. Build them with
// TrustPolicy.Signers or KeySigners.
type Signers struct {
	name   string       // the keys in messages: "an evidence signer of the trust policy"
	verb   string       // what they may do: "sign evidence"
	judged string       // what the time judged at is: "committed"; "" to leave it out
	keys   []*PublicKey // may sign
	others []*PublicKey // keys of the policy that must not sign this (separation of duties)
	policy *TrustPolicy // nil: keys count at any time
}

// Signers returns the keys of p allowed role. A key counts only inside its
// window and before its revocation at the time given to the verifier.
func (p *TrustPolicy) Signers(role Role) Signers {
	t := roleText[role]
	s := Signers{name: t.name, verb: t.verb, judged: t.judged, policy: p}
	switch role {
	case RoleApprover:
		s.keys, s.others = p.Approvers(), p.EvidenceSigners()
	case RoleEvidenceSigner:
		s.keys, s.others = p.EvidenceSigners(), p.Approvers()
	case RoleCommitSigner:
		s.keys, s.others = p.CommitSigners(), p.Approvers()
	case RoleAuditor:
		s.keys, s.others = p.Auditors(), append(p.EvidenceSigners(), p.Approvers()...)
	}
	return s
}

// KeySigners returns keys as signers that count at any time; name is how
// messages call them ("this reconciler's key").
func KeySigners(name string, keys ...*PublicKey) Signers {
	return Signers{name: name, keys: keys}
}

// validAt returns "" when key id counts at t, else why not.
func (s Signers) validAt(id string, t time.Time) string {
	if s.policy == nil {
		return ""
	}
	r := s.policy.KeyValidAt(id, t)
	if r != "" && s.judged != "" {
		r += " (" + s.judged + " " + t.UTC().Format(time.RFC3339) + ")"
	}
	return r
}

// Verified is what VerifyDSSE verified: the statement and the sorted ids of
// the allowed keys, valid at the time given, that signed it.
type Verified struct {
	Statement *Statement
	Keys      []string
}

// VerifyDSSE parses envelope and checks that at least one of its
// signatures was made by one of s's keys, valid at `at`. A document that
// cannot be parsed is a plain error; one that is not signed as s requires
// is a *VerifyError: KindKeyNotValid when only keys outside their validity
// signed it, KindBadSignature when a signature names an allowed key (or no
// key) and none verifies, KindNotAllowed when a key the policy keeps for
// another role signed it, KindUnknownKey otherwise.
func VerifyDSSE(envelope []byte, s Signers, at time.Time) (*Verified, error) {
	env, err := parseEnvelope(envelope, false)
	if err != nil {
		return nil, err
	}
	st, err := env.Statement()
	if err != nil {
		return nil, err
	}
	what := st.PredicateType + " envelope"
	checks := env.checkSignatures(s.keys)
	var valid, invalid []string
	for _, id := range signerIDs(checks) {
		if r := s.validAt(id, at); r != "" {
			invalid = append(invalid, r)
			continue
		}
		valid = append(valid, id)
	}
	if len(valid) > 0 {
		return &Verified{Statement: st, Keys: valid}, nil
	}
	if len(invalid) > 0 {
		return nil, verifyErrorf(KindKeyNotValid, what, "%s", strings.Join(invalid, "; "))
	}
	hints := make([]string, 0, len(checks))
	for i, c := range checks {
		if c.hinted {
			return nil, verifyErrorf(KindBadSignature, what, "no signature verifies with %s (forged or corrupted)", s.name)
		}
		hints = append(hints, env.Signatures[i].KeyID)
	}
	if ids := env.VerifiedKeyIDs(s.others...); len(ids) > 0 {
		return nil, verifyErrorf(KindNotAllowed, what, "signed by key %s, which is not allowed to %s", keyAbbrev(ids[0]), s.verb)
	}
	return nil, verifyErrorf(KindUnknownKey, what, "signed by key %s, which is not %s", strings.Join(hints, ", "), s.name)
}

// sigCheck is what one signature of an envelope is, judged against a set
// of keys.
type sigCheck struct {
	key    *PublicKey // the key of the set that made it; nil when none did
	hinted bool       // its keyid is empty or names a key of the set
}

// checkSignatures judges each signature of e against keys, in order. A
// signature is tried only against the keys its keyid hints at (see hints);
// an envelope whose payload does not decode has no valid signature.
func (e *Envelope) checkSignatures(keys []*PublicKey) []sigCheck {
	out := make([]sigCheck, len(e.Signatures))
	payload, err := e.payload()
	if err != nil {
		return out
	}
	pae := PAE(e.PayloadType, payload)
	for i, s := range e.Signatures {
		sig, err := decodeSig(s.Sig)
		for _, k := range keys {
			if k == nil || !s.hints(k) {
				continue
			}
			out[i].hinted = true
			if err == nil && k.verify(pae, sig) {
				out[i].key = k
				break
			}
		}
	}
	return out
}

// signerIDs returns the sorted, distinct ids of the keys that made checks.
func signerIDs(checks []sigCheck) []string {
	seen := map[string]bool{}
	out := []string{}
	for _, c := range checks {
		if c.key != nil && !seen[c.key.id] {
			seen[c.key.id] = true
			out = append(out, c.key.id)
		}
	}
	sort.Strings(out)
	return out
}

// keyAbbrev abbreviates a key id the way audit findings name keys.
func keyAbbrev(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
