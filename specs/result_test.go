package specs

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func resultJSON(run, check, nonce, verdict string) []byte {
	return fmt.Appendf(nil, `{"run":%q,"check":%q,"nonce":%q,"verdict":%q,"summary":"ok"}`, run, check, nonce, verdict)
}

func TestParseResult(t *testing.T) {
	valid := `{"run":"r1","check":"c1","nonce":"n1","verdict":"Pass","summary":"fine","measurements":{"bw":{"v":[1,2]},"x":"y"}}`
	tests := []struct {
		name    string
		in      string
		wantErr string
	}{
		{"valid", valid, ""},
		{"valid without measurements", `{"run":"r","check":"c","nonce":"n","verdict":"Fail","summary":""}`, ""},
		{"valid inconclusive", `{"run":"r","check":"c","nonce":"n","verdict":"Inconclusive","summary":"line1\nline2\ttab"}`, ""},
		{"oversized", `{"run":"r","check":"c","nonce":"n","verdict":"Pass","summary":"` + strings.Repeat("a", MaxResultBytes) + `"}`, "larger than 4096"},
		{"empty", ``, "malformed"},
		{"array", `[]`, "not a JSON object"},
		{"trailing data", valid + `{}`, "data after"},
		{"trailing garbage", valid + `x`, "malformed"},
		{"invalid utf8", "{\"run\":\"\xff\",\"check\":\"c\",\"nonce\":\"n\",\"verdict\":\"Pass\",\"summary\":\"\"}", "UTF-8"},
		{"duplicate key", `{"run":"r","run":"s","check":"c","nonce":"n","verdict":"Pass","summary":""}`, `duplicate key "run"`},
		{"duplicate verdict", `{"run":"r","check":"c","nonce":"n","verdict":"Fail","verdict":"Pass","summary":""}`, `duplicate key "verdict"`},
		{"duplicate nested key", `{"run":"r","check":"c","nonce":"n","verdict":"Pass","summary":"","measurements":{"a":{"b":1,"b":2}}}`, `duplicate key "b"`},
		{"duplicate in array", `{"run":"r","check":"c","nonce":"n","verdict":"Pass","summary":"","measurements":{"a":[{"b":1,"b":2}]}}`, `duplicate key "b"`},
		{"unknown field", `{"run":"r","check":"c","nonce":"n","verdict":"Pass","summary":"","extra":1}`, `unknown field "extra"`},
		{"case-folded field", `{"RUN":"r","check":"c","nonce":"n","verdict":"Pass","summary":""}`, `unknown field "RUN"`},
		{"missing nonce", `{"run":"r","check":"c","verdict":"Pass","summary":""}`, `"nonce" is missing`},
		{"missing summary", `{"run":"r","check":"c","nonce":"n","verdict":"Pass"}`, `"summary" is missing`},
		{"null run", `{"run":null,"check":"c","nonce":"n","verdict":"Pass","summary":""}`, `"run" is null`},
		{"null measurements", `{"run":"r","check":"c","nonce":"n","verdict":"Pass","summary":"","measurements":null}`, `"measurements" is null`},
		{"empty check", `{"run":"r","check":"","nonce":"n","verdict":"Pass","summary":""}`, `"check" is empty`},
		{"number nonce", `{"run":"r","check":"c","nonce":1,"verdict":"Pass","summary":""}`, `"nonce" is not a string`},
		{"verdict Error", `{"run":"r","check":"c","nonce":"n","verdict":"Error","summary":""}`, `"Error" is not Pass, Fail or Inconclusive`},
		{"verdict Canceled", `{"run":"r","check":"c","nonce":"n","verdict":"Canceled","summary":""}`, `is not Pass`},
		{"verdict lowercase", `{"run":"r","check":"c","nonce":"n","verdict":"pass","summary":""}`, `is not Pass`},
		{"summary too long", `{"run":"r","check":"c","nonce":"n","verdict":"Pass","summary":"` + strings.Repeat("a", MaxSummaryBytes+1) + `"}`, `"summary" is 1025 bytes`},
		{"summary control char", `{"run":"r","check":"c","nonce":"n","verdict":"Pass","summary":"a\u001b[31m"}`, `"summary" holds a control character`},
		{"nonce control char", `{"run":"r","check":"c","nonce":"n\n","verdict":"Pass","summary":""}`, `"nonce" holds a control character`},
		{"measurements not object", `{"run":"r","check":"c","nonce":"n","verdict":"Pass","summary":"","measurements":[1]}`, `"measurements" is not an object`},
		{"measurement empty name", `{"run":"r","check":"c","nonce":"n","verdict":"Pass","summary":"","measurements":{"":1}}`, `name "" is empty`},
		{"measurement long name", `{"run":"r","check":"c","nonce":"n","verdict":"Pass","summary":"","measurements":{"` + strings.Repeat("m", MaxMeasurementNameBytes+1) + `":1}}`, `longer than 128`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := ParseResult([]byte(tt.in))
			if tt.wantErr == "" {
				require.NoError(t, err)
				assert.Contains(t, []Verdict{VerdictPass, VerdictFail, VerdictInconclusive}, r.Verdict)
				return
			}
			require.Error(t, err)
			assert.Nil(t, r)
			assert.Contains(t, err.Error(), tt.wantErr)
			assert.True(t, errors.Is(err, ErrMalformedResult) || errors.Is(err, ErrResultTooLarge), "error %v wraps neither sentinel", err)
		})
	}
}

func TestParseResultFields(t *testing.T) {
	r, err := ParseResult([]byte(`{"run":"r1","check":"c1","nonce":"n1","verdict":"Pass","summary":"fine","measurements":{"bw":123.5}}`))
	require.NoError(t, err)
	assert.Equal(t, &Result{Run: "r1", Check: "c1", Nonce: "n1", Verdict: VerdictPass, Summary: "fine",
		Measurements: map[string]json.RawMessage{"bw": json.RawMessage("123.5")}}, r)
}

func TestParseResultExactlyMax(t *testing.T) {
	head := `{"run":"r","check":"c","nonce":"n","verdict":"Pass","summary":"","measurements":{"pad":"`
	tail := `"}}`
	b := []byte(head + strings.Repeat("p", MaxResultBytes-len(head)-len(tail)) + tail)
	require.Len(t, b, MaxResultBytes)
	_, err := ParseResult(b)
	require.NoError(t, err)
	_, err = ParseResult(append(b, ' '))
	require.ErrorIs(t, err, ErrResultTooLarge)
}

// TestEvaluate is DESIGN §4's verdict/exit matrix over Termination values;
// reconciler/local tests the same rows with real processes.
func TestEvaluate(t *testing.T) {
	exp := Expect{Run: "r1", Check: "c1", Nonce: "n1"}
	exited := func(code int) Termination { return Termination{Started: true, Exited: true, ExitCode: code} }
	pass, fail, inc := resultJSON("r1", "c1", "n1", "Pass"), resultJSON("r1", "c1", "n1", "Fail"), resultJSON("r1", "c1", "n1", "Inconclusive")
	tests := []struct {
		name       string
		exp        Expect
		term       Termination
		result     []byte
		want       Verdict
		wantReason string
	}{
		{"valid Pass exit 0", exp, exited(0), pass, VerdictPass, "valid Pass"},
		{"valid Fail exit 1", exp, exited(1), fail, VerdictFail, "valid Fail"},
		{"valid Inconclusive exit 2", exp, exited(2), inc, VerdictInconclusive, "valid Inconclusive"},
		{"exit 0 no result", exp, exited(0), nil, VerdictError, "exit code 0 with no result"},
		{"exit 1 no result", exp, exited(1), nil, VerdictError, "no result"},
		{"exit 0 empty result", exp, exited(0), []byte{}, VerdictError, "malformed"},
		{"malformed", exp, exited(0), []byte(`{"run":`), VerdictError, "malformed"},
		{"oversized", exp, exited(0), make([]byte, MaxResultBytes+1), VerdictError, "larger than 4096"},
		{"stale nonce", exp, exited(0), resultJSON("r1", "c1", "old", "Pass"), VerdictError, `stale result: nonce "old"`},
		{"wrong run", exp, exited(0), resultJSON("r0", "c1", "n1", "Pass"), VerdictError, `stale result: run "r0"`},
		{"wrong check", exp, exited(0), resultJSON("r1", "c2", "n1", "Pass"), VerdictError, `stale result: check "c2"`},
		{"Pass with exit 1", exp, exited(1), pass, VerdictError, "contradicts exit code 1"},
		{"Fail with exit 0", exp, exited(0), fail, VerdictError, "contradicts exit code 0"},
		{"Inconclusive with exit 0", exp, exited(0), inc, VerdictError, "contradicts"},
		{"Pass with exit 2", exp, exited(2), pass, VerdictError, "contradicts"},
		{"exit 3", exp, exited(3), pass, VerdictError, "exit code 3 is not 0, 1 or 2"},
		{"exit 255", exp, exited(255), pass, VerdictError, "exit code 255"},
		{"signal", exp, Termination{Started: true, Signal: "SIGKILL"}, pass, VerdictError, "killed by signal SIGKILL"},
		{"deadline", exp, Termination{Started: true, Exited: true, DeadlineExceeded: true}, pass, VerdictError, "deadline exceeded"},
		{"never started", exp, Termination{Reason: "exec format error"}, pass, VerdictError, "never started: exec format error"},
		{"no exit status", exp, Termination{Started: true}, pass, VerdictError, "no exit status"},
		{"zero termination", exp, Termination{}, nil, VerdictError, "never started"},
		{"result refused", exp, Termination{Started: true, Exited: true, ResultRefused: "result file is a symlink"}, pass, VerdictError, "symlink"},
		{"canceled", exp, Termination{Started: true, Canceled: true, Signal: "SIGTERM"}, pass, VerdictCanceled, "canceled"},
		{"canceled before start", exp, Termination{Canceled: true}, nil, VerdictCanceled, "canceled"},
		{"unknown expectation", Expect{Run: "r1", Check: "c1"}, exited(0), resultJSON("r1", "c1", "", "Pass"), VerdictError, "not all known"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Evaluate(tt.exp, tt.term, tt.result)
			assert.Equal(t, tt.want, got.Verdict)
			assert.Contains(t, got.Reason, tt.wantReason)
			if tt.want == VerdictError || tt.want == VerdictCanceled {
				assert.Nil(t, got.Result)
			} else {
				require.NotNil(t, got.Result)
				assert.Equal(t, tt.want, got.Result.Verdict)
			}
		})
	}
}

func TestRunVerdict(t *testing.T) {
	P, F, E, I, C := VerdictPass, VerdictFail, VerdictError, VerdictInconclusive, VerdictCanceled
	tests := []struct {
		name     string
		canceled bool
		checks   []Verdict
		want     Verdict
		wantNode Verdict
	}{
		{"all pass", false, []Verdict{P, P}, P, P},
		{"canceled wins over fail", true, []Verdict{F, E, P}, C, F},
		{"canceled with no checks", true, nil, C, E},
		{"canceled check", false, []Verdict{P, C}, C, C},
		{"fail over error", false, []Verdict{E, F, I}, F, F},
		{"error over inconclusive", false, []Verdict{I, E, P}, E, E},
		{"inconclusive over pass", false, []Verdict{P, I}, I, I},
		{"no checks", false, nil, E, E},
		{"unknown verdict", false, []Verdict{P, "pass"}, E, E},
		{"empty verdict", false, []Verdict{""}, E, E},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, RunVerdict(tt.canceled, tt.checks))
			assert.Equal(t, tt.wantNode, NodeVerdict(tt.checks))
		})
	}
}

func FuzzParseResult(f *testing.F) {
	f.Add([]byte(`{"run":"r","check":"c","nonce":"n","verdict":"Pass","summary":"s","measurements":{"a":[1,{"b":null}]}}`))
	f.Add([]byte(`{"run":"r","run":"r","check":"c","nonce":"n","verdict":"Pass","summary":""}`))
	f.Add([]byte(`{"Run":"r","check":"c","nonce":"n","verdict":"Fail","summary":""}`))
	f.Add([]byte(`[{"a":1}]`))
	f.Add([]byte(`{"run":"r","check":"c","nonce":"n","verdict":"Inconclusive","summary":"\u0000"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseResult(b)
		if err != nil {
			require.Nil(t, r)
			return
		}
		require.LessOrEqual(t, len(b), MaxResultBytes)
		require.Contains(t, []Verdict{VerdictPass, VerdictFail, VerdictInconclusive}, r.Verdict)
		require.NotEmpty(t, r.Run)
		require.NotEmpty(t, r.Check)
		require.NotEmpty(t, r.Nonce)
		require.LessOrEqual(t, len(r.Summary), MaxSummaryBytes)
		// What was accepted re-encodes to a document that is accepted again
		// with the same content, and Evaluate agrees with the exit it claims.
		again, err := json.Marshal(r)
		require.NoError(t, err)
		if len(again) <= MaxResultBytes {
			r2, err := ParseResult(again)
			require.NoError(t, err)
			require.Equal(t, r.Run, r2.Run)
			require.Equal(t, r.Nonce, r2.Nonce)
			require.Equal(t, r.Verdict, r2.Verdict)
		}
		code := map[Verdict]int{VerdictPass: 0, VerdictFail: 1, VerdictInconclusive: 2}[r.Verdict]
		out := Evaluate(Expect{Run: r.Run, Check: r.Check, Nonce: r.Nonce}, Termination{Started: true, Exited: true, ExitCode: code}, b)
		require.Equal(t, r.Verdict, out.Verdict, out.Reason)
	})
}
