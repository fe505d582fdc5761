package signing

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPAE(t *testing.T) {
	// The example from the DSSE specification.
	assert.Equal(t, "DSSEv1 29 http://example.com/HelloWorld 11 hello world",
		string(PAE("http://example.com/HelloWorld", []byte("hello world"))))
}

func TestSignAndVerify(t *testing.T) {
	a := testKey(t, "a", AlgorithmECDSAP256)
	b := testKey(t, "b", AlgorithmEd25519)
	c := testKey(t, "c", AlgorithmECDSAP256)
	st, err := NewStatement("https://example.com/p/v1", []Subject{SubjectFor("x", digestOf("x"))}, map[string]string{"k": "v"})
	require.NoError(t, err)
	raw, err := SignStatement(st, a, b)
	require.NoError(t, err)
	env, err := ParseEnvelope(raw)
	require.NoError(t, err)
	got, err := env.Statement()
	require.NoError(t, err)
	assert.Equal(t, st.Subject, got.Subject)
	assert.JSONEq(t, `{"k":"v"}`, string(got.Predicate))

	want := []string{a.KeyID(), b.KeyID()}
	if want[0] > want[1] {
		want[0], want[1] = want[1], want[0]
	}
	assert.Equal(t, want, env.VerifiedKeyIDs(a.Public(), b.Public(), c.Public()))
	assert.Empty(t, env.VerifiedKeyIDs(c.Public()))

	_, err = SignStatement(st, a, a)
	assert.ErrorContains(t, err, "given twice")
}

// The payload ParseEnvelope decoded is used only while Payload is what it
// decoded: an envelope changed after parsing is verified and read as it
// now is, and a caller changing PayloadBytes' result changes nothing.
func TestEnvelopeChangedAfterParse(t *testing.T) {
	a := testKey(t, "a", AlgorithmECDSAP256)
	st, err := NewStatement("https://example.com/p/v1", []Subject{SubjectFor("x", digestOf("x"))}, map[string]string{"k": "v"})
	require.NoError(t, err)
	raw, err := SignStatement(st, a)
	require.NoError(t, err)
	env, err := ParseEnvelope(raw)
	require.NoError(t, err)
	p, err := env.PayloadBytes()
	require.NoError(t, err)
	p[len(p)-4] = 'X' // a caller's copy: {"k":"X"}
	require.Len(t, env.VerifiedKeyIDs(a.Public()), 1, "changing PayloadBytes' result must not change the envelope")

	other := strings.Replace(string(p), `"X"`, `"w"`, 1)
	env.Payload = base64.StdEncoding.EncodeToString([]byte(other))
	require.Empty(t, env.VerifiedKeyIDs(a.Public()), "a payload changed after parsing must not verify with the old one's signature")
	got, err := env.Statement()
	require.NoError(t, err)
	require.JSONEq(t, `{"k":"w"}`, string(got.Predicate))
}

// An envelope whose keyid is empty (as sigstore's WrapSigner writes) still
// verifies; a keyid naming another key is not tried against this one.
func TestVerifiedKeyIDsHints(t *testing.T) {
	a := testKey(t, "a", AlgorithmECDSAP256)
	st, err := NewStatement("https://example.com/p/v1", []Subject{SubjectFor("x", digestOf("x"))}, nil)
	require.NoError(t, err)
	raw, err := SignStatement(st, a)
	require.NoError(t, err)
	for _, tc := range []struct {
		keyid string
		ok    bool
	}{
		{"", true},
		{a.Public().DSSEKeyID(), true},
		{a.KeyID(), true},
		{"SHA256:someoneelse", false},
	} {
		env, err := ParseEnvelope(raw)
		require.NoError(t, err)
		env.Signatures[0].KeyID = tc.keyid
		assert.Equal(t, tc.ok, len(env.VerifiedKeyIDs(a.Public())) == 1, "keyid %q", tc.keyid)
	}
}

func TestParseEnvelopeRefuses(t *testing.T) {
	a := testKey(t, "a", AlgorithmECDSAP256)
	st, err := NewStatement("https://example.com/p/v1", []Subject{SubjectFor("x", digestOf("x"))}, nil)
	require.NoError(t, err)
	good, err := SignStatement(st, a)
	require.NoError(t, err)
	var env map[string]any
	require.NoError(t, json.Unmarshal(good, &env))
	mutate := func(f func(m map[string]any)) []byte {
		var m map[string]any
		require.NoError(t, json.Unmarshal(good, &m))
		f(m)
		b, err := json.Marshal(m)
		require.NoError(t, err)
		return b
	}
	for _, tc := range []struct {
		name string
		in   []byte
		want string
	}{
		{"truncated", good[:len(good)/2], "unexpected EOF"},
		{"garbled", []byte(strings.Replace(string(good), `"payload":"`, `"payload":"!!`, 1)), "not standard base64"},
		{"empty", nil, "EOF"},
		{"not an object", []byte(`[1,2]`), "envelope: a JSON array, not an object"},
		{"unknown field", mutate(func(m map[string]any) { m["extra"] = 1 }), `unknown field "extra"`},
		{"duplicate field", []byte(strings.Replace(string(good), `{"payloadType"`, `{"payloadType":"x","payloadType"`, 1)), `duplicate field "payloadType"`},
		{"trailing data", append(append([]byte{}, good...), []byte(`{}`)...), "data after"},
		{"no signature", mutate(func(m map[string]any) { m["signatures"] = []any{} }), "no signature"},
		{"unpadded base64", mutate(func(m map[string]any) { m["payload"] = strings.TrimRight(m["payload"].(string), "=") + "A" }), "base64"},
		{"sig not base64", mutate(func(m map[string]any) {
			m["signatures"] = []any{map[string]any{"keyid": "", "sig": "***"}}
		}), "signatures[0].sig"},
		{"too large", append([]byte(`{"payloadType":"`), []byte(strings.Repeat("a", MaxEnvelopeSize))...), "more than the limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseEnvelope(tc.in)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestStatementRefuses(t *testing.T) {
	a := testKey(t, "a", AlgorithmECDSAP256)
	good := `{"_type":"https://in-toto.io/Statement/v1","subject":[{"name":"x","digest":{"sha256":"` + digestOf("x").Hex() + `"}}],"predicateType":"p","predicate":{}}`
	for _, tc := range []struct {
		name        string
		payloadType string
		payload     string
		want        string
	}{
		{"ok", PayloadType, good, ""},
		{"other payload type", "application/json", good, `payloadType "application/json" is not`},
		{"wrong _type", PayloadType, strings.Replace(good, "Statement/v1", "Statement/v0.1", 1), `_type "https://in-toto.io/Statement/v0.1"`},
		{"unknown field", PayloadType, strings.Replace(good, `"predicate":{}`, `"predicate":{},"x":1`, 1), `unknown field "x"`},
		{"duplicate subject", PayloadType, strings.Replace(good, `}}]`, `}},{"name":"x","digest":{"sha256":"`+digestOf("x").Hex()+`"}}]`, 1), "appears twice"},
		{"bad digest", PayloadType, strings.Replace(good, digestOf("x").Hex(), "ABC", 1), "is not 64 lowercase hex"},
		{"other digest algorithm", PayloadType, strings.Replace(good, `"sha256"`, `"sha512"`, 1), `no "sha256" entry`},
		{"no subject", PayloadType, strings.Replace(good, `"subject":[{"name":"x","digest":{"sha256":"`+digestOf("x").Hex()+`"}}]`, `"subject":[]`, 1), "no subject"},
		{"predicate not object", PayloadType, strings.Replace(good, `"predicate":{}`, `"predicate":[]`, 1), "not a JSON object"},
		{"not JSON", PayloadType, "hello", "invalid character"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw, err := signPayload(tc.payloadType, []byte(tc.payload), a)
			require.NoError(t, err)
			env, err := ParseEnvelope(raw)
			require.NoError(t, err)
			_, err = env.Statement()
			if tc.want == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err, "want an error containing %q", tc.want)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// A signature made over another payload type does not verify once the
// envelope claims the in-toto payload type (the PAE binds the type).
func TestSignatureOverOtherPayloadType(t *testing.T) {
	a := testKey(t, "a", AlgorithmECDSAP256)
	st, err := NewStatement("p", []Subject{SubjectFor("x", digestOf("x"))}, nil)
	require.NoError(t, err)
	payload, err := json.Marshal(st)
	require.NoError(t, err)
	raw, err := signPayload("application/json", payload, a)
	require.NoError(t, err)
	env, err := ParseEnvelope(raw)
	require.NoError(t, err)
	env.PayloadType = PayloadType
	assert.Empty(t, env.VerifiedKeyIDs(a.Public()))
	assert.Equal(t, base64.StdEncoding.EncodeToString(payload), env.Payload)
}
