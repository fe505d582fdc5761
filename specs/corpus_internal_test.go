package specs

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// TestDecoderInvariants proves that no input can reach the two findings
// the strict decoder keeps for its own bugs, which the corpus therefore
// does not count as rejection reasons (see specsReasons): every type a
// kind's fields reach has a case of decoder.value ("cannot decode into
// %s"), and every leaf value it builds encodes as JSON ("cannot convert to
// JSON: %v"; objects, maps and lists are built as map[string]any and []any
// of those leaves). A field of a new type fails here, not in production.
func TestDecoderInvariants(t *testing.T) {
	// A valid node for each leaf the decoder knows.
	leaf := func(t reflect.Type) *yaml.Node {
		switch {
		case t == secondsType:
			return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: "600s"}
		case t == quantityType:
			return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: "16Gi"}
		case t.Kind() == reflect.Bool:
			return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: "true"}
		case t.Kind() == reflect.Int || t.Kind() == reflect.Int32 || t.Kind() == reflect.Int64:
			return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: "1"}
		}
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: "x"}
	}
	seen := map[reflect.Type]bool{}
	var walk func(typ reflect.Type, path string)
	walk = func(typ reflect.Type, path string) {
		for typ.Kind() == reflect.Pointer {
			typ = typ.Elem()
		}
		if seen[typ] {
			return
		}
		seen[typ] = true
		d := &decoder{}
		v := d.value(leaf(typ), typ, path)
		for _, f := range d.findings {
			assert.False(t, strings.HasPrefix(f.Message, "cannot decode into"), "%s (%s): %s", path, typ, f.Message)
		}
		if typ == secondsType || typ == quantityType {
			require.Empty(t, d.findings, "%s (%s)", path, typ)
		}
		switch typ.Kind() {
		case reflect.Struct:
			if typ == secondsType || typ == quantityType {
				break
			}
			fields := map[string]reflect.Type{}
			collectFields(typ, fields)
			for name, ft := range fields {
				walk(ft, path+"."+name)
			}
		case reflect.Map, reflect.Slice:
			walk(typ.Elem(), path+"[]")
		default:
			require.Empty(t, d.findings, "%s (%s): a valid leaf must decode", path, typ)
			_, err := json.Marshal(v)
			assert.NoError(t, err, "%s (%s)", path, typ)
		}
	}
	walk(reflect.TypeOf(CertificationProfile{}), KindProfile)
	walk(reflect.TypeOf(CertificationRequest{}), KindRequest)
	assert.Greater(t, len(seen), 10, "the walk must reach the kinds' field types")

	// The fallback still refuses a type without a case.
	d := &decoder{}
	d.value(leaf(reflect.TypeOf(0.5)), reflect.TypeOf(0.5), "f")
	require.Len(t, d.findings, 1)
	assert.Equal(t, "cannot decode into float64", d.findings[0].Message)
}
