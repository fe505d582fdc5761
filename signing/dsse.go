package signing

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/go-json-experiment/json/jsontext"

	"signet.dev/signet/specs"
)

// PayloadType is the DSSE payload type of every signet envelope.
const PayloadType = "application/vnd.in-toto+json"

// StatementType is the in-toto Statement v1 type.
const StatementType = "https://in-toto.io/Statement/v1"

// Bounds on untrusted envelopes. An approval of a thousand objects is about
// 250 KiB, so MaxEnvelopeSize leaves ample room while keeping a hostile file
// from exhausting memory.
const (
	MaxEnvelopeSize  = 4 << 20
	MaxSignatures    = 64
	MaxSubjects      = 10000
	MaxSignatureSize = 1024
)

// Subject is an in-toto resource descriptor: a name and its digests. signet
// writes and reads only the "sha256" digest (lowercase hex).
type Subject struct {
	Name   string            `json:"name"`
	Digest map[string]string `json:"digest"`
}

// Statement is an in-toto Statement v1, limited to its standard fields so
// that cosign's strict parser accepts it.
type Statement struct {
	Type          string          `json:"_type"`
	Subject       []Subject       `json:"subject"`
	PredicateType string          `json:"predicateType"`
	Predicate     json.RawMessage `json:"predicate"`
}

// Envelope is a DSSE envelope. Payload is standard base64 with padding.
type Envelope struct {
	PayloadType string      `json:"payloadType"`
	Payload     string      `json:"payload"`
	Signatures  []Signature `json:"signatures"`

	// decoded is Payload decoded by ParseEnvelope, used while Payload is
	// still decodedFrom (a caller may change the exported fields).
	decoded     []byte
	decodedFrom string
}

// Signature is one DSSE signature; Sig is standard base64. KeyID is a hint
// only (see PublicKey.DSSEKeyID); it is never trusted.
type Signature struct {
	KeyID string `json:"keyid"`
	Sig   string `json:"sig"`
}

// SubjectFor returns the subject naming name with digest d.
func SubjectFor(name string, d specs.Digest) Subject {
	return Subject{Name: name, Digest: map[string]string{"sha256": d.Hex()}}
}

// NewStatement returns an in-toto Statement v1 of predicateType over
// subjects, with predicate marshalled as JSON. It refuses an empty subject
// list, a subject without a valid sha256 digest and a duplicate subject name.
func NewStatement(predicateType string, subjects []Subject, predicate any) (*Statement, error) {
	if predicateType == "" {
		return nil, errors.New("statement: predicateType is empty")
	}
	if len(subjects) == 0 {
		return nil, errors.New("statement: no subject")
	}
	if err := checkSubjects(subjects); err != nil {
		return nil, err
	}
	p, err := json.Marshal(predicate)
	if err != nil {
		return nil, fmt.Errorf("statement: predicate: %w", err)
	}
	if bytes.Equal(p, []byte("null")) {
		p = []byte("{}")
	}
	return &Statement{Type: StatementType, Subject: subjects, PredicateType: predicateType, Predicate: p}, nil
}

func checkSubjects(subjects []Subject) error {
	if len(subjects) > MaxSubjects {
		return fmt.Errorf("statement: %d subjects is more than %d", len(subjects), MaxSubjects)
	}
	seen := make(map[string]bool, len(subjects))
	for i, s := range subjects {
		if s.Name == "" {
			return fmt.Errorf("statement: subject[%d].name is empty", i)
		}
		if seen[s.Name] {
			return fmt.Errorf("statement: subject[%d].name: %q appears twice", i, s.Name)
		}
		seen[s.Name] = true
		if len(s.Digest) != 1 {
			return fmt.Errorf("statement: subject[%d] (%s).digest: want exactly one entry, \"sha256\", got %d", i, s.Name, len(s.Digest))
		}
		h, ok := s.Digest["sha256"]
		if !ok {
			return fmt.Errorf("statement: subject[%d] (%s).digest: no \"sha256\" entry", i, s.Name)
		}
		if _, err := specs.ParseDigest("sha256:" + h); err != nil {
			return fmt.Errorf("statement: subject[%d] (%s).digest.sha256: %q is not 64 lowercase hex", i, s.Name, h)
		}
	}
	return nil
}

// SubjectDigest returns the sha256 digest of subject s.
func (s Subject) SubjectDigest() specs.Digest { return specs.Digest("sha256:" + s.Digest["sha256"]) }

// PAE returns the DSSE pre-authentication encoding of payloadType and payload:
// "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body.
func PAE(payloadType string, payload []byte) []byte {
	var b bytes.Buffer
	b.Grow(len(payloadType) + len(payload) + 32)
	b.WriteString("DSSEv1 ")
	b.WriteString(strconv.Itoa(len(payloadType)))
	b.WriteByte(' ')
	b.WriteString(payloadType)
	b.WriteByte(' ')
	b.WriteString(strconv.Itoa(len(payload)))
	b.WriteByte(' ')
	b.Write(payload)
	return b.Bytes()
}

// SignStatement returns the JSON of a DSSE envelope of st signed by every
// key in keys, one signature each. It refuses no key and the same key twice.
func SignStatement(st *Statement, keys ...*PrivateKey) ([]byte, error) {
	if st == nil {
		return nil, errors.New("sign: no statement")
	}
	if len(keys) == 0 {
		return nil, errors.New("sign: no key")
	}
	if st.Type != StatementType {
		return nil, fmt.Errorf("sign: statement _type %q is not %q", st.Type, StatementType)
	}
	if err := checkSubjects(st.Subject); err != nil {
		return nil, fmt.Errorf("sign: %w", err)
	}
	payload, err := json.Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("sign: encoding statement: %w", err)
	}
	return signPayload(PayloadType, payload, keys...)
}

func signPayload(payloadType string, payload []byte, keys ...*PrivateKey) ([]byte, error) {
	pae := PAE(payloadType, payload)
	env := Envelope{PayloadType: payloadType, Payload: base64.StdEncoding.EncodeToString(payload)}
	seen := map[string]bool{}
	for _, k := range keys {
		if seen[k.KeyID()] {
			return nil, fmt.Errorf("sign: key %s given twice", k.KeyID())
		}
		seen[k.KeyID()] = true
		sig, err := k.sign(pae)
		if err != nil {
			return nil, fmt.Errorf("sign: key %s: %w", k.KeyID(), err)
		}
		env.Signatures = append(env.Signatures, Signature{KeyID: k.pub.DSSEKeyID(), Sig: base64.StdEncoding.EncodeToString(sig)})
	}
	out, err := json.Marshal(env)
	if err != nil {
		return nil, fmt.Errorf("sign: encoding envelope: %w", err)
	}
	return append(out, '\n'), nil
}

// ParseEnvelope parses a DSSE envelope strictly: at most MaxEnvelopeSize
// bytes, one JSON object with no unknown or duplicate fields and nothing
// after it, payload and signatures in standard padded base64, 1 to
// MaxSignatures signatures. It does not verify any signature.
func ParseEnvelope(b []byte) (*Envelope, error) {
	return parseEnvelope(b, true)
}

// parseEnvelope is ParseEnvelope; with keepPayload false the envelope's
// Payload is left empty (only its decoded bytes are kept), for a reader
// that never hands the envelope out (VerifyDSSE: an audit decodes a
// million payloads, and need not copy each as a string first).
func parseEnvelope(b []byte, keepPayload bool) (*Envelope, error) {
	if len(b) > MaxEnvelopeSize {
		return nil, fmt.Errorf("envelope: %d bytes is more than the limit of %d", len(b), MaxEnvelopeSize)
	}
	var wire struct {
		PayloadType string        `json:"payloadType"`
		Payload     payloadString `json:"payload"`
		Signatures  []Signature   `json:"signatures"`
	}
	wire.Payload.keep = keepPayload
	if k := jsontext.Value(b).Kind(); strings.ContainsRune(`nft"0[`, rune(k)) {
		return nil, fmt.Errorf("envelope: a JSON %s, not an object", kindName(k))
	}
	if err := StrictUnmarshal(b, &wire); err != nil {
		return nil, fmt.Errorf("envelope: %w", err)
	}
	env := Envelope{PayloadType: wire.PayloadType, Signatures: wire.Signatures}
	if env.PayloadType == "" {
		return nil, errors.New("envelope: payloadType is empty")
	}
	if wire.Payload.n == 0 {
		return nil, errors.New("envelope: payload is empty")
	}
	if wire.Payload.err != nil {
		return nil, fmt.Errorf("envelope: payload is not standard base64: %w", wire.Payload.err)
	}
	env.decoded = wire.Payload.decoded
	if keepPayload {
		env.Payload = string(wire.Payload.text)
		env.decodedFrom = env.Payload
	}
	if len(env.Signatures) == 0 {
		return nil, errors.New("envelope: no signature")
	}
	if len(env.Signatures) > MaxSignatures {
		return nil, fmt.Errorf("envelope: %d signatures is more than %d", len(env.Signatures), MaxSignatures)
	}
	for i, s := range env.Signatures {
		raw, err := base64.StdEncoding.Strict().DecodeString(s.Sig)
		if err != nil {
			return nil, fmt.Errorf("envelope: signatures[%d].sig is not standard base64: %w", i, err)
		}
		if len(raw) == 0 || len(raw) > MaxSignatureSize {
			return nil, fmt.Errorf("envelope: signatures[%d].sig: %d bytes is not a signature", i, len(raw))
		}
	}
	return &env, nil
}

// payloadString is an envelope's payload as read: decoded from the text
// of its JSON string as it stands in the envelope's bytes (a base64
// payload needs no escape; one with an escape is unquoted first), without
// a Go string of it. With keep, the text is kept too.
type payloadString struct {
	keep    bool
	text    []byte // when keep
	n       int    // the text's length
	decoded []byte
	err     error // the text is not standard base64
}

func (p *payloadString) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	v, err := dec.ReadValue()
	if err != nil {
		return err
	}
	if v.Kind() != '"' {
		return fmt.Errorf("a JSON %s, not a string", kindName(v.Kind()))
	}
	// v is the decoder's buffer, valid until its next read.
	text := []byte(v[1 : len(v)-1])
	if bytes.IndexByte(text, '\\') >= 0 {
		if text, err = jsontext.AppendUnquote(nil, v); err != nil {
			return err
		}
	}
	p.n = len(text)
	if p.keep {
		p.text = bytes.Clone(text)
	}
	p.decoded, p.err = decodeBase64(text)
	return nil
}

// decodeBase64 decodes standard padded base64 strictly, refusing a
// carriage return or line feed, which Go's decoder skips even in strict
// mode: a payload or signature has one encoding, and an envelope's bytes
// cannot be changed (a JSON "\n" escape in its payload) while what they
// verify stays the same.
func decodeBase64[T string | []byte](text T) ([]byte, error) {
	for i := range len(text) {
		if text[i] == '\r' || text[i] == '\n' {
			return nil, fmt.Errorf("a line break at byte %d", i)
		}
	}
	decoded := make([]byte, base64.StdEncoding.DecodedLen(len(text)))
	n, err := base64.StdEncoding.Strict().Decode(decoded, []byte(text))
	return decoded[:n], err
}

// PayloadBytes returns the decoded payload, a copy the caller may keep.
func (e *Envelope) PayloadBytes() ([]byte, error) {
	p, err := e.payload()
	if err != nil {
		return nil, err
	}
	return bytes.Clone(p), nil
}

// payload returns the decoded payload, decoding it once per Payload
// value. The result is shared: callers must not change it.
func (e *Envelope) payload() ([]byte, error) {
	if e.decoded != nil && e.decodedFrom == e.Payload {
		return e.decoded, nil
	}
	p, err := decodeBase64(e.Payload)
	if err != nil {
		return nil, fmt.Errorf("envelope: payload is not standard base64: %w", err)
	}
	return p, nil
}

// Statement decodes the payload as an in-toto Statement v1: payloadType must
// be PayloadType, _type StatementType, no unknown or duplicate field, at
// least one subject, each with exactly a valid sha256 digest, names unique,
// a non-empty predicateType and an object predicate. It does not verify
// signatures.
func (e *Envelope) Statement() (*Statement, error) {
	if e.PayloadType != PayloadType {
		return nil, fmt.Errorf("envelope: payloadType %q is not %q", e.PayloadType, PayloadType)
	}
	p, err := e.payload()
	if err != nil {
		return nil, err
	}
	return parseStatement(p)
}

func parseStatement(p []byte) (*Statement, error) {
	var st Statement
	if err := StrictUnmarshal(p, &st); err != nil {
		return nil, fmt.Errorf("statement: %w", err)
	}
	if st.Type != StatementType {
		return nil, fmt.Errorf("statement: _type %q is not %q", st.Type, StatementType)
	}
	if st.PredicateType == "" {
		return nil, errors.New("statement: predicateType is empty")
	}
	if len(st.Subject) == 0 {
		return nil, errors.New("statement: no subject")
	}
	if err := checkSubjects(st.Subject); err != nil {
		return nil, err
	}
	if len(st.Predicate) == 0 || st.Predicate[0] != '{' {
		return nil, errors.New("statement: predicate is not a JSON object")
	}
	return &st, nil
}

// VerifiedKeyIDs returns the sorted, distinct ids of the keys among keys that
// made at least one valid signature over the envelope's PAE. A signature
// whose keyid is set and names neither the key's id nor its DSSEKeyID is not
// tried against that key. The result is empty when nothing verifies.
func (e *Envelope) VerifiedKeyIDs(keys ...*PublicKey) []string {
	return signerIDs(e.checkSignatures(keys))
}

// hints reports whether s may have been made by k, judging by its keyid.
func (s Signature) hints(k *PublicKey) bool {
	return s.KeyID == "" || s.KeyID == k.dsseID || s.KeyID == k.id
}

func decodeSig(s string) ([]byte, error) { return decodeBase64(s) }

func encodeSig(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
