package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"signet.dev/signet/signing"
)

func init() { addCommand(newKeygenCmd) }

// passphraseOptions read a key's passphrase from a file or an environment
// variable, never from a flag value.
type passphraseOptions struct {
	File string
	Env  string
}

// AddFlags registers --passphrase-file and --passphrase-env.
func (o *passphraseOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.File, "passphrase-file", "", "file holding the key's passphrase (one line)")
	fs.StringVar(&o.Env, "passphrase-env", "", "name of the environment variable holding the key's passphrase")
}

// Read returns the passphrase, or nil when none was asked for.
func (o *passphraseOptions) Read() ([]byte, error) {
	p, err := signing.ReadPassphrase(o.File, o.Env)
	if err != nil && o.File != "" && o.Env != "" {
		return nil, &usageError{err}
	}
	return p, err
}

// keygenOptions are the flags of signet keygen.
type keygenOptions struct {
	Out        string
	Algorithm  string
	Passphrase passphraseOptions
	Output     outputOptions
}

// AddFlags registers the command's flags.
func (o *keygenOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Out, "out", "", "write PREFIX.key and PREFIX.pub (required)")
	fs.StringVar(&o.Algorithm, "algorithm", signing.AlgorithmECDSAP256, "key algorithm: ecdsa-p256 or ed25519")
	o.Passphrase.AddFlags(fs)
	o.Output.AddFlags(fs)
}

// keygenJSON is the --output json form of signet keygen.
type keygenJSON struct {
	KeyID        string `json:"keyID"`
	Algorithm    string `json:"algorithm"`
	PrivateKey   string `json:"privateKey"`
	PublicKey    string `json:"publicKey"`
	SSHPublicKey string `json:"sshPublicKey"`
	Encrypted    bool   `json:"encrypted"`
}

func newKeygenCmd() *cobra.Command {
	o := &keygenOptions{}
	cmd := &cobra.Command{
		Use:   "keygen --out PREFIX",
		Short: "Generate a signing key pair",
		Long: `Generate a signing key pair: PREFIX.key (PKCS#8 PEM, mode 0600; with a passphrase,
sigstore's "ENCRYPTED SIGSTORE PRIVATE KEY" format that cosign also reads) and
PREFIX.pub (PKIX PEM), and print the key id (lowercase hex sha256 of the DER
public key) that a trust policy names it by. Existing files are never
overwritten. The passphrase is read from --passphrase-file or the variable
named by --passphrase-env, never from a flag value.

Exit status (signet help exit-codes): 0 written, 2 usage or I/O error.`,
		Example: `  signet keygen --out alice
  SIGNET_PASSPHRASE=… signet keygen --out reconciler --algorithm ed25519 --passphrase-env SIGNET_PASSPHRASE`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd) },
	}
	o.AddFlags(cmd.Flags())
	return cmd
}

func (o *keygenOptions) run(cmd *cobra.Command) error {
	if err := o.Output.Validate(); err != nil {
		return err
	}
	if o.Out == "" {
		return &usageError{errors.New("required: --out")}
	}
	switch o.Algorithm {
	case signing.AlgorithmECDSAP256, signing.AlgorithmEd25519:
	default:
		return &usageError{fmt.Errorf("--algorithm: %q is not ecdsa-p256 or ed25519", o.Algorithm)}
	}
	pass, err := o.Passphrase.Read()
	if err != nil {
		return err
	}
	k, err := signing.GenerateKey(o.Algorithm)
	if err != nil {
		return err
	}
	priv, err := k.MarshalPEM(pass)
	if err != nil {
		return err
	}
	keyPath, pubPath := o.Out+".key", o.Out+".pub"
	for _, p := range []string{keyPath, pubPath} {
		if _, err := os.Lstat(p); err == nil {
			return fmt.Errorf("keygen: %s already exists; refusing to overwrite it", p)
		}
	}
	if err := createFile(keyPath, priv, 0o600); err != nil {
		return fmt.Errorf("keygen: %w", err)
	}
	if err := createFile(pubPath, k.Public().MarshalPEM(), 0o644); err != nil {
		return fmt.Errorf("keygen: %w", err)
	}
	if o.Output.JSON() {
		return o.Output.Write(cmd.OutOrStdout(), keygenJSON{
			KeyID: k.KeyID(), Algorithm: k.Algorithm(), PrivateKey: keyPath, PublicKey: pubPath,
			SSHPublicKey: k.Public().SSHAuthorizedKey(), Encrypted: pass != nil,
		})
	}
	_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s\nwrote %s and %s (%s)\n", k.KeyID(), keyPath, pubPath, k.Algorithm())
	return err
}

// createFile writes b to a new file at path with perm; it never replaces an
// existing file (O_EXCL) and removes a partly written one.
func createFile(path string, b []byte, perm fs.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(path)
		return err
	}
	return nil
}
