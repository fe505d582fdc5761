package kubetest

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// KueueVersion is the release of sigs.k8s.io/kueue that StartKueue runs:
// bin/kueue built by `make kueue-tools` (hack/kueue-tools.sh pins the same
// version) and the CRDs and webhook manifests of that module, read from the
// Go module cache.
const KueueVersion = "v0.17.0"

const kueueModule = "sigs.k8s.io/kueue"

// The Kueue API this harness writes (v1beta2, the version its CRDs store).
var (
	KueueResourceFlavorGVR = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "resourceflavors"}
	KueueTopologyGVR       = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "topologies"}
	KueueClusterQueueGVR   = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "clusterqueues"}
	KueueLocalQueueGVR     = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "localqueues"}
	KueueWorkloadGVR       = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "workloads"}
	KueuePriorityClassGVR  = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "workloadpriorityclasses"}
)

// KueueOptions configures StartKueue.
type KueueOptions struct {
	// Frameworks are Kueue's integrations.frameworks; nil means batch/job,
	// pod and kubeflow.org/mpijob. The kubeflow.org/mpijob webhooks are
	// registered only when the MPIJob CRD is installed before StartKueue
	// (Kueue serves no MPIJob webhook without it, and a registered hook
	// with failurePolicy Fail would refuse every MPIJob).
	Frameworks []string
}

// Kueue is a running Kueue controller manager (bin/kueue) of an Env.
type Kueue struct {
	e *Env
	p *proc
	// WebhookURL is https://127.0.0.1:PORT, where Kueue serves its webhooks.
	WebhookURL string
	// StartupTime is how long StartKueue took, CRDs to registered webhooks.
	StartupTime time.Duration
}

// kueueWebhooks are the hooks of config/components/webhook/manifests.yaml
// StartKueue registers: the pod, batch/job and MPIJob integrations' and
// Kueue's own API's. The others belong to integrations not enabled here.
var kueueWebhooks = map[string]bool{
	"mpod.kb.io": true, "vpod.kb.io": true,
	"mjob.kb.io": true, "vjob.kb.io": true,
	"mmpijob.kb.io": true, "vmpijob.kb.io": true,
	"mclusterqueue.kb.io": true, "vclusterqueue.kb.io": true, "vcohort.kb.io": true,
	"mresourceflavor.kb.io": true, "vresourceflavor.kb.io": true,
	"mworkload.kb.io": true, "vworkload.kb.io": true,
}

// kueueExcludedNamespaces is the namespaceSelector Kueue's kustomization
// patches onto its pod hooks (config/components/webhook/kustomization.yaml).
var kueueExcludedNamespaces = []string{"kube-system", "kueue-system"}

// StartKueue starts bin/kueue (KueueVersion) against e as its own process
// on free loopback ports, and returns once its webhooks answer. In order:
// Kueue's CRDs (config/components/crd/bases of the module) are applied
// server-side; a CA and a serving certificate for IP 127.0.0.1 are made in
// the test's directory; Kueue starts with a v1beta2 Configuration (webhook
// and health probe on loopback, metrics off, leader election off, internal
// certificate management off, the integrations of o); once its /readyz
// answers, its webhooks are registered by URL (https://127.0.0.1:PORT/PATH
// with the CA bundle) with the manifest's namespaceSelector patch; a dry-run
// pod proves the API server calls them.
//
// One file outside the test's directories is unavoidable: with internal
// certificate management off, Kueue v0.17.0 reads a metrics serving
// certificate from the hard-coded /etc/kueue/metrics/certs/tls.{crt,key}
// at start-up, even with metrics off (cmd/kueue/main.go), and exits when it
// is missing. StartKueue writes a throwaway self-signed pair there when
// none exists, under an exclusive lock that serialises Kueue start-ups of
// every test process of this machine, and removes what it wrote (files and
// the directories it made) once both of Kueue's certificate watchers
// (webhook and metrics) log that they watch their files: removed earlier,
// the metrics watcher gives up after 10 s and Kueue exits. An existing
// pair is left alone. Writing there needs root: the test
// fails saying so otherwise.
//
// In t.Cleanup, in this order: the webhook configurations are deleted
// (their failurePolicy is Fail: with Kueue gone every pod create would
// fail), then Kueue is stopped by its PID (TERM, grace, KILL).
func (e *Env) StartKueue(t testing.TB, o KueueOptions) *Kueue {
	t.Helper()
	begin := time.Now()
	ctx := context.Background()
	bin := filepath.Join(ModuleRoot(), "bin", "kueue")
	if fi, err := os.Stat(bin); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		t.Fatalf("kubetest: %s not found: run make kueue-tools", bin)
	}
	if b, err := os.ReadFile(filepath.Join(ModuleRoot(), "bin", ".kueue-version")); err != nil || strings.TrimSpace(string(b)) != KueueVersion {
		t.Fatalf("kubetest: bin/kueue is not %s (bin/.kueue-version: %q, %v): run make kueue-tools", KueueVersion, bytes.TrimSpace(b), err)
	}
	modDir := kueueModuleDir(t)
	e.applyKueueCRDs(ctx, t, modDir)
	if _, err := e.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kueue-system"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("kubetest: namespace kueue-system: %v", err)
	}

	dir := filepath.Join(e.Dir, fmt.Sprintf("kueue-%d", time.Now().UnixNano()))
	certDir := filepath.Join(dir, "webhook-certs")
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	caPEM := writeServingCert(t, certDir)
	frameworks := o.Frameworks
	if frameworks == nil {
		frameworks = []string{"batch/job", "pod", "kubeflow.org/mpijob"}
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	writeFile(t, kubeconfig, e.Kubeconfig(AdminUser), 0o600)

	unlock := lockMetricsCerts(t)
	cleanupCerts := writeMetricsCerts(t)
	var k *Kueue
	var health, webhookPort int
	for attempt := 0; ; attempt++ {
		health, webhookPort = freePort(t), freePort(t)
		cfg := kueueConfig(health, webhookPort, certDir, frameworks)
		cfgPath := filepath.Join(dir, fmt.Sprintf("config-%d.yaml", attempt))
		writeFile(t, cfgPath, cfg, 0o600)
		p := e.startProc(fmt.Sprintf("kueue-%d", attempt), bin,
			"--config", cfgPath,
			"--kubeconfig", kubeconfig,
			// The visibility server would bind :8082 on every interface.
			"--feature-gates=VisibilityOnDemand=false",
		)
		// Owned by this function's cleanup, not Env.stop: the webhooks must
		// go before Kueue does.
		e.procs = slices.DeleteFunc(e.procs, func(q *proc) bool { return q == p })
		err := waitFor(p, 120*time.Second, func() error {
			if err := httpOK(http.DefaultClient, "http://127.0.0.1:"+strconv.Itoa(health)+"/readyz", ""); err != nil {
				return err
			}
			// Once both certificate watchers (the webhook server's and the
			// metrics one) have added their file watches (they log this
			// line after), the files in /etc/kueue may go; removed before,
			// the metrics watcher gives up after 10 s and Kueue exits.
			if n := strings.Count(tailFile(p.log, 1<<22), "Starting certificate poll+watcher"); n < 2 {
				return fmt.Errorf("%d of 2 certificate watchers started", n)
			}
			return nil
		})
		if err == nil {
			k = &Kueue{e: e, p: p, WebhookURL: "https://127.0.0.1:" + strconv.Itoa(webhookPort)}
			break
		}
		inUse := strings.Contains(tailFile(p.log, 1<<16), "address already in use")
		t.Logf("kubetest: ---- tail of %s (%s) ----\n%s", p.name, p.log, tailFile(p.log, 4000))
		e.stopProc(p)
		if inUse && attempt < 2 {
			continue
		}
		cleanupCerts()
		unlock()
		t.Fatalf("kubetest: kueue not ready: %v", err)
	}
	cleanupCerts()
	unlock()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kubetest: ---- tail of %s (%s) ----\n%s", k.p.name, k.p.log, tailFile(k.p.log, 8000))
		}
		e.stopProc(k.p)
	})

	withMPI := false
	if _, err := e.Dynamic().Resource(crdGVR).Get(ctx, "mpijobs.kubeflow.org", metav1.GetOptions{}); err == nil {
		withMPI = true
	}
	k.registerWebhooks(ctx, t, modDir, caPEM, withMPI)
	k.StartupTime = time.Since(begin)
	t.Logf("kubetest: kueue %s ready in %v (webhooks at %s, log %s)", KueueVersion, k.StartupTime.Round(time.Millisecond), k.WebhookURL, k.p.log)
	return k
}

// InstallKueueCRDs applies Kueue's CRDs (KueueVersion's
// config/components/crd/bases, from the Go module cache) server-side and
// returns once each is Established and LocalQueues are served. It installs
// only the API: no controller and no webhook acts on Kueue's objects
// unless StartKueue runs Kueue.
func (e *Env) InstallKueueCRDs(ctx context.Context) {
	e.t.Helper()
	e.applyKueueCRDs(ctx, e.t, kueueModuleDir(e.t))
	deadline := time.Now().Add(settleWait)
	for {
		_, err := e.Dynamic().Resource(KueueLocalQueueGVR).Namespace("default").List(ctx, metav1.ListOptions{})
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("kubetest: Kueue's localqueues not served: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// LogTail returns the last n bytes of Kueue's log.
func (k *Kueue) LogTail(n int) string { return tailFile(k.p.log, n) }

func kueueConfig(health, webhookPort int, certDir string, frameworks []string) []byte {
	var fw strings.Builder
	for _, f := range frameworks {
		fmt.Fprintf(&fw, "  - %s\n", f)
	}
	return fmt.Appendf(nil, `apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
health:
  healthProbeBindAddress: 127.0.0.1:%d
metrics:
  bindAddress: "0"
webhook:
  host: 127.0.0.1
  port: %d
  certDir: %s
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: false
integrations:
  frameworks:
%s`, health, webhookPort, certDir, fw.String())
}

// kueueModuleDir is the module cache directory of sigs.k8s.io/kueue at
// KueueVersion (`go mod download -json`: offline once make kueue-tools has
// run). The project's go.mod does not require Kueue.
func kueueModuleDir(t testing.TB) string {
	t.Helper()
	kueueModOnce.Do(func() {
		cmd := exec.Command("go", "mod", "download", "-json", kueueModule+"@"+KueueVersion)
		cmd.Dir = ModuleRoot()
		out, err := cmd.Output()
		var info struct{ Dir, Error string }
		if jerr := json.Unmarshal(out, &info); err != nil || jerr != nil || info.Dir == "" {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				err = fmt.Errorf("%w: %s", err, bytes.TrimSpace(ee.Stderr))
			}
			kueueModErr = fmt.Errorf("go mod download %s@%s: %v %s (run make kueue-tools)", kueueModule, KueueVersion, err, info.Error)
			return
		}
		kueueModDir = info.Dir
	})
	if kueueModErr != nil {
		t.Fatalf("kubetest: %v", kueueModErr)
	}
	return kueueModDir
}

var (
	kueueModOnce sync.Once
	kueueModDir  string
	kueueModErr  error
)

// applyKueueCRDs applies every CRD of config/components/crd/bases
// server-side (the Workload CRD is 1.4 MB) and waits until each is
// Established.
func (e *Env) applyKueueCRDs(ctx context.Context, t testing.TB, modDir string) {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(modDir, "config", "components", "crd", "bases", "*.yaml"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("kubetest: no Kueue CRDs in %s: %v", modDir, err)
	}
	dc := e.Dynamic()
	force := true
	var names []string
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("kubetest: %v", err)
		}
		var meta struct {
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal(data, &meta); err != nil || meta.Metadata.Name == "" {
			t.Fatalf("kubetest: %s: no metadata.name (%v)", path, err)
		}
		if _, err := dc.Resource(crdGVR).Patch(ctx, meta.Metadata.Name, types.ApplyYAMLPatchType, data,
			metav1.PatchOptions{FieldManager: "kubetest", Force: &force}); err != nil {
			t.Fatalf("kubetest: apply %s: %v", path, err)
		}
		names = append(names, meta.Metadata.Name)
	}
	deadline := time.Now().Add(60 * time.Second)
	for _, name := range names {
		for {
			got, err := dc.Resource(crdGVR).Get(ctx, name, metav1.GetOptions{})
			if err == nil && established(got) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("kubetest: CRD %s not established: %v", name, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// registerWebhooks creates the kueueWebhooks of the module's manifest as
// URL-based configurations on k.WebhookURL, then waits until a dry-run pod
// with a queue label comes back labelled by Kueue's pod hook.
func (k *Kueue) registerWebhooks(ctx context.Context, t testing.TB, modDir string, caPEM []byte, withMPI bool) {
	t.Helper()
	path := filepath.Join(modDir, "config", "components", "webhook", "manifests.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	keep := func(name string) bool {
		return kueueWebhooks[name] && (withMPI || !strings.Contains(name, "mpijob"))
	}
	clientConfig := func(svc *admissionv1.ServiceReference) admissionv1.WebhookClientConfig {
		url := k.WebhookURL
		if svc != nil && svc.Path != nil {
			url += *svc.Path
		}
		return admissionv1.WebhookClientConfig{URL: &url, CABundle: caPEM}
	}
	nsSelector := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
		Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn, Values: kueueExcludedNamespaces,
	}}}
	ar := k.e.Client.AdmissionregistrationV1()
	var mutating, validating []string
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var raw map[string]any
		if err := dec.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatalf("kubetest: %s: %v", path, err)
		}
		if raw == nil {
			continue
		}
		js, _ := json.Marshal(raw)
		switch raw["kind"] {
		case "MutatingWebhookConfiguration":
			var c admissionv1.MutatingWebhookConfiguration
			if err := json.Unmarshal(js, &c); err != nil {
				t.Fatalf("kubetest: %s: %v", path, err)
			}
			c.ObjectMeta = metav1.ObjectMeta{Name: "kubetest-kueue-mutating"}
			c.Webhooks = slices.DeleteFunc(c.Webhooks, func(w admissionv1.MutatingWebhook) bool { return !keep(w.Name) })
			for i := range c.Webhooks {
				w := &c.Webhooks[i]
				w.ClientConfig = clientConfig(w.ClientConfig.Service)
				if w.Name == "mpod.kb.io" {
					w.NamespaceSelector = nsSelector
				}
			}
			if _, err := ar.MutatingWebhookConfigurations().Create(ctx, &c, metav1.CreateOptions{}); err != nil {
				t.Fatalf("kubetest: register Kueue's mutating webhooks: %v", err)
			}
			mutating = append(mutating, c.Name)
		case "ValidatingWebhookConfiguration":
			var c admissionv1.ValidatingWebhookConfiguration
			if err := json.Unmarshal(js, &c); err != nil {
				t.Fatalf("kubetest: %s: %v", path, err)
			}
			c.ObjectMeta = metav1.ObjectMeta{Name: "kubetest-kueue-validating"}
			c.Webhooks = slices.DeleteFunc(c.Webhooks, func(w admissionv1.ValidatingWebhook) bool { return !keep(w.Name) })
			for i := range c.Webhooks {
				w := &c.Webhooks[i]
				w.ClientConfig = clientConfig(w.ClientConfig.Service)
				if w.Name == "vpod.kb.io" {
					w.NamespaceSelector = nsSelector
				}
			}
			if _, err := ar.ValidatingWebhookConfigurations().Create(ctx, &c, metav1.CreateOptions{}); err != nil {
				t.Fatalf("kubetest: register Kueue's validating webhooks: %v", err)
			}
			validating = append(validating, c.Name)
		}
	}
	if len(mutating) == 0 || len(validating) == 0 {
		t.Fatalf("kubetest: %s: no webhook configurations", path)
	}
	// Registered last, so run first: before Kueue stops.
	t.Cleanup(func() {
		bg := context.Background()
		for _, n := range mutating {
			if err := ar.MutatingWebhookConfigurations().Delete(bg, n, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("kubetest: delete webhook configuration %s: %v", n, err)
			}
		}
		for _, n := range validating {
			if err := ar.ValidatingWebhookConfigurations().Delete(bg, n, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("kubetest: delete webhook configuration %s: %v", n, err)
			}
		}
	})

	// The API server picks new configurations up asynchronously: wait until
	// a dry-run pod with a queue label comes back as Kueue's hook marks it.
	probe := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "kubetest-kueue-probe-", Namespace: "default",
			Labels: map[string]string{"kueue.x-k8s.io/queue-name": "kubetest-probe"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "probe"}}},
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		got, err := k.e.Client.CoreV1().Pods("default").Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil && got.Labels["kueue.x-k8s.io/managed"] == "true" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("kubetest: Kueue's pod webhook not called after 60s (last: %v, labels %v)", err, labelsOf(got))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func labelsOf(p *corev1.Pod) map[string]string {
	if p == nil {
		return nil
	}
	return p.Labels
}

// writeServingCert writes a fresh CA's serving certificate and key for IP
// 127.0.0.1 as tls.crt and tls.key into dir and returns the CA's PEM.
func writeServingCert(t testing.TB, dir string) []byte {
	t.Helper()
	ca := newTestCA(t, "kubetest-kueue-ca")
	cert, key := ca.issue(t, "127.0.0.1", x509.ExtKeyUsageServerAuth)
	writeFile(t, filepath.Join(dir, "tls.crt"), cert, 0o600)
	writeFile(t, filepath.Join(dir, "tls.key"), key, 0o600)
	return ca.pem
}

// kueueMetricsCertDir is where Kueue v0.17.0 reads its metrics certificate
// when internal certificate management is off (cmd/kueue/main.go).
const kueueMetricsCertDir = "/etc/kueue/metrics/certs"

// lockMetricsCerts takes an exclusive lock (flock) shared by every test
// process of this machine that starts Kueue, held from writing the metrics
// certificate until Kueue has read it.
func lockMetricsCerts(t testing.TB) (unlock func()) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "kubetest-kueue-metrics-certs.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		t.Fatalf("kubetest: lock %s: %v", f.Name(), err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}
}

// writeMetricsCerts writes a throwaway self-signed pair into
// kueueMetricsCertDir unless one is there, and returns what removes
// exactly what it wrote (the files, then the directories it made, deepest
// first). Call it under lockMetricsCerts.
func writeMetricsCerts(t testing.TB) (cleanup func()) {
	t.Helper()
	crt, key := filepath.Join(kueueMetricsCertDir, "tls.crt"), filepath.Join(kueueMetricsCertDir, "tls.key")
	if _, err := os.Stat(crt); err == nil {
		if _, err := os.Stat(key); err == nil {
			return func() {}
		}
	}
	var made []string
	for d := kueueMetricsCertDir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil {
			break
		}
		made = append(made, d)
	}
	if err := os.MkdirAll(kueueMetricsCertDir, 0o755); err != nil {
		t.Fatalf("kubetest: Kueue %s reads its metrics certificate from %s, which cannot be written here (run as root): %v", KueueVersion, kueueMetricsCertDir, err)
	}
	tmp := t.TempDir()
	writeServingCert(t, tmp)
	for _, f := range []string{"tls.crt", "tls.key"} {
		b, err := os.ReadFile(filepath.Join(tmp, f))
		if err != nil {
			t.Fatalf("kubetest: %v", err)
		}
		writeFile(t, filepath.Join(kueueMetricsCertDir, f), b, 0o600)
	}
	return func() {
		for _, f := range []string{crt, key} {
			if err := os.Remove(f); err != nil {
				t.Errorf("kubetest: remove %s: %v", f, err)
			}
		}
		for _, d := range made {
			if err := os.Remove(d); err != nil {
				t.Errorf("kubetest: remove %s: %v", d, err)
			}
		}
	}
}

// KueueTopologyLevel is a level of a Topology: a node label key.
type KueueTopologyLevel = string

// CreateTopology creates the Kueue Topology name with levels (node label
// keys, outermost first, e.g. block, rack, kubernetes.io/hostname).
func (k *Kueue) CreateTopology(ctx context.Context, name string, levels ...KueueTopologyLevel) {
	k.e.t.Helper()
	var ls []any
	for _, l := range levels {
		ls = append(ls, map[string]any{"nodeLabel": l})
	}
	k.create(ctx, KueueTopologyGVR, "", map[string]any{
		"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Topology",
		"metadata": map[string]any{"name": name},
		"spec":     map[string]any{"levels": ls},
	})
}

// CreateResourceFlavor creates the ResourceFlavor name selecting the nodes
// with nodeLabels, with topologyName when it is not empty.
func (k *Kueue) CreateResourceFlavor(ctx context.Context, name string, nodeLabels map[string]string, topologyName string) {
	k.e.t.Helper()
	spec := map[string]any{}
	if len(nodeLabels) > 0 {
		m := map[string]any{}
		for l, v := range nodeLabels {
			m[l] = v
		}
		spec["nodeLabels"] = m
	}
	if topologyName != "" {
		spec["topologyName"] = topologyName
	}
	k.create(ctx, KueueResourceFlavorGVR, "", map[string]any{
		"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
		"metadata": map[string]any{"name": name},
		"spec":     spec,
	})
}

// ClusterQueueOptions describes a ClusterQueue of one flavor.
type ClusterQueueOptions struct {
	Name, Flavor string
	// GPUs is the flavor's nvidia.com/gpu nominal quota; CPU and memory
	// are covered with a quota no test reaches ("1000", "10Ti").
	GPUs int64
	// PreemptWithinClusterQueue is spec.preemption.withinClusterQueue
	// ("Never" when empty; "LowerPriority" lets a higher priority
	// workload preempt a running one).
	PreemptWithinClusterQueue string
}

// CreateClusterQueue creates the ClusterQueue of o (every namespace may
// use it) and waits until Kueue reports it Active.
func (k *Kueue) CreateClusterQueue(ctx context.Context, o ClusterQueueOptions) {
	k.e.t.Helper()
	preempt := o.PreemptWithinClusterQueue
	if preempt == "" {
		preempt = "Never"
	}
	k.create(ctx, KueueClusterQueueGVR, "", map[string]any{
		"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
		"metadata": map[string]any{"name": o.Name},
		"spec": map[string]any{
			"namespaceSelector": map[string]any{},
			"preemption":        map[string]any{"withinClusterQueue": preempt},
			"resourceGroups": []any{map[string]any{
				"coveredResources": []any{"cpu", "memory", string(GPUResource)},
				"flavors": []any{map[string]any{
					"name": o.Flavor,
					"resources": []any{
						map[string]any{"name": "cpu", "nominalQuota": "1000"},
						map[string]any{"name": "memory", "nominalQuota": "10Ti"},
						map[string]any{"name": string(GPUResource), "nominalQuota": strconv.FormatInt(o.GPUs, 10)},
					},
				}},
			}},
		},
	})
	k.waitActive(ctx, KueueClusterQueueGVR, "", o.Name)
}

// CreateLocalQueue creates the LocalQueue name in namespace ns feeding
// clusterQueue and waits until Kueue reports it Active.
func (k *Kueue) CreateLocalQueue(ctx context.Context, ns, name, clusterQueue string) {
	k.e.t.Helper()
	k.create(ctx, KueueLocalQueueGVR, ns, map[string]any{
		"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec":     map[string]any{"clusterQueue": clusterQueue},
	})
	k.waitActive(ctx, KueueLocalQueueGVR, ns, name)
}

// CreateWorkloadPriorityClass creates the WorkloadPriorityClass name of
// value (a workload names it with the kueue.x-k8s.io/priority-class label;
// one without has priority 0).
func (k *Kueue) CreateWorkloadPriorityClass(ctx context.Context, name string, value int32) {
	k.e.t.Helper()
	k.create(ctx, KueuePriorityClassGVR, "", map[string]any{
		"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass",
		"metadata": map[string]any{"name": name},
		"value":    int64(value),
	})
}

// Workloads lists the Kueue Workloads of namespace ns.
func (k *Kueue) Workloads(ctx context.Context, ns string) []unstructured.Unstructured {
	k.e.t.Helper()
	l, err := k.e.Dynamic().Resource(KueueWorkloadGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		k.e.t.Fatalf("kubetest: list workloads: %v", err)
	}
	return l.Items
}

func (k *Kueue) create(ctx context.Context, gvr schema.GroupVersionResource, ns string, obj map[string]any) {
	k.e.t.Helper()
	u := &unstructured.Unstructured{Object: obj}
	var err error
	if ns == "" {
		_, err = k.e.Dynamic().Resource(gvr).Create(ctx, u, metav1.CreateOptions{})
	} else {
		_, err = k.e.Dynamic().Resource(gvr).Namespace(ns).Create(ctx, u, metav1.CreateOptions{})
	}
	if err != nil {
		k.e.t.Fatalf("kubetest: create %s %s: %v", u.GetKind(), u.GetName(), err)
	}
}

func (k *Kueue) waitActive(ctx context.Context, gvr schema.GroupVersionResource, ns, name string) {
	k.e.t.Helper()
	deadline := time.Now().Add(settleWait)
	for {
		var got *unstructured.Unstructured
		var err error
		if ns == "" {
			got, err = k.e.Dynamic().Resource(gvr).Get(ctx, name, metav1.GetOptions{})
		} else {
			got, err = k.e.Dynamic().Resource(gvr).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		}
		if err == nil && Condition(got, "Active") == "True" {
			return
		}
		if time.Now().After(deadline) {
			k.e.t.Fatalf("kubetest: %s %s not Active after %v: %v %v", gvr.Resource, name, settleWait, err, conditionsOf(got))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Condition returns the status of condition typ of a Kueue object ("" when
// absent).
func Condition(u *unstructured.Unstructured, typ string) string {
	if u == nil {
		return ""
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == typ {
			s, _ := m["status"].(string)
			return s
		}
	}
	return ""
}

func conditionsOf(u *unstructured.Unstructured) any {
	if u == nil {
		return nil
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	return conds
}
