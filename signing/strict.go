package signing

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// strict are the options every signed byte is read with.
var strict = jsonv2.JoinOptions(
	jsonv2.RejectUnknownMembers(true),
	jsontext.AllowDuplicateNames(false),
	jsontext.AllowInvalidUTF8(false),
)

// StrictUnmarshal decodes exactly one JSON value from b into v the way
// signet reads everything that is signed or bound by digest, so that a
// document means one thing to every reader. It refuses:
//
//   - a member name no field of v has, matched case-sensitively
//     ("Payload" is not "payload": encoding/json would take either, and
//     keep whichever came last);
//   - the same member name twice in one object at any depth, compared
//     after unescaping ("a" and "\u0061" are one name), raw values such
//     as a statement's predicate included;
//   - invalid UTF-8 anywhere, unpaired surrogate escapes included
//     (encoding/json turns both into U+FFFD, making different bytes read
//     the same);
//   - anything after the value but white space.
//
// It is encoding/json/v2 (github.com/go-json-experiment/json, the module
// it was developed in) with those options set explicitly.
func StrictUnmarshal(b []byte, v any) error {
	dec := decoders.Get().(*jsontext.Decoder)
	defer decoders.Put(dec)
	dec.Reset(bytes.NewBuffer(b), strict)
	if err := jsonv2.UnmarshalDecode(dec, v, strict); err != nil {
		return strictError(err)
	}
	if _, err := dec.ReadToken(); err != io.EOF {
		return errors.New("data after the JSON value")
	}
	return nil
}

// decoders are StrictUnmarshal's decoders, reused: a decoder keeps a
// 4 KiB cache of the strings it made, allocated with its first string,
// and a new decoder per document made those caches a quarter of all an
// audit allocated. A pooled decoder holds on to the last input it read
// until it is reset or the pool is emptied by a collection.
var decoders = sync.Pool{New: func() any { return jsontext.NewDecoder(bytes.NewBuffer(nil), strict) }}

// strictError words the refusals StrictUnmarshal exists for the way the
// rest of signet does, naming the member and the object it is in.
func strictError(err error) error {
	var se *jsontext.SyntacticError
	if errors.As(err, &se) && errors.Is(err, jsontext.ErrDuplicateName) {
		if in := se.JSONPointer.Parent(); in != "" {
			return fmt.Errorf("duplicate field %q in %s", se.JSONPointer.LastToken(), in)
		}
		return fmt.Errorf("duplicate field %q", se.JSONPointer.LastToken())
	}
	var me *jsonv2.SemanticError
	if !errors.As(err, &me) {
		return err
	}
	if errors.Is(err, jsonv2.ErrUnknownName) {
		if in := me.JSONPointer.Parent(); in != "" {
			return fmt.Errorf("unknown field %q in %s", me.JSONPointer.LastToken(), in)
		}
		return fmt.Errorf("unknown field %q", me.JSONPointer.LastToken())
	}
	// The library words its semantic errors at random ("cannot" or
	// "unable to", once per process): word them here, so that a message
	// is the same on every run.
	if me.Err != nil {
		if me.JSONPointer == "" {
			return me.Err
		}
		return fmt.Errorf("%s: %w", me.JSONPointer, me.Err)
	}
	at := ""
	if me.JSONPointer != "" {
		at = " at " + string(me.JSONPointer)
	}
	want := "this value"
	if me.GoType != nil {
		want = me.GoType.String()
	}
	return fmt.Errorf("JSON %s where %s is expected%s", kindName(me.JSONKind), want, at)
}

// kindName names a JSON kind in an error.
func kindName(k jsontext.Kind) string {
	switch k {
	case 'n':
		return "null"
	case 'f', 't':
		return "boolean"
	case '"':
		return "string"
	case '0':
		return "number"
	case '{', '}':
		return "object"
	case '[', ']':
		return "array"
	}
	return "value"
}
