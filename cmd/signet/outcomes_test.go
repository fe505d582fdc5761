package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"signet.dev/signet/evidence"
	"signet.dev/signet/evidence/audit"
	"signet.dev/signet/internal/testing/evidencetest"
	"signet.dev/signet/signing"
	"signet.dev/signet/specs"
)

// reasonDocs is a run whose checks end in every way specs.Evaluate
// knows, each reason written by Evaluate itself: Pass, Fail (with a
// stderr tail), Inconclusive, no result, a stale nonce, a contradiction,
// an exit code out of the contract, a signal, the deadline, never
// started, canceled, and a check skipped after the cancel.
func reasonDocs() *audit.RunDocuments {
	const dir = "runs/c/2026/01/02/ab/r"
	exp := specs.Expect{Run: "r", Check: "x", Nonce: "n"}
	res := func(verdict, summary string, m map[string]json.RawMessage) []byte {
		b, _ := json.Marshal(specs.Result{Run: "r", Check: "x", Nonce: "n", Verdict: specs.Verdict(verdict), Summary: summary, Measurements: m})
		return b
	}
	exited := func(code int) specs.Termination {
		return specs.Termination{Started: true, Exited: true, ExitCode: code}
	}
	cases := []struct {
		name   string
		term   specs.Termination
		result []byte
		stderr string
	}{
		{"pass", exited(0), res("Pass", "8 GPUs healthy", map[string]json.RawMessage{"gpus": json.RawMessage("8"), "eccErrors": json.RawMessage("0")}), ""},
		{"fail", exited(1), res("Fail", "busbw 180.2 GB/s below 400 GB/s", map[string]json.RawMessage{"busbwGBps": json.RawMessage("180.2")}),
			"line 1\nline 2\nline 3\nline 4\nline 5\nline 6\nline 7\nline 8\nline 9\nline 10\nline 11\nNVLink 3 degraded\n"},
		{"inconclusive", exited(2), res("Inconclusive", "no GPU visible\nnvidia-smi not found", nil), "nvidia-smi: not found\n"},
		{"no-result", exited(0), nil, "dcgmi: cannot open /dev/nvidia3\n"},
		{"stale", exited(0), []byte(`{"run":"r","check":"x","nonce":"old","verdict":"Pass","summary":"ok"}`), ""},
		{"contradiction", exited(1), res("Pass", "ok", nil), ""},
		{"exit-code", exited(7), nil, "segfault\n"},
		{"signal", specs.Termination{Started: true, Signal: "SIGKILL"}, nil, ""},
		{"deadline", specs.Termination{Started: true, DeadlineExceeded: true, Reason: "sent SIGTERM at the deadline, SIGKILL after 10s"}, nil, "still waiting for NCCL\n"},
		{"never-started", specs.Termination{Reason: "no uid free in 65536-65537"}, nil, ""},
		{"canceled", specs.Termination{Started: true, Canceled: true, Reason: "sent SIGTERM to the process group on cancel"}, nil, ""},
	}
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	d := &audit.RunDocuments{Cluster: "c", Run: "r", Dir: dir, Logs: map[string][]byte{}, Admission: &evidence.Admission{}}
	var checks []specs.Check
	for i, c := range cases {
		checks = append(checks, specs.Check{Name: c.name})
		o := specs.Evaluate(exp, c.term, c.result)
		po := evidence.ParticipantOutcome{Node: "gpu-node-1", Verdict: o.Verdict, Reason: o.Reason, Result: o.Result}
		if c.term.Exited {
			code := c.term.ExitCode
			po.ExitCode = &code
		}
		po.Signal = c.term.Signal
		if c.stderr != "" {
			p := evidence.LogPath(dir, i, c.name, "gpu-node-1", "stderr")
			po.Logs = []evidence.FileRef{{Path: p, Digest: specs.DigestOf([]byte(c.stderr))}}
			d.Logs[d.Rel(p)] = []byte(c.stderr)
		}
		d.Checks = append(d.Checks, &evidence.CheckEvidence{Run: "r", Check: c.name, Index: i, Verdict: o.Verdict, Reason: o.Reason,
			Participants: []evidence.ParticipantOutcome{po}, StartedAt: start, EndedAt: start.Add(time.Duration(i+1) * 1500 * time.Millisecond)})
	}
	checks = append(checks, specs.Check{Name: "after-cancel"})
	d.Checks = append(d.Checks, nil)
	d.Admission.ProfileObject.Spec.Checks = checks
	d.Evidence = &evidence.RunEvidence{Checks: make([]evidence.CheckSummary, len(checks))}
	d.Evidence.Checks[len(checks)-1] = evidence.CheckSummary{Index: len(checks) - 1, Check: "after-cancel", Verdict: specs.VerdictCanceled, Skipped: true}
	return d
}

// TestOutcomesGolden: the text and JSON of the outcomes that signet run
// and signet verify print, with every reason kind.
func TestOutcomesGolden(t *testing.T) {
	outs := outcomesOf(reasonDocs())
	var text bytes.Buffer
	printOutcomes(&text, outs)
	golden(t, "outcomes.golden", text.String())
	var js bytes.Buffer
	require.NoError(t, writeJSON(&js, outs))
	golden(t, "outcomes.json.golden", js.String())
}

// TestVerifyOutcomes: signet verify prints each check's outcome from the
// verified documents of the reconciler's branch, and signers and
// approvers by name; on a run with a finding it prints no outcome.
func TestVerifyOutcomes(t *testing.T) {
	f := evidenceFixture(t)
	out, stderr, code := runSigningCLI(t, "verify", "run-a", "--repo", f.Repo, "--trust", f.TrustFile)
	require.Equal(t, 0, code, out+stderr)
	require.Contains(t, out, "OUTCOMES\n00 first on ")
	require.Contains(t, out, ": Pass: exit code 0 with a valid Pass result\n   summary: ok\n")
	js, stderr, code := runSigningCLI(t, "verify", "run-a", "--repo", f.Repo, "--trust", f.TrustFile, "-o", "json")
	require.Equal(t, 0, code, js+stderr)
	var v struct {
		Run      string    `json:"run"`
		Outcomes []outcome `json:"outcomes"`
	}
	require.NoError(t, json.Unmarshal([]byte(js), &v))
	require.Equal(t, "run-a", v.Run)
	require.Len(t, v.Outcomes, 2)
	require.Equal(t, "ok", v.Outcomes[1].Summary)

	// A forged check document (another key): findings, no outcome.
	c, err := f.Clone(filepath.Join(t.TempDir(), "evidence.git"))
	require.NoError(t, err)
	p, err := c.Find("/run-a/checks/00-first.json")
	require.NoError(t, err)
	b, err := c.Read("refs/heads/"+evidencetest.Branch, p)
	require.NoError(t, err)
	other, err := signing.GenerateKey(signing.AlgorithmECDSAP256)
	require.NoError(t, err)
	forged, err := evidencetest.Resign(b, other, func(pred map[string]any) {})
	require.NoError(t, err)
	at, err := c.Landed(p)
	require.NoError(t, err)
	_, err = c.Rewrite(at, map[string][]byte{p: forged})
	require.NoError(t, err)
	out, _, code = runSigningCLI(t, "verify", "run-a", "--repo", c.Dir, "--trust", f.TrustFile)
	require.Equal(t, 1, code, out)
	require.NotContains(t, out, "OUTCOMES", "no outcome from a run with findings")
}
