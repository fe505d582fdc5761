package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/pflag"
)

// outputOptions is the kubectl-style --output flag shared by commands that
// print results.
type outputOptions struct {
	Format string
}

// AddFlags registers --output/-o.
func (o *outputOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVarP(&o.Format, "output", "o", "text", "output format: text or json")
}

// Validate refuses formats other than text and json.
func (o *outputOptions) Validate() error {
	switch o.Format {
	case "text", "json":
		return nil
	}
	return &usageError{fmt.Errorf("--output: %q is not text or json", o.Format)}
}

// JSON reports whether machine output was asked for.
func (o *outputOptions) JSON() bool { return o.Format == "json" }

// writeJSON writes v as indented JSON followed by a newline.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
