package main

import (
	"encoding/json"
	"fmt"
	"io"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"

	"signet.dev/signet/specs"
)

// outputOptions is the kubectl-style --output flag shared by commands that
// print results: text, json or yaml (the JSON document as YAML), and for
// the commands that report spec findings (Annotations), github (GitHub
// Actions workflow commands) and sarif (SARIF 2.1.0 for code scanning).
type outputOptions struct {
	Format string
	// Annotations allows github and sarif.
	Annotations bool
}

// formats are the formats o accepts.
func (o *outputOptions) formats() []string {
	if o.Annotations {
		return []string{"text", "json", "yaml", "github", "sarif"}
	}
	return []string{"text", "json", "yaml"}
}

// AddFlags registers --output/-o.
func (o *outputOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVarP(&o.Format, "output", "o", "text", "output format: "+strings.Join(o.formats(), ", "))
}

// Validate refuses the formats o does not accept.
func (o *outputOptions) Validate() error {
	f := o.formats()
	if slices.Contains(f, o.Format) {
		return nil
	}
	return &usageError{fmt.Errorf("--output: %q is not %s or %s", o.Format, strings.Join(f[:len(f)-1], ", "), f[len(f)-1])}
}

// JSON reports whether a machine document (json or yaml) was asked for.
func (o *outputOptions) JSON() bool { return o.Format == "json" || o.Format == "yaml" }

// Write writes v as the machine document asked for: indented JSON, or the
// same document as YAML.
func (o *outputOptions) Write(w io.Writer, v any) error {
	if o.Format == "yaml" {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		y, err := yaml.JSONToYAML(b)
		if err != nil {
			return err
		}
		_, err = w.Write(y)
		return err
	}
	return writeJSON(w, v)
}

// writeJSON writes v as indented JSON followed by a newline.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// findingPath is the path of f's file from the directory the command runs
// in (where CI checked out the repository): repo joined with the file, the
// kustomize prefix dropped.
func findingPath(repo string, f specs.Finding) string {
	file := strings.TrimPrefix(f.File, specs.KustomizeFilePrefix)
	return path.Clean(path.Join(filepath.ToSlash(repo), file))
}

// ghEscape escapes a GitHub Actions workflow command's message; ghProp a
// property value (docs: "Workflow commands for GitHub Actions").
func ghEscape(s string) string {
	return strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A").Replace(s)
}

func ghProp(s string) string {
	return strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A", ":", "%3A", ",", "%2C").Replace(s)
}

// writeGitHub writes each finding as an ::error workflow command, which
// GitHub shows on the line of the pull request's diff.
func writeGitHub(w io.Writer, repo, title string, fs []specs.Finding) error {
	for _, f := range fs {
		props := []string{"file=" + ghProp(findingPath(repo, f))}
		if f.Line > 0 {
			props = append(props, fmt.Sprintf("line=%d", f.Line), fmt.Sprintf("col=%d", max(f.Column, 1)))
		}
		props = append(props, "title="+ghProp(title))
		msg := f.Message
		if f.Field != "" {
			msg = f.Field + ": " + msg
		}
		if _, err := fmt.Fprintf(w, "::error %s::%s\n", strings.Join(props, ","), ghEscape(msg)); err != nil {
			return err
		}
	}
	return nil
}

// sarifLog is the subset of SARIF 2.1.0 that code scanning reads.
type sarifLog struct {
	Schema  string     `json:"$schema"`
	Version string     `json:"version"`
	Runs    []sarifRun `json:"runs"`
}

type sarifRun struct {
	Tool    sarifTool     `json:"tool"`
	Results []sarifResult `json:"results"`
}

type sarifTool struct {
	Driver sarifDriver `json:"driver"`
}

type sarifDriver struct {
	Name           string      `json:"name"`
	Version        string      `json:"version,omitempty"`
	InformationURI string      `json:"informationUri"`
	Rules          []sarifRule `json:"rules"`
}

type sarifRule struct {
	ID               string       `json:"id"`
	ShortDescription sarifMessage `json:"shortDescription"`
}

type sarifMessage struct {
	Text string `json:"text"`
}

type sarifResult struct {
	RuleID    string          `json:"ruleId"`
	Level     string          `json:"level"`
	Message   sarifMessage    `json:"message"`
	Locations []sarifLocation `json:"locations"`
}

type sarifLocation struct {
	PhysicalLocation sarifPhysical `json:"physicalLocation"`
}

type sarifPhysical struct {
	ArtifactLocation sarifArtifact `json:"artifactLocation"`
	Region           *sarifRegion  `json:"region,omitempty"`
}

type sarifArtifact struct {
	URI string `json:"uri"`
}

type sarifRegion struct {
	StartLine   int `json:"startLine"`
	StartColumn int `json:"startColumn,omitempty"`
}

// sarifRuleID is the one rule every spec finding reports under: signet's
// findings are not a fixed catalogue (the message says what is wrong).
const sarifRuleID = "signet/spec"

// writeSARIF writes the findings as one SARIF 2.1.0 run of tool.
func writeSARIF(w io.Writer, repo, tool string, fs []specs.Finding) error {
	results := []sarifResult{}
	for _, f := range fs {
		msg := f.Message
		if f.Field != "" {
			msg = f.Field + ": " + msg
		}
		loc := sarifPhysical{ArtifactLocation: sarifArtifact{URI: findingPath(repo, f)}}
		if f.Line > 0 {
			loc.Region = &sarifRegion{StartLine: f.Line, StartColumn: max(f.Column, 1)}
		}
		results = append(results, sarifResult{RuleID: sarifRuleID, Level: "error", Message: sarifMessage{Text: msg}, Locations: []sarifLocation{{PhysicalLocation: loc}}})
	}
	return writeJSON(w, sarifLog{
		Schema:  "https://json.schemastore.org/sarif-2.1.0.json",
		Version: "2.1.0",
		Runs: []sarifRun{{
			Tool: sarifTool{Driver: sarifDriver{
				Name: tool, Version: version, InformationURI: "https://signet.dev",
				Rules: []sarifRule{{ID: sarifRuleID, ShortDescription: sarifMessage{Text: "A spec document breaks a rule of signet's specs (docs/design.md §2, §3)."}}},
			}},
			Results: results,
		}},
	})
}
