package specs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// Verdict is the outcome of a check, of a node or of a run.
type Verdict string

// Verdict values. A check script may only report Pass, Fail or Inconclusive;
// Error and Canceled are decided by signet (DESIGN §4).
const (
	VerdictPass         Verdict = "Pass"
	VerdictFail         Verdict = "Fail"
	VerdictInconclusive Verdict = "Inconclusive"
	VerdictError        Verdict = "Error"
	VerdictCanceled     Verdict = "Canceled"
)

// Environment variables a check process gets (DESIGN §4). EnvStageName is
// set only for staged checks; every other one always.
const (
	EnvRunID            = "SIGNET_RUN_ID"
	EnvCheckName        = "SIGNET_CHECK_NAME"
	EnvCheckIndex       = "SIGNET_CHECK_INDEX"
	EnvNonce            = "SIGNET_NONCE"
	EnvResultFile       = "SIGNET_RESULT_FILE"
	EnvParticipantIndex = "SIGNET_PARTICIPANT_INDEX"
	EnvParticipants     = "SIGNET_PARTICIPANTS"
	EnvGPUCount         = "SIGNET_GPU_COUNT"
	EnvStageName        = "SIGNET_STAGE_NAME"
)

// MaxResultBytes is the largest result document a check may write, so that
// it fits a Kubernetes termination message.
const MaxResultBytes = 4096

// MaxSummaryBytes bounds Result.Summary.
const MaxSummaryBytes = 1024

// MaxMeasurementNameBytes bounds a key of Result.Measurements.
const MaxMeasurementNameBytes = 128

// ErrMalformedResult is wrapped by every ParseResult error about the
// content of a result document.
var ErrMalformedResult = errors.New("malformed check result")

// ErrResultTooLarge is wrapped by the ParseResult error for a document longer
// than MaxResultBytes.
var ErrResultTooLarge = errors.New("check result larger than 4096 bytes")

// Result is the JSON document a check writes to SIGNET_RESULT_FILE.
type Result struct {
	Run          string                     `json:"run"`
	Check        string                     `json:"check"`
	Nonce        string                     `json:"nonce"`
	Verdict      Verdict                    `json:"verdict"`
	Summary      string                     `json:"summary"`
	Measurements map[string]json.RawMessage `json:"measurements,omitempty"`
}

// resultFields are the keys of a result document; all but measurements are
// required.
var resultFields = map[string]bool{
	"run": true, "check": true, "nonce": true, "verdict": true, "summary": true,
	"measurements": false,
}

// ParseResult parses a check's result document strictly. It refuses, with an
// error wrapping ErrResultTooLarge or ErrMalformedResult: more than
// MaxResultBytes bytes; invalid UTF-8; anything but one JSON object; a
// duplicate key at any depth; a key that is not exactly one of run, check,
// nonce, verdict, summary, measurements (case matters); a missing or null
// required field; an empty run, check or nonce; a verdict other than Pass,
// Fail or Inconclusive; a summary over MaxSummaryBytes or holding control
// characters other than newline and tab; measurements that are not an object
// of non-empty names of at most MaxMeasurementNameBytes.
func ParseResult(b []byte) (*Result, error) {
	if len(b) > MaxResultBytes {
		return nil, fmt.Errorf("%w: %d bytes", ErrResultTooLarge, len(b))
	}
	if !utf8.Valid(b) {
		return nil, fmt.Errorf("%w: not valid UTF-8", ErrMalformedResult)
	}
	if err := checkJSONShape(b); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformedResult, err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformedResult, err)
	}
	for k := range raw {
		if _, ok := resultFields[k]; !ok {
			return nil, fmt.Errorf("%w: unknown field %q", ErrMalformedResult, k)
		}
	}
	for k, required := range resultFields {
		v, ok := raw[k]
		if !ok {
			if required {
				return nil, fmt.Errorf("%w: field %q is missing", ErrMalformedResult, k)
			}
			continue
		}
		if string(v) == "null" {
			return nil, fmt.Errorf("%w: field %q is null", ErrMalformedResult, k)
		}
	}
	r := &Result{}
	for _, f := range []struct {
		name string
		dst  *string
	}{
		{"run", &r.Run}, {"check", &r.Check}, {"nonce", &r.Nonce},
		{"verdict", (*string)(&r.Verdict)}, {"summary", &r.Summary},
	} {
		if err := json.Unmarshal(raw[f.name], f.dst); err != nil {
			return nil, fmt.Errorf("%w: field %q is not a string", ErrMalformedResult, f.name)
		}
	}
	for _, f := range []struct{ name, v string }{{"run", r.Run}, {"check", r.Check}, {"nonce", r.Nonce}} {
		if f.v == "" {
			return nil, fmt.Errorf("%w: field %q is empty", ErrMalformedResult, f.name)
		}
		if strings.ContainsFunc(f.v, isControl) {
			return nil, fmt.Errorf("%w: field %q holds a control character", ErrMalformedResult, f.name)
		}
	}
	switch r.Verdict {
	case VerdictPass, VerdictFail, VerdictInconclusive:
	default:
		return nil, fmt.Errorf("%w: field \"verdict\": %q is not Pass, Fail or Inconclusive", ErrMalformedResult, r.Verdict)
	}
	if len(r.Summary) > MaxSummaryBytes {
		return nil, fmt.Errorf("%w: field \"summary\" is %d bytes, more than %d", ErrMalformedResult, len(r.Summary), MaxSummaryBytes)
	}
	if strings.ContainsFunc(r.Summary, func(c rune) bool { return c != '\n' && c != '\t' && isControl(c) }) {
		return nil, fmt.Errorf("%w: field \"summary\" holds a control character", ErrMalformedResult)
	}
	if m, ok := raw["measurements"]; ok {
		if err := json.Unmarshal(m, &r.Measurements); err != nil {
			return nil, fmt.Errorf("%w: field \"measurements\" is not an object", ErrMalformedResult)
		}
		for k := range r.Measurements {
			if k == "" || len(k) > MaxMeasurementNameBytes || strings.ContainsFunc(k, isControl) {
				return nil, fmt.Errorf("%w: measurements: name %q is empty, longer than %d bytes or holds a control character", ErrMalformedResult, k, MaxMeasurementNameBytes)
			}
		}
	}
	return r, nil
}

func isControl(c rune) bool { return c < 0x20 || c == 0x7f }

// checkJSONShape reports an error unless b is exactly one JSON object, with
// no duplicate key in any object at any depth.
func checkJSONShape(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return errors.New("not a JSON object")
	}
	if err := walkObject(dec); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("data after the JSON object")
	}
	return nil
}

// walkObject consumes an object whose '{' was read, refusing duplicate keys.
func walkObject(dec *json.Decoder) error {
	seen := map[string]bool{}
	for {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		if d, ok := tok.(json.Delim); ok && d == '}' {
			return nil
		}
		k, ok := tok.(string)
		if !ok {
			return errors.New("object key is not a string")
		}
		if seen[k] {
			return fmt.Errorf("duplicate key %q", k)
		}
		seen[k] = true
		if err := walkValue(dec); err != nil {
			return err
		}
	}
}

func walkValue(dec *json.Decoder) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return nil
	}
	switch d {
	case '{':
		return walkObject(dec)
	case '[':
		for dec.More() {
			if err := walkValue(dec); err != nil {
				return err
			}
		}
		_, err := dec.Token() // ']'
		return err
	}
	return fmt.Errorf("unexpected %q", d)
}

// Expect is what a result must name to be fresh: the run, the check and the
// nonce signet gave this execution.
type Expect struct {
	Run, Check, Nonce string
}

// Termination is what a backend observed about how a check's process (or
// workload) ended. The zero value proves nothing and evaluates to Error.
type Termination struct {
	// Started is true once the process (workload) was created.
	Started bool `json:"started"`
	// Exited is true when it exited on its own with ExitCode.
	Exited   bool `json:"exited"`
	ExitCode int  `json:"exitCode"`
	// Signal names the signal that ended it ("SIGKILL"), if one did.
	Signal string `json:"signal,omitempty"`
	// DeadlineExceeded is true when signet stopped it at the wall-clock deadline.
	DeadlineExceeded bool `json:"deadlineExceeded,omitempty"`
	// Canceled is true when signet stopped it because the run was canceled.
	Canceled bool `json:"canceled,omitempty"`
	// ResultRefused, when set, says why the backend refused to read the
	// result (a symlink, not a regular file, unreadable); Evaluate then
	// returns Error whatever the result bytes.
	ResultRefused string `json:"resultRefused,omitempty"`
	// Reason is the backend's own words on how it ended.
	Reason string `json:"reason,omitempty"`
	// PeakMemoryBytes is the most memory the workload's processes held at
	// once, where the backend measures it (a cgroup with memory
	// accounting); 0 when not measured.
	PeakMemoryBytes int64 `json:"peakMemoryBytes,omitempty"`
}

// Outcome is a check's verdict for one participant, with the reason and,
// when the verdict came from the check, its parsed result.
type Outcome struct {
	Verdict Verdict `json:"verdict"`
	Reason  string  `json:"reason"`
	Result  *Result `json:"result,omitempty"`
}

// Evaluate applies DESIGN §4's verdict/exit matrix. result is nil when no
// result was produced. It fails closed: it returns Pass, Fail or
// Inconclusive only for a process that started, exited on its own with
// 0, 1 or 2 before any deadline or cancel, and left a result that parses
// (ParseResult), names exp's run, check and nonce (all non-empty), and whose
// verdict matches the exit code. A canceled check is Canceled; everything
// else is Error with a reason naming what was not proven.
func Evaluate(exp Expect, term Termination, result []byte) Outcome {
	errorf := func(format string, a ...any) Outcome {
		return Outcome{Verdict: VerdictError, Reason: fmt.Sprintf(format, a...)}
	}
	switch {
	case term.Canceled:
		return Outcome{Verdict: VerdictCanceled, Reason: withDetail("canceled", term.Reason)}
	case !term.Started:
		return errorf("%s", withDetail("never started", term.Reason))
	case term.DeadlineExceeded:
		return errorf("%s", withDetail("deadline exceeded", term.Reason))
	case term.Signal != "":
		return errorf("killed by signal %s", term.Signal)
	case !term.Exited:
		return errorf("%s", withDetail("no exit status", term.Reason))
	}
	want, ok := exitVerdicts[term.ExitCode]
	if !ok {
		return errorf("exit code %d is not 0, 1 or 2", term.ExitCode)
	}
	if term.ResultRefused != "" {
		return errorf("exit code %d, result refused: %s", term.ExitCode, term.ResultRefused)
	}
	if result == nil {
		return errorf("exit code %d with no result", term.ExitCode)
	}
	if exp.Run == "" || exp.Check == "" || exp.Nonce == "" {
		return errorf("expected run, check and nonce are not all known")
	}
	r, err := ParseResult(result)
	if err != nil {
		return errorf("exit code %d: %v", term.ExitCode, err)
	}
	for _, f := range []struct{ name, got, want string }{
		{"run", r.Run, exp.Run}, {"check", r.Check, exp.Check}, {"nonce", r.Nonce, exp.Nonce},
	} {
		if f.got != f.want {
			return errorf("stale result: %s %q, want %q", f.name, f.got, f.want)
		}
	}
	if r.Verdict != want {
		return errorf("result verdict %s contradicts exit code %d (%s)", r.Verdict, term.ExitCode, want)
	}
	return Outcome{Verdict: r.Verdict, Reason: fmt.Sprintf("exit code %d with a valid %s result", term.ExitCode, r.Verdict), Result: r}
}

var exitVerdicts = map[int]Verdict{0: VerdictPass, 1: VerdictFail, 2: VerdictInconclusive}

func withDetail(s, detail string) string {
	if detail == "" {
		return s
	}
	return s + ": " + detail
}

// RunVerdict is DESIGN §4's run verdict: Canceled if canceled (or any check
// was Canceled), else Fail if any check failed, else Error if any errored,
// else Inconclusive if any was inconclusive, else Pass. It fails closed: no
// checks, or a verdict it does not know, is Error.
func RunVerdict(canceled bool, checks []Verdict) Verdict {
	if canceled {
		return VerdictCanceled
	}
	if len(checks) == 0 {
		return VerdictError
	}
	var fail, errored, canceledCheck, inconclusive bool
	for _, v := range checks {
		switch v {
		case VerdictPass:
		case VerdictFail:
			fail = true
		case VerdictInconclusive:
			inconclusive = true
		case VerdictCanceled:
			canceledCheck = true
		default:
			errored = true
		}
	}
	switch {
	case canceledCheck:
		return VerdictCanceled
	case fail:
		return VerdictFail
	case errored:
		return VerdictError
	case inconclusive:
		return VerdictInconclusive
	}
	return VerdictPass
}

// NodeVerdict is a node's verdict from the outcomes of the checks covering
// it: Pass only if there is at least one and every one passed; otherwise the
// same precedence as RunVerdict.
func NodeVerdict(checks []Verdict) Verdict {
	return RunVerdict(false, checks)
}
