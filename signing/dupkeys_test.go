package signing

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// dupKeysReference is the token-stream form of checkDuplicateKeys (what
// signet used before the byte scanner): it is slow but plainly right, and
// FuzzCheckDuplicateKeys holds the scanner to it on every valid JSON
// input.
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

func TestCheckDuplicateKeys(t *testing.T) {
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
		dup      string // the duplicate reported, "" for none
	}{
		{"flat", `{"a":1,"b":2}`, ""},
		{"duplicate", `{"a":1,"b":2,"a":3}`, "a"},
		{"escaped duplicate", `{"a":1,"\u0061":2}`, "a"},
		{"escaped quote in key", `{"a\"b":1,"a\"b":2}`, `a"b`},
		{"value equal to a key", `{"a":"a","b":"a"}`, ""},
		{"string value with quotes and braces", `{"a":"x\"}{\\","a":1}`, "a"},
		{"same key in sibling objects", `{"a":{"x":1},"b":{"x":2}}`, ""},
		{"same key in nested and outer", `{"x":{"x":{"x":1}}}`, ""},
		{"duplicate after nested object", `{"a":{"b":1},"c":[1,{"a":2}],"a":0}`, "a"},
		{"duplicate inside array element", `[{"a":1},{"a":1,"a":2}]`, "a"},
		{"invalid UTF-8 keys the decoder makes equal", "{\"\x9a\":0,\"\x9b\":1}", "\ufffd"},
		{"invalid UTF-8 key and escaped U+FFFD", "{\"\xff\":0,\"\\ufffd\":1}", "\ufffd"},
		{"valid UTF-8 keys differ", "{\"é\":0,\"è\":1}", ""},
		{"many keys", many(false), ""},
		{"many keys duplicate", many(true), "k7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkDuplicateKeys([]byte(tc.in))
			if tc.dup == "" {
				require.NoError(t, err)
			} else {
				require.EqualError(t, err, fmt.Sprintf("duplicate field %q", tc.dup), "a duplicate key must be refused")
			}
			require.Equal(t, err == nil, dupKeysReference([]byte(tc.in)) == nil, "reference disagrees")
		})
	}
	deep := strings.Repeat("[", 65) + strings.Repeat("]", 65)
	require.ErrorContains(t, checkDuplicateKeys([]byte(deep)), "deeper than 64")
}

// FuzzCheckDuplicateKeys holds the byte scanner to the token-stream
// reference on every input encoding/json accepts.
func FuzzCheckDuplicateKeys(f *testing.F) {
	for _, s := range []string{`{"a":1,"a":2}`, `{"a":"\"","b":{"a":[1,"}"]}}`, `{"\u0061":1,"a":2}`, `[{"x":null},{"x":true}]`, `"x"`, `{}`, "{\"\x9a\":0,\"\x9a\":0}"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !json.Valid(b) {
			_ = checkDuplicateKeys(b) // must not panic
			return
		}
		got, want := checkDuplicateKeys(b), dupKeysReference(b)
		if got != nil && strings.Contains(got.Error(), "deeper than") {
			return // the reference has no depth bound
		}
		if (got == nil) != (want == nil) {
			t.Fatalf("scanner %v, reference %v on %q", got, want, b)
		}
		if got != nil && got.Error() != want.Error() {
			t.Fatalf("scanner %v, reference %v on %q", got, want, b)
		}
	})
}
