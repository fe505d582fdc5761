// Package signing holds signet's keys, DSSE envelopes of in-toto
// statements, approvals of spec objects and the operator's trust policy.
//
// # Keys
//
// Keys are ECDSA P-256 (SHA-256, ASN.1 DER signatures; the default) or
// Ed25519, on sigstore's signature package. Private keys are PKCS#8 PEM,
// or sigstore's "ENCRYPTED SIGSTORE PRIVATE KEY" (scrypt + secretbox, what
// cosign writes) when a passphrase is given. Public keys are PKIX PEM. A
// key id is the lowercase hex sha256 of the PKIX DER public key. Inside a
// DSSE signature the keyid field carries the OpenSSH SHA256 fingerprint
// ("SHA256:…", go-securesystemslib's dsse.SHA256KeyID), the only non-empty
// value cosign accepts; it is a hint and never trusted. RSA and other
// curves are refused.
//
// # Envelopes
//
// Every signed document is one DSSE envelope (payloadType
// "application/vnd.in-toto+json") of an in-toto Statement v1 with only the
// standard fields. ParseEnvelope is strict: at most MaxEnvelopeSize (4 MiB)
// bytes, no unknown or duplicate fields, padded standard base64, 1 to
// MaxSignatures signatures. Signatures are over the DSSE PAE.
//
// # Approvals
//
// An approval (predicate type https://signet.dev/approval/v1) is written by
// `signet sign` under .signet/approvals/ of the spec path. Its subjects are
// "CertificationProfile/<name>", "CertificationRequest/<name>" and
// "CertificationRequest/<name>#cancel" / "#release", each with the sha256 of
// the object's canonical JSON (for a request, its execution fields only, so
// an action approval carries the request's own digest). The predicate is
//
//	{"clusters": ["a", "b"], "expires": "2026-12-31T00:00:00Z", "signedAt": "…"}
//
// clusters (optional; empty: every cluster) and expires (optional) scope the
// approval; signedAt is informational.
//
// # Trust policy
//
// The trust policy is given by the operator and never read from the spec
// repository:
//
//	apiVersion: signet.dev/v1alpha1
//	kind: TrustPolicy
//	metadata:
//	  name: production
//	spec:
//	  keys:
//	  - id: <64 hex: sha256 of the DER public key; must match publicKey>
//	    owner: alice@example.com          # optional, informational
//	    publicKey: |                      # PKIX PEM, or one authorized_keys line
//	      -----BEGIN PUBLIC KEY-----
//	      …
//	    notBefore: 2026-01-01T00:00:00Z   # optional: counts from
//	    notAfter: 2027-01-01T00:00:00Z    # optional: counts until (excluded)
//	    revokedAt: 2026-06-01T00:00:00Z   # optional: stops counting at
//	    revoked: false                    # optional: true = never counts
//	  approvers: [<id>, …]                # may approve objects and actions
//	  thresholds:                         # distinct approver keys; omitted = 1
//	    CertificationProfile: 2
//	    CertificationRequest: 1
//	    cancel: 1
//	    release: 1
//	  evidenceSigners: [<id>, …]          # may sign evidence documents
//	  commitSigners: [<id>, …]            # optional SSH gate on spec commits
//	  auditors: [<id>, …]                 # optional: may sign audit checkpoints
//
// Parsing is strict: unknown fields, duplicate keys, YAML anchors, aliases
// and merge keys, a second document, an id that does not match its key, a
// reference to an unknown id, a threshold below 1 or above the number of
// approvers, and an evidence signer that is also an approver or an auditor
// (separation of duties: the reconciler's key never approves what it runs
// nor vouches for its own evidence) are refused. Digest is the sha256 of the policy's RFC 8785 JSON,
// so whatever decides that a reconcile is a no-op can include it.
//
// # Decisions
//
// Decide evaluates at the caller's time: a key counts only inside its window
// and before its revocation at that time, an approval only before its
// expiry and for the caller's cluster, and each key once. A cluster-scoped
// approval never counts when no cluster is given. Decide never executes
// anything and never fails: everything that did not count becomes a reason.
//
// # Verification
//
// One verifier per role: VerifyDSSE (documents signed by evidence signers,
// or by a key the caller holds), VerifyCommit (SSH-signed commits,
// namespace "git") and Approval.Verify (approvers; Decide uses its result).
// A signature that does not count is a *VerifyError: it matches
// ErrVerification, unwraps to its cause, and its Kind (unsigned, malformed,
// bad signature, unknown key, key not allowed, key not valid) is what
// callers decide on. Input that cannot be parsed is a plain error, never a
// verification failure.
//
// This package does not render specs, fetch anything, or read the trust
// policy from a spec repository.
package signing
