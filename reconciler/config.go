package reconciler

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"signet.dev/signet/evidence"
	"signet.dev/signet/specs"
)

// KindConfig is the kind of the reconciler's configuration file.
const KindConfig = "ReconcilerConfig"

// MaxConfigBytes bounds the configuration file.
const MaxConfigBytes = 1 << 20

// Config is the reconciler's configuration, set by the platform owner and
// never read from the spec repository.
type Config struct {
	specs.TypeMeta `json:",inline"`
	// Cluster names this reconciler (a DNS label); run IDs, evidence paths
	// and the receipt chain are per cluster.
	Cluster string `json:"cluster"`
	// Spec is where the spec repository is read from.
	Spec SourceConfig `json:"spec"`
	// Evidence is where evidence is written; URL defaults to Spec.URL.
	Evidence EvidenceConfig `json:"evidence"`
	// TrustPolicy is the path of the trust policy file.
	TrustPolicy string `json:"trustPolicy"`
	// SigningKey is the path of the reconciler's private key (PEM). Its
	// passphrase, if any, comes from PassphraseFile or PassphraseEnv, never
	// both, read by signing.ReadPassphrase (the rules signet keygen uses).
	SigningKey string `json:"signingKey"`
	// PassphraseFile is a file holding the signing key's passphrase (one
	// line); not with PassphraseEnv.
	PassphraseFile string `json:"passphraseFile,omitempty"`
	// PassphraseEnv names the environment variable holding the signing
	// key's passphrase; not with PassphraseFile.
	PassphraseEnv string `json:"passphraseEnv,omitempty"`
	// StateDir holds the local Git mirrors and the last pushed evidence tip.
	StateDir string `json:"stateDir"`
	// Interval between polls of the spec repository ("60s").
	Interval specs.Seconds `json:"interval,omitempty"`
	// Listen is the address of /healthz, /readyz, /status and POST
	// /reconcile (default DefaultListen, loopback).
	Listen string `json:"listen,omitempty"`
	// ProbeListen, when set, is the address of /healthz and /readyz only:
	// the kubelet's probes reach the pod IP, not loopback.
	ProbeListen string `json:"probeListen,omitempty"`
	// MetricsListen, when set, is the address of /metrics only; unset, no
	// metrics are served.
	MetricsListen string `json:"metricsListen,omitempty"`
	// TriggerTokenFile holds the bearer token POST /reconcile (and
	// `signet reconcile --now`) must present; unset, the trigger answers
	// 404.
	TriggerTokenFile string `json:"triggerTokenFile,omitempty"`
	// Webhook configures push-event receivers.
	Webhook WebhookConfig `json:"webhook,omitempty"`
	// Backends enables backends; none is on by default.
	Backends BackendsConfig `json:"backends"`
	// Kubernetes is how the Kubernetes backends reach the cluster.
	Kubernetes KubernetesConfig `json:"kubernetes,omitempty"`
	// Ceiling bounds what any workload may ask for.
	Ceiling Ceiling `json:"ceiling"`
	// Report, when its dir is set, is the HTML report (signet report)
	// the daemon keeps of the evidence branch and serves on listen.
	Report ReportConfig `json:"report,omitempty"`
	// Admission is how one reconcile pass admits requests.
	Admission AdmissionConfig `json:"admission,omitzero"`
}

// DefaultAdmissionConcurrency is admission.concurrency when unset.
const DefaultAdmissionConcurrency = 8

// MaxAdmissionConcurrency bounds admission.concurrency.
const MaxAdmissionConcurrency = 64

// AdmissionConfig bounds the admissions of one reconcile pass.
type AdmissionConfig struct {
	// Concurrency is how many requests one pass admits at once (default
	// 8, at most 64; 1 admits them one after another in spec order).
	// Requests that want a node in common are never both admitted: the
	// first to take its whole group wins and the other waits (NodesBusy)
	// for a later pass.
	Concurrency int `json:"concurrency,omitempty"`
}

// admissionConcurrency is admission.concurrency, defaulted.
func (c *Config) admissionConcurrency() int {
	if c.Admission.Concurrency == 0 {
		return DefaultAdmissionConcurrency
	}
	return c.Admission.Concurrency
}

// ReportConfig is the report the daemon writes and serves; off when Dir
// is empty (the default).
type ReportConfig struct {
	// Dir is an absolute directory the daemon owns: after every pass that
	// finds the evidence branch's tip moved, it rebuilds there the report
	// `signet report` writes (the same code, the trust policy of the
	// pass) and serves its files read-only at GET /report/ on listen:
	// the entry and the regular files of a generation only (never the
	// lock file or another dot-file), no directory listing, nothing
	// outside Dir; 503 with a Retry-After until the first report is
	// written.
	Dir string `json:"dir,omitempty"`
}

// SourceConfig locates a Git repository.
type SourceConfig struct {
	// URL is the repository: https://, http://, ssh://, git@host:path, a
	// file:// URL or a local path. For evidence, it defaults to spec.url
	// (with spec's credentials).
	URL string `json:"url"`
	// Branch is the branch read (spec, default "main") or written
	// (evidence, default "signet/evidence").
	Branch string `json:"branch,omitempty"`
	// Path is the spec path inside the repository (default "."): a
	// directory of YAML files or one with a kustomization.
	Path string `json:"path,omitempty"`
	// TokenFile holds an HTTP(S) token (sent as the password of basic
	// auth, GitHub/GitLab style).
	TokenFile string `json:"tokenFile,omitempty"`
	// Username is the HTTP(S) basic-auth user name for PasswordFile.
	Username string `json:"username,omitempty"`
	// PasswordFile holds the HTTP(S) basic-auth password.
	PasswordFile string `json:"passwordFile,omitempty"`
	// SSHKeyFile holds an SSH private key for ssh:// and git@ URLs.
	SSHKeyFile string `json:"sshKeyFile,omitempty"`
}

// EvidenceConfig locates the evidence branch and says what holds its
// tip against a rollback besides StateDir.
type EvidenceConfig struct {
	SourceConfig `json:",inline"`
	// PinnedTip is a commit of the branch the operator audited (40 hex,
	// as `signet audit` prints it at the end of a clean audit): the branch
	// must descend from it. With no tip remembered (StateDir, TipConfigMap)
	// and none pinned, the reconciler refuses an existing branch unless it
	// is started once with --accept-current-tip.
	PinnedTip string `json:"pinnedTip,omitempty"`
	// TipConfigMap, when set, keeps the last tip the reconciler wrote or
	// saw in that ConfigMap (it must exist; it is updated by
	// resourceVersion compare-and-swap only), so that a restart that
	// loses StateDir (an emptyDir) keeps the rollback protection.
	TipConfigMap *ObjectRef `json:"tipConfigMap,omitempty"`
}

// ObjectRef names one namespaced Kubernetes object.
type ObjectRef struct {
	// Namespace of the object.
	Namespace string `json:"namespace"`
	// Name of the object.
	Name string `json:"name"`
}

// WebhookConfig is the listener and the secrets of the push-event
// receivers. A receiver is served only with its secret; Listen is required
// with either secret, and refused without one.
type WebhookConfig struct {
	// Listen is the address of the receivers (POST /hooks/github,
	// /hooks/gitlab), host:port.
	Listen string `json:"listen,omitempty"`
	// GitHubSecretFile holds the GitHub webhook secret (HMAC-SHA256 of the
	// body); set, the GitHub receiver is served.
	GitHubSecretFile string `json:"githubSecretFile,omitempty"`
	// GitLabTokenFile holds the GitLab webhook token (X-Gitlab-Token); set,
	// the GitLab receiver is served.
	GitLabTokenFile string `json:"gitlabTokenFile,omitempty"`
}

// BackendsConfig enables backends.
type BackendsConfig struct {
	// Local runs checks as processes on this machine (one participant).
	Local LocalConfig `json:"local"`
	// Pod runs each participant of a check as a Pod on its node (needs
	// kubernetes).
	Pod KubeBackendConfig `json:"pod,omitempty"`
	// MPIJob runs a check as one Kubeflow MPIJob over its participants
	// (needs kubernetes and the MPI Operator).
	MPIJob KubeBackendConfig `json:"mpijob,omitempty"`
}

// KubeBackendConfig enables one Kubernetes backend.
type KubeBackendConfig struct {
	// Enabled turns the backend on.
	Enabled bool `json:"enabled"`
}

// KubernetesConfig is how the reconciler reaches its cluster, used when the
// pod or mpijob backend is enabled.
type KubernetesConfig struct {
	// Kubeconfig is a kubeconfig file; empty means in-cluster (the pod's
	// projected service-account token).
	Kubeconfig string `json:"kubeconfig,omitempty"`
	// SignetImage is the digest-pinned image whose /signet binary the
	// checks' init container copies in (`repo@sha256:…`).
	SignetImage string `json:"signetImage,omitempty"`
	// CertifyTTL, when set, labels nodes that passed with their
	// certification (profile, run, expiry = pass time + CertifyTTL).
	CertifyTTL specs.Seconds `json:"certifyTTL,omitempty"`
	// LeaderElection makes replicas of the daemon elect one leader through
	// a coordination.k8s.io Lease before acting.
	LeaderElection *LeaderElectionConfig `json:"leaderElection,omitempty"`
	// ReserveTaintOnly reserves nodes with signet's NoSchedule taint
	// alone, without cordoning them: set it where checks go through a
	// Kueue queue with topology-aware scheduling, which leaves cordoned
	// nodes out of every topology domain (such a check would never be
	// admitted on its reserved participants). Pods that tolerate every
	// taint may then still be scheduled onto a reserved node.
	ReserveTaintOnly bool `json:"reserveTaintOnly,omitempty"`
	// APIQPS is the most requests a second the reconciler's client sends
	// the API server, sustained (DefaultKubeAPIQPS when 0, at most
	// MaxKubeAPIQPS). On a machine with cores enough, runs a second are
	// APIQPS over the requests a run makes (docs/performance.md): raise it
	// where the control plane can take it, as with
	// kube-controller-manager's and flux's --kube-api-qps.
	APIQPS int `json:"apiQPS,omitempty"`
	// APIBurst is how many requests the client may send at once above
	// APIQPS (twice APIQPS when 0; --kube-api-burst).
	APIBurst int `json:"apiBurst,omitempty"`
}

// DefaultKubeAPIQPS is kubernetes.apiQPS when unset: ten times client-go's
// default of 5, so that concurrent runs are not throttled by the client
// on a control plane of ordinary size.
const DefaultKubeAPIQPS = 50

// MaxKubeAPIQPS bounds kubernetes.apiQPS (and apiBurst at twice it): a
// typo of a few digits must not let one reconciler flood the API server.
const MaxKubeAPIQPS = 5000

// RateLimit is the client's rate limit: kubernetes.apiQPS and apiBurst
// with their defaults applied.
func (k KubernetesConfig) RateLimit() (qps float32, burst int) {
	q := k.APIQPS
	if q == 0 {
		q = DefaultKubeAPIQPS
	}
	burst = k.APIBurst
	if burst == 0 {
		burst = 2 * q
	}
	return float32(q), burst
}

// LeaderElectionConfig names the Lease the daemon's replicas contend for.
type LeaderElectionConfig struct {
	// Namespace of the Lease.
	Namespace string `json:"namespace"`
	// Name of the Lease.
	Name string `json:"name"`
}

// kubeEnabled reports whether a Kubernetes backend is enabled.
func (b BackendsConfig) kubeEnabled() bool { return b.Pod.Enabled || b.MPIJob.Enabled }

// DefaultLocalUIDRange is the range transient check uids come from when
// the configuration names none: above the 16-bit range, below systemd's
// DynamicUser range (61184–65519) and the subordinate ids useradd hands
// out (100000 and up).
const DefaultLocalUIDRange = "65536-66559"

// LocalConfig enables the local backend. When signet runs as root, each
// check runs as a transient uid of its own from UIDRange, never as root.
type LocalConfig struct {
	// Enabled turns the local backend on.
	Enabled bool `json:"enabled"`
	// UIDRange is "FIRST-LAST": the uids (and gids of the same numbers)
	// checks run as when signet runs as root, none of them an account or
	// group of the machine (DefaultLocalUIDRange when empty).
	UIDRange string `json:"uidRange,omitempty"`
	// Grace is the time between TERM and KILL at a deadline or cancel.
	Grace specs.Seconds `json:"grace,omitempty"`
	// WorkRoot is where checks get their temporary directories; it must
	// be used by this reconciler only (start-up ends and removes what is
	// left there). Default: $TMPDIR/signet-<cluster>.
	WorkRoot string `json:"workRoot,omitempty"`
}

// Ceiling is the most any check's workload may ask for (DESIGN §2). A
// profile may ask for less, never more; approvals cannot widen it.
type Ceiling struct {
	// Namespace is where checks' pods and MPIJobs are created (default
	// "signet-checks").
	Namespace string `json:"namespace,omitempty"`
	// AllowPrivileged lets a workload ask for a privileged container.
	AllowPrivileged bool `json:"allowPrivileged,omitempty"`
	// Capabilities are the Linux capabilities a workload may add.
	Capabilities []string `json:"capabilities,omitempty"`
	// HostPaths are the host directories a workload may mount (read-only),
	// each with everything under it.
	HostPaths []string `json:"hostPaths,omitempty"`
	// HostNetwork lets a workload use the node's network namespace.
	HostNetwork bool `json:"hostNetwork,omitempty"`
	// Registries are the image repositories (prefixes) a workload's
	// digest-pinned image may come from.
	Registries []string `json:"registries,omitempty"`
	// MaxGPUs bounds the GPUs one participant of a check may ask for (0:
	// no bound beyond the node's).
	MaxGPUs int `json:"maxGPUs,omitempty"`
}

// LoadConfig reads and validates the configuration file at file.
func LoadConfig(file string) (*Config, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	if len(b) > MaxConfigBytes {
		return nil, fmt.Errorf("%s: %d bytes is over the %d byte bound", file, len(b), MaxConfigBytes)
	}
	var c Config
	if fs := specs.DecodeStrict(file, b, &c); fs != nil {
		return nil, fs
	}
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return &c, nil
}

func (c *Config) validate() error {
	var errs []error
	if c.APIVersion != specs.APIVersion || c.Kind != KindConfig {
		errs = append(errs, fmt.Errorf("apiVersion/kind: want %s %s, got %q %q", specs.APIVersion, KindConfig, c.APIVersion, c.Kind))
	}
	if !isDNSLabel(c.Cluster) {
		errs = append(errs, fmt.Errorf("cluster: %q is not a DNS label", c.Cluster))
	}
	if c.Spec.URL == "" {
		errs = append(errs, errors.New("spec.url: required"))
	}
	if c.TrustPolicy == "" {
		errs = append(errs, errors.New("trustPolicy: required"))
	}
	if c.SigningKey == "" {
		errs = append(errs, errors.New("signingKey: required"))
	}
	if c.StateDir == "" {
		errs = append(errs, errors.New("stateDir: required"))
	}
	if c.Evidence.PinnedTip != "" && !evidence.IsCommitHash(c.Evidence.PinnedTip) {
		errs = append(errs, fmt.Errorf("evidence.pinnedTip: %q is not a commit hash (40 lowercase hex, as signet audit prints it)", c.Evidence.PinnedTip))
	}
	if r := c.Evidence.TipConfigMap; r != nil && (!isDNSLabel(r.Namespace) || !isDNSSubdomain(r.Name)) {
		errs = append(errs, fmt.Errorf("evidence.tipConfigMap: namespace %q and name %q must be set (a DNS label and a DNS subdomain)", r.Namespace, r.Name))
	}
	if d := c.Report.Dir; d != "" && (!filepath.IsAbs(d) || filepath.Clean(d) != d || d == "/") {
		errs = append(errs, fmt.Errorf("report.dir: %q must be an absolute, clean path other than /", d))
	}
	if c.Spec.Path != "" && (path.IsAbs(c.Spec.Path) || strings.Contains(c.Spec.Path, "..")) {
		errs = append(errs, fmt.Errorf("spec.path: %q must be relative and stay in the repository", c.Spec.Path))
	}
	if c.Backends.kubeEnabled() {
		if _, err := specs.ParsePinnedImage(c.Kubernetes.SignetImage); err != nil {
			errs = append(errs, fmt.Errorf("kubernetes.signetImage: %w", err))
		}
		if c.Ceiling.Namespace != "" && !isDNSLabel(c.Ceiling.Namespace) {
			errs = append(errs, fmt.Errorf("ceiling.namespace: %q is not a DNS label", c.Ceiling.Namespace))
		}
		if le := c.Kubernetes.LeaderElection; le != nil && (!isDNSLabel(le.Namespace) || le.Name == "") {
			errs = append(errs, fmt.Errorf("kubernetes.leaderElection: namespace %q and name %q must be set (namespace a DNS label)", le.Namespace, le.Name))
		}
	}
	if q := c.Kubernetes.APIQPS; q < 0 || q > MaxKubeAPIQPS {
		errs = append(errs, fmt.Errorf("kubernetes.apiQPS: %d is not between 1 and %d requests a second (0 or unset: %d)", q, MaxKubeAPIQPS, DefaultKubeAPIQPS))
	}
	if b := c.Kubernetes.APIBurst; b < 0 || b > 2*MaxKubeAPIQPS {
		errs = append(errs, fmt.Errorf("kubernetes.apiBurst: %d is not between 1 and %d requests (0 or unset: twice apiQPS)", b, 2*MaxKubeAPIQPS))
	}
	if n := c.Admission.Concurrency; n < 0 || n > MaxAdmissionConcurrency {
		errs = append(errs, fmt.Errorf("admission.concurrency: %d is not between 1 and %d (0 or unset: %d)", n, MaxAdmissionConcurrency, DefaultAdmissionConcurrency))
	}
	errs = append(errs, c.validateListeners()...)
	for i, hp := range c.Ceiling.HostPaths {
		if !path.IsAbs(hp) || path.Clean(hp) != hp {
			errs = append(errs, fmt.Errorf("ceiling.hostPaths[%d]: %q is not an absolute clean path", i, hp))
		}
	}
	return errors.Join(errs...)
}

// validateListeners checks every listen address and that no two
// listeners share one.
func (c *Config) validateListeners() []error {
	var errs []error
	seen := map[string]string{}
	for _, l := range []struct{ field, addr string }{
		{"listen", c.Listen}, {"probeListen", c.ProbeListen}, {"metricsListen", c.MetricsListen}, {"webhook.listen", c.Webhook.Listen},
	} {
		if l.addr == "" {
			continue
		}
		if err := checkListenAddr(l.addr); err != nil {
			errs = append(errs, fmt.Errorf("%s: %q %w", l.field, l.addr, err))
			continue
		}
		if other, ok := seen[l.addr]; ok && !strings.HasSuffix(l.addr, ":0") {
			errs = append(errs, fmt.Errorf("%s: %q is also %s", l.field, l.addr, other))
		}
		seen[l.addr] = l.field
	}
	hooks := c.Webhook.GitHubSecretFile != "" || c.Webhook.GitLabTokenFile != ""
	switch {
	case hooks && c.Webhook.Listen == "":
		errs = append(errs, errors.New(`webhook.listen: "" but a receiver is configured (webhook.githubSecretFile or webhook.gitlabTokenFile): set the address its requests arrive on`))
	case !hooks && c.Webhook.Listen != "":
		errs = append(errs, fmt.Errorf("webhook.listen: %q serves no receiver: set webhook.githubSecretFile or webhook.gitlabTokenFile", c.Webhook.Listen))
	}
	return errs
}

// checkListenAddr accepts "host:port" with a numeric port and a host that
// is empty, an IP address or "localhost".
func checkListenAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return errors.New(`is not "host:port"`)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("has port %q, not a number from 0 to 65535", port)
	}
	if host != "" && host != "localhost" && net.ParseIP(host) == nil {
		return fmt.Errorf("has host %q, not an IP address or localhost", host)
	}
	return nil
}

// withDefaults fills the documented defaults.
func (c *Config) withDefaults() {
	if c.Spec.Branch == "" {
		c.Spec.Branch = "main"
	}
	if c.Spec.Path == "" {
		c.Spec.Path = "."
	}
	if c.Evidence.URL == "" {
		c.Evidence.SourceConfig = SourceConfig{URL: c.Spec.URL, TokenFile: c.Spec.TokenFile, Username: c.Spec.Username, PasswordFile: c.Spec.PasswordFile, SSHKeyFile: c.Spec.SSHKeyFile}
	}
	if c.Evidence.Branch == "" {
		c.Evidence.Branch = "signet/evidence"
	}
	if c.Interval == 0 {
		c.Interval = 60
	}
	if c.Backends.Local.UIDRange == "" {
		c.Backends.Local.UIDRange = DefaultLocalUIDRange
	}
	if c.Ceiling.Namespace == "" {
		c.Ceiling.Namespace = "signet-checks"
	}
	if c.Backends.Local.Grace == 0 {
		c.Backends.Local.Grace = 5
	}
}

// interval is the poll interval.
func (c *Config) interval() time.Duration { return time.Duration(c.Interval) * time.Second }

func isDNSLabel(s string) bool {
	if len(s) == 0 || len(s) > 63 {
		return false
	}
	for i, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
		case r == '-' && i > 0 && i < len(s)-1:
		default:
			return false
		}
	}
	return true
}

// isDNSSubdomain reports whether s is a Kubernetes object name (RFC 1123
// subdomain): DNS labels joined by dots, at most 253 characters.
func isDNSSubdomain(s string) bool {
	if len(s) == 0 || len(s) > 253 {
		return false
	}
	for _, l := range strings.Split(s, ".") {
		if !isDNSLabel(l) {
			return false
		}
	}
	return true
}
