package reconciler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/crypto/ssh"

	"signet.dev/signet/evidence"
	"signet.dev/signet/signing"
)

// Secrets are the credentials read from the files and variables the
// configuration names. They are never logged (String hides them).
type Secrets struct {
	SpecToken, SpecPassword         string
	EvidenceToken, EvidencePassword string
	Passphrase                      []byte
	Webhooks                        WebhookSecrets
	// TriggerToken is the bearer token of POST /reconcile.
	TriggerToken string
}

// String never shows a secret.
func (Secrets) String() string { return "Secrets{redacted}" }

// LoadSecrets reads every secret the configuration points at, after
// filling its defaults (an evidence remote left unset is the spec remote,
// with the spec's credentials).
//
// When signet runs checks as other users of this machine (the local
// backend, as root), a secret file that group or others may read is
// refused, the way ssh refuses a private key: such a check could read it.
func LoadSecrets(cfg *Config) (*Secrets, error) {
	cfg.withDefaults()
	if cfg.runsChecksAsOthers() {
		if err := checkSecretModes(cfg); err != nil {
			return nil, err
		}
	}
	var s Secrets
	read := func(field, file string) (string, error) {
		if file == "" {
			return "", nil
		}
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("%s: %w", field, err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	var err error
	var errs []error
	s.SpecToken, err = read("spec.tokenFile", cfg.Spec.TokenFile)
	errs = append(errs, err)
	s.SpecPassword, err = read("spec.passwordFile", cfg.Spec.PasswordFile)
	errs = append(errs, err)
	s.EvidenceToken, err = read("evidence.tokenFile", cfg.Evidence.TokenFile)
	errs = append(errs, err)
	s.EvidencePassword, err = read("evidence.passwordFile", cfg.Evidence.PasswordFile)
	errs = append(errs, err)
	s.Webhooks.GitHub, err = read("webhook.githubSecretFile", cfg.Webhook.GitHubSecretFile)
	errs = append(errs, err)
	s.Webhooks.GitLab, err = read("webhook.gitlabTokenFile", cfg.Webhook.GitLabTokenFile)
	errs = append(errs, err)
	s.TriggerToken, err = read("triggerTokenFile", cfg.TriggerTokenFile)
	errs = append(errs, err)
	if err == nil && cfg.TriggerTokenFile != "" && s.TriggerToken == "" {
		errs = append(errs, fmt.Errorf("triggerTokenFile: %s is empty", cfg.TriggerTokenFile))
	}
	s.Passphrase, err = signing.ReadPassphrase(cfg.PassphraseFile, cfg.PassphraseEnv)
	errs = append(errs, err)
	return &s, errors.Join(errs...)
}

// runsChecksAsOthers reports whether checks run on this machine as users
// other than signet's own: the local backend, with signet as root.
func (c *Config) runsChecksAsOthers() bool {
	return c.Backends.Local.Enabled && os.Geteuid() == 0
}

// checkSecretModes refuses every secret file of cfg (after symlinks: a
// mounted Kubernetes Secret is a link to its data) that group or others
// may read or write.
func checkSecretModes(cfg *Config) error {
	var errs []error
	for _, f := range []struct{ field, file string }{
		{"signingKey", cfg.SigningKey},
		{"passphraseFile", cfg.PassphraseFile},
		{"spec.tokenFile", cfg.Spec.TokenFile},
		{"spec.passwordFile", cfg.Spec.PasswordFile},
		{"spec.sshKeyFile", cfg.Spec.SSHKeyFile},
		{"evidence.tokenFile", cfg.Evidence.TokenFile},
		{"evidence.passwordFile", cfg.Evidence.PasswordFile},
		{"evidence.sshKeyFile", cfg.Evidence.SSHKeyFile},
		{"webhook.githubSecretFile", cfg.Webhook.GitHubSecretFile},
		{"webhook.gitlabTokenFile", cfg.Webhook.GitLabTokenFile},
		{"triggerTokenFile", cfg.TriggerTokenFile},
	} {
		if f.file == "" {
			continue
		}
		fi, err := os.Stat(f.file)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", f.field, err))
			continue
		}
		if perm := fi.Mode().Perm(); perm&0o077 != 0 {
			errs = append(errs, fmt.Errorf("%s: %s has mode %04o, readable by group or others: checks run as other users of this machine and could read it; chmod 600 %s", f.field, f.file, perm, f.file))
		}
	}
	return errors.Join(errs...)
}

// checkEvidenceSigner refuses a signing key the trust policy does not list
// as an evidence signer: everything it signed would be refused by the
// audit. The error says which keys the policy expects.
func checkEvidenceSigner(cfg *Config, key *signing.PrivateKey, policy *signing.TrustPolicy) error {
	id := key.Public().KeyID()
	var want []string
	for _, k := range policy.EvidenceSigners() {
		if k.KeyID() == id {
			return nil
		}
		w := k.KeyID()[:16]
		if owner := policy.Owner(k.KeyID()); owner != "" {
			w += " (" + owner + ")"
		}
		want = append(want, w)
	}
	expects := "lists no evidence signer"
	if len(want) > 0 {
		expects = "expects " + strings.Join(want, " or ")
	}
	return fmt.Errorf("signingKey: key %s of %s is not an evidence signer of the trust policy %s, which %s: use that key, or add %s to its spec.evidenceSigners",
		id[:16], cfg.SigningKey, cfg.TrustPolicy, expects, id)
}

// Build wires a Reconciler from its configuration: the signing key, the
// spec source and evidence store under StateDir, and the registered
// backend families the configuration enables (RegisterFamily). o may set
// the observer, the clock, the Only filter and families of its own; the
// rest of it is filled here. Close the returned store when done.
func Build(ctx context.Context, cfg *Config, sec *Secrets, log *slog.Logger, reg prometheus.Registerer, o Options) (*Reconciler, *evidence.Store, error) {
	cfg.withDefaults()
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("stateDir: %w", err)
	}
	if err := os.Chmod(cfg.StateDir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("stateDir: %w", err)
	}
	key, err := signing.LoadPrivateKey(cfg.SigningKey, sec.Passphrase)
	if err != nil {
		return nil, nil, fmt.Errorf("signingKey: %w", err)
	}
	policy, err := signing.LoadTrustPolicy(cfg.TrustPolicy)
	if err != nil {
		return nil, nil, fmt.Errorf("trustPolicy: %w", err)
	}
	if err := checkEvidenceSigner(cfg, key, policy); err != nil {
		return nil, nil, err
	}
	signer, err := key.SSHSigner()
	if err != nil {
		return nil, nil, err
	}
	specAuth, err := sourceAuth(cfg.Spec, sec.SpecToken, sec.SpecPassword)
	if err != nil {
		return nil, nil, err
	}
	src, err := OpenGitSource(filepath.Join(cfg.StateDir, "spec.git"), cfg.Spec.URL, cfg.Spec.Branch, specAuth)
	if err != nil {
		return nil, nil, err
	}
	evAuth, err := sourceAuth(cfg.Evidence.SourceConfig, sec.EvidenceToken, sec.EvidencePassword)
	if err != nil {
		return nil, nil, err
	}
	keeper, err := buildTipKeeper(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	store, err := evidence.Open(ctx, evidence.StoreOptions{
		URL: absURL(cfg.Evidence.URL), Branch: cfg.Evidence.Branch, CommitSigner: signer,
		Auth:   evidence.Auth{Token: evAuth.Token, Username: evAuth.Username, Password: evAuth.Password, SSHSigner: evAuth.SSHSigner},
		Author: "signet reconciler (" + cfg.Cluster + ")", Email: "signet@" + cfg.Cluster,
		StateDir: filepath.Join(cfg.StateDir, "evidence"), Timeout: 2 * time.Minute, Logger: log,
		Keeper: keeper, Pinned: cfg.Evidence.PinnedTip, AcceptCurrentTip: o.AcceptCurrentTip, Now: o.Now,
	})
	if errors.Is(err, evidence.ErrUnanchored) {
		return nil, nil, unanchoredHint(cfg, err)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("evidence store: %w", err)
	}
	fams, err := buildFamilies(ctx, FamilyEnv{Config: cfg, EvidenceID: store.ID(), Logger: log, Registerer: reg, Now: o.Now})
	if err != nil {
		store.Close()
		return nil, nil, err
	}
	o.Families = append(o.Families, fams...)
	o.Logger, o.Store, o.Source, o.Key, o.Metrics = log, store, src, key, NewMetrics(reg)
	o.EvidenceAuth = evidence.Auth{Token: evAuth.Token, Username: evAuth.Username, Password: evAuth.Password, SSHSigner: evAuth.SSHSigner}
	r, err := New(cfg, o)
	if err != nil {
		store.Close()
		return nil, nil, err
	}
	return r, store, nil
}

func sourceAuth(c SourceConfig, token, password string) (SourceAuth, error) {
	a := SourceAuth{Token: token, Username: c.Username, Password: password}
	if c.SSHKeyFile != "" {
		b, err := os.ReadFile(c.SSHKeyFile)
		if err != nil {
			return a, fmt.Errorf("sshKeyFile: %w", err)
		}
		s, err := ssh.ParsePrivateKey(b)
		if err != nil {
			return a, fmt.Errorf("sshKeyFile %s: %w", c.SSHKeyFile, err)
		}
		a.SSHSigner = s
	}
	return a, nil
}
