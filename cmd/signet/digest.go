package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"signet.dev/signet/specs"
)

func init() { addCommand(newDigestCmd) }

func newDigestCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "digest",
		Short:   "Compute digests signet pins",
		Example: "  signet digest bundle examples/spec-repo/bundles/local-smoke",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return &usageError{fmt.Errorf("digest: name what to digest, e.g. signet digest bundle DIR")}
		},
	}
	cmd.AddCommand(newDigestBundleCmd())
	return cmd
}

// digestBundleOptions are the flags of signet digest bundle.
type digestBundleOptions struct {
	Output outputOptions
}

// AddFlags registers the command's flags.
func (o *digestBundleOptions) AddFlags(fs *pflag.FlagSet) { o.Output.AddFlags(fs) }

// bundleDigestJSON is the --output json form of signet digest bundle.
type bundleDigestJSON struct {
	Path   string             `json:"path"`
	Digest specs.Digest       `json:"digest"`
	Files  []specs.BundleFile `json:"files"`
}

func newDigestBundleCmd() *cobra.Command {
	o := &digestBundleOptions{}
	cmd := &cobra.Command{
		Use:   "bundle DIR",
		Short: "Print the aggregate digest of a script bundle",
		Long: `Print the aggregate digest of the script bundle in DIR, the value a profile pins
in spec.bundle.digest. It is exactly what coreutils computes with

  cd DIR && find . -type f -printf '%P\n' | LC_ALL=C sort | xargs -d '\n' sha256sum | sha256sum

(prefixed with "sha256:"). Symlinks, devices, fifos, names sha256sum would
escape (backslash, CR, LF) or take for an option (a leading "-") and an
empty bundle are refused. --output json adds the per-file listing.

Exit status (signet help exit-codes): 0 printed, 1 the bundle is refused, 2 usage
or I/O error.`,
		Example: "  signet digest bundle examples/spec-repo/bundles/local-smoke",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.Output.Validate(); err != nil {
				return err
			}
			dir := args[0]
			if _, err := os.Stat(dir); err != nil {
				return fmt.Errorf("digest bundle: %w", err)
			}
			d, files, err := specs.BundleDigest(os.DirFS(dir), ".")
			var be *specs.BundleError
			if errors.As(err, &be) {
				return exitCode(exitFindings, fmt.Errorf("digest bundle: %s: %w", filepath.Join(dir, filepath.FromSlash(be.Path)), be.Err))
			}
			if err != nil {
				return fmt.Errorf("digest bundle %s: %w", dir, err)
			}
			if o.Output.JSON() {
				return o.Output.Write(cmd.OutOrStdout(), bundleDigestJSON{Path: dir, Digest: d, Files: files})
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), d)
			return err
		},
	}
	o.AddFlags(cmd.Flags())
	return cmd
}
