package signing

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// dupKeysReference finds a member name repeated in one object by walking
// encoding/json's token stream (which unescapes names): slow but plainly
// right. FuzzStrictUnmarshal holds StrictUnmarshal to it.
func dupKeysReference(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	type frame struct {
		obj    bool
		keys   map[string]bool
		expect bool
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{', '[':
				if top != nil && top.obj {
					top.expect = true
				}
				stack = append(stack, &frame{obj: t == '{', keys: map[string]bool{}, expect: true})
			case '}', ']':
				stack = stack[:len(stack)-1]
			}
		case string:
			if top != nil && top.obj && top.expect {
				if top.keys[t] {
					return fmt.Errorf("duplicate field %q", t)
				}
				top.keys[t] = true
				top.expect = false
				continue
			}
			if top != nil && top.obj {
				top.expect = true
			}
		default:
			if top != nil && top.obj {
				top.expect = true
			}
		}
	}
}

func TestStrictUnmarshal(t *testing.T) {
	many := func(dup bool) string {
		var b strings.Builder
		b.WriteString("{")
		for i := range 40 {
			fmt.Fprintf(&b, `"k%d":%d,`, i, i)
		}
		if dup {
			b.WriteString(`"k7":0,`)
		}
		b.WriteString(`"end":1}`)
		return b.String()
	}
	for _, tc := range []struct {
		name, in string
		refused  string // what the error says, "" when accepted
	}{
		{"flat", `{"a":1,"b":2}`, ""},
		{"duplicate", `{"a":1,"b":2,"a":3}`, `duplicate field "a"`},
		{"escaped duplicate", `{"a":1,"\u0061":2}`, `duplicate field "a"`},
		{"escaped quote in key", `{"a\"b":1,"a\"b":2}`, `duplicate field "a\"b"`},
		{"value equal to a key", `{"a":"a","b":"a"}`, ""},
		{"string value with quotes and braces", `{"a":"x\"}{\\","a":1}`, `duplicate field "a"`},
		{"same key in sibling objects", `{"a":{"x":1},"b":{"x":2}}`, ""},
		{"same key in nested and outer", `{"x":{"x":{"x":1}}}`, ""},
		{"duplicate after nested object", `{"a":{"b":1},"c":[1,{"a":2}],"a":0}`, `duplicate field "a"`},
		{"duplicate inside array element", `[{"a":1},{"a":1,"a":2}]`, `duplicate field "a" in /1`},
		{"invalid UTF-8 keys the old decoder made equal", "{\"\x9a\":0,\"\x9b\":1}", "invalid UTF-8"},
		{"invalid UTF-8 in a value", "{\"a\":\"\xff\"}", "invalid UTF-8"},
		{"lone surrogate escape", `{"a":"\ud800"}`, "invalid surrogate"},
		{"valid UTF-8 keys differ", "{\"é\":0,\"è\":1}", ""},
		{"many keys", many(false), ""},
		{"many keys duplicate", many(true), `duplicate field "k7"`},
		{"trailing value", `{"a":1}{}`, "data after the JSON value"},
		{"trailing white space", "{\"a\":1}\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var v any
			err := StrictUnmarshal([]byte(tc.in), &v)
			if tc.refused == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.refused, "must be refused")
		})
	}
}

// TestStrictUnmarshalExactNames: member names match fields exactly. The
// same envelope with "Payload" after "payload" reads as one payload to a
// case-sensitive reader and another to encoding/json (which folds case and
// keeps the last), so it is refused, not read either way.
func TestStrictUnmarshalExactNames(t *testing.T) {
	var env Envelope
	in := `{"payloadType":"a","payload":"QUFB","Payload":"QkJC","signatures":[{"keyid":"","sig":"QUFB"}]}`
	require.ErrorContains(t, StrictUnmarshal([]byte(in), &env), `unknown field "Payload"`, "a case-folded duplicate must be refused")
	require.ErrorContains(t, StrictUnmarshal([]byte(`{"PAYLOADTYPE":"a"}`), &env), `unknown field "PAYLOADTYPE"`)
	require.ErrorContains(t, StrictUnmarshal([]byte(`{"payloadType":"a","signatures":[{"KeyID":"k"}]}`), &env), `unknown field "KeyID" in /signatures/0`)
	_, err := ParseEnvelope([]byte(in))
	require.ErrorContains(t, err, `unknown field "Payload"`)
}

// escapedSurrogate finds a \uD800–\uDFFF escape, which encoding/json reads
// as U+FFFD when unpaired and StrictUnmarshal refuses.
var escapedSurrogate = regexp.MustCompile(`(?i)\\ud[89a-f]`)

// FuzzStrictUnmarshal holds StrictUnmarshal to a reference built from
// encoding/json: on every input, it accepts exactly what encoding/json
// accepts that is valid UTF-8 with no member name twice in one object,
// and reads the same value.
func FuzzStrictUnmarshal(f *testing.F) {
	for _, s := range []string{`{"a":1,"a":2}`, `{"a":"\"","b":{"a":[1,"}"]}}`, `{"\u0061":1,"a":2}`, `[{"x":null},{"x":true}]`, `"x"`, `{}`, "{\"\x9a\":0,\"\x9a\":0}", `{"a":"\ud83d\ude00"}`, `1e400`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var got, want any
		err := StrictUnmarshal(b, &got)
		ok := utf8.Valid(b) && json.Unmarshal(b, &want) == nil && dupKeysReference(b) == nil
		switch {
		case err == nil && !ok:
			t.Fatalf("accepted %q, which encoding/json refuses, or has a duplicate name or invalid UTF-8", b)
		case err != nil && ok:
			if strings.Contains(err.Error(), "surrogate") && escapedSurrogate.Match(b) {
				return // an unpaired surrogate escape: refused on purpose
			}
			t.Fatalf("refused %q (%v), which is valid, unique and UTF-8", b, err)
		case err == nil && !reflect.DeepEqual(got, want):
			t.Fatalf("read %q as %#v, encoding/json as %#v", b, got, want)
		}
	})
}

// TestStrictUnmarshalReusesDecodersCleanly: StrictUnmarshal reuses its
// decoders; each input is still read on its own, whatever the input
// before it on the same decoder was or how it failed (a duplicate member
// deep in one object, a truncated value, trailing data), on several
// goroutines at once.
func TestStrictUnmarshalReusesDecodersCleanly(t *testing.T) {
	inputs := []struct{ in, refused string }{
		{`{"a":{"b":{"c":1}},"d":[1,2,3]}`, ""},
		{`{"a":{"b":{"c":1,"c":2}}}`, `duplicate field "c" in /a/b`},
		{`{"a":{"b":{"c":1}}`, "unexpected EOF"},
		{`{"c":1}`, ""},
		{`{"a":1}{"a":2}`, "data after the JSON value"},
		{`{"a":1}`, ""},
		{"{\"a\":\"\xff\"}", "invalid UTF-8"},
		{`{"a":"x","b":"x"}`, ""},
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 500 {
				tc := inputs[(i*7+g*3)%len(inputs)]
				var v any
				err := StrictUnmarshal([]byte(tc.in), &v)
				if tc.refused == "" {
					assert.NoError(t, err, "%s after others", tc.in)
					continue
				}
				assert.ErrorContains(t, err, tc.refused, "%s after others", tc.in)
			}
		})
	}
	wg.Wait()
}
