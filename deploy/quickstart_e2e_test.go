package deploy_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"signet.dev/signet/internal/testing/gittest"
	"signet.dev/signet/internal/testing/kubetest"
	"signet.dev/signet/signing"
)

// The quickstart's example values a reader replaces with their own, and
// the one the test replaces: the spec repository's URL.
const quickstartGitURL = "https://git.example.com/fleet/specs.git"

// fixedPortsLock serialises the tests that run the shipped config.yaml's
// listeners, which bind fixed ports of this machine (127.0.0.1:8080, :8081,
// :9090, :9000, as a reader's pod does in its own network namespace): two
// test processes (two packages, two checkouts) holding it never bind them
// at once. It is an flock on a file in the system's temporary directory,
// released when the test ends (or its process dies).
func fixedPortsLock(t *testing.T) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "signet-deploy-fixed-ports.lock"), os.O_CREATE|os.O_RDWR, 0o666)
	require.NoError(t, err)
	require.NoError(t, syscall.Flock(int(f.Fd()), syscall.LOCK_EX), "lock %s", f.Name())
	t.Cleanup(func() { f.Close() })
}

// buildStaticSignet builds ./cmd/signet as `make image` does (static,
// CGO_ENABLED=0) into dir/signet: the image's root filesystem.
func buildStaticSignet(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "signet")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "signet.dev/signet/cmd/signet")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build ./cmd/signet: %s", out)
	return bin
}

// runBlock runs one quickstart block with bash (-e: the first failing
// command fails it) in the reader's checkout dir, with signet and kubectl
// on PATH and kubectl pointed at the test's API server as its admin.
func runBlock(t *testing.T, dir, pathDir, kubeconfig, block string) string {
	t.Helper()
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", block)
	cmd.Dir = dir
	cmd.Env = []string{
		"PATH=" + pathDir + ":" + os.Getenv("PATH"),
		"HOME=" + dir,
		"KUBECONFIG=" + kubeconfig,
		"LC_ALL=C",
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	require.NoError(t, err, "quickstart block:\n%s\nstdout:\n%s\nstderr:\n%s", block, stdout.String(), stderr.String())
	t.Logf("quickstart block ran:\n%s", stdout.String())
	return stdout.String()
}

// trustPolicy is the reader's trust policy: the reconciler's key (the one
// the quickstart generated) as the evidence signer, and one approver (a
// key of the reader's; an evidence signer may not approve).
func trustPolicy(t *testing.T, reconcilerID, reconcilerPub string) string {
	t.Helper()
	approver, err := signing.GenerateKey(signing.AlgorithmECDSAP256)
	require.NoError(t, err)
	indent := func(pem string) string {
		var b strings.Builder
		for _, l := range strings.Split(strings.TrimSpace(pem), "\n") {
			b.WriteString("      " + l + "\n")
		}
		return b.String()
	}
	return fmt.Sprintf(`apiVersion: signet.dev/v1alpha1
kind: TrustPolicy
metadata:
  name: quickstart
spec:
  keys:
  - id: %[1]s
    owner: reconciler@cluster-a
    publicKey: |
%[2]s  - id: %[3]s
    owner: alice@example.com
    publicKey: |
%[4]s  approvers: [%[3]s]
  thresholds:
    CertificationProfile: 1
    CertificationRequest: 1
    cancel: 1
    release: 1
  evidenceSigners: [%[1]s]
`, reconcilerID, indent(reconcilerPub), approver.KeyID(), indent(string(approver.Public().MarshalPEM())))
}

// TestQuickstart runs docs/deploy.md's quickstart blocks verbatim with the
// stock kubectl against a real control plane, the kubetest agent playing
// the kubelet of one node, and sees the reconciler become ready: the
// block's own `kubectl rollout status` returns once the Deployment is
// available, which needs the pod Ready by its readinessProbe (/readyz on
// port probe), which the reconciler answers only after it read its
// mounted key, secrets, trust policy and config, won the leader Lease and
// recovered from the evidence branch, all as its ServiceAccount through the
// projected token. The reader's substitutions are made the reader's way:
// the test writes trust-policy.yaml and git-token between the blocks and
// replaces the example Git URL with its Git server's; the example image is
// kept and mapped by the agent to a directory holding the static signet
// binary at /signet (the image's entrypoint).
//
// Then: the metrics Service's EndpointSlice lists the ready pod on port
// metrics; and without the trust policy's ConfigMap a new pod of the
// Deployment does not start (its container waits in ContainerCreating on
// that ConfigMap) until the ConfigMap is created again.
func TestQuickstart(t *testing.T) {
	kubectl := filepath.Join(kubetest.ModuleRoot(), "bin", "kubectl")
	if _, err := os.Stat(kubectl); err != nil {
		t.Fatalf("%s missing: run make kube-tools (%v)", kubectl, err)
	}
	blocks := quickstartBlocks(t)
	require.Contains(t, blocks[1], quickstartGitURL, "the quickstart no longer names the example Git URL the test replaces")
	image := docImage(t, heredoc(t, blocks[1], "signet-overlay/kustomization.yaml"))
	fixedPortsLock(t)

	// The image: a root holding the static binary at its entrypoint.
	root := t.TempDir()
	bin := buildStaticSignet(t, root)
	pathDir := t.TempDir()
	require.NoError(t, os.Symlink(bin, filepath.Join(pathDir, "signet")))
	require.NoError(t, os.Symlink(kubectl, filepath.Join(pathDir, "kubectl")))

	// The spec repository, behind a token.
	const token = "quickstart-git-token"
	git := gittest.NewHTTPServer(t, gittest.WithAuth(gittest.Auth{Token: token}))
	url, bare := git.NewRepo("specs")
	work := t.TempDir()
	gittest.Git(t, "", "clone", "--quiet", bare, work)
	require.NoError(t, os.WriteFile(filepath.Join(work, "README.md"), []byte("specs\n"), 0o644))
	gittest.Git(t, work, "add", ".")
	gittest.Git(t, work, "commit", "--quiet", "-m", "specs")
	gittest.Git(t, work, "push", "--quiet", "origin", "HEAD:main")

	env := kubetest.Start(t)
	ctx := t.Context()
	env.InstallMPIJobCRD(ctx)
	const node = "node-0"
	env.CreateNode(ctx, kubetest.NodeOptions{Name: node})
	a := env.StartAgent(t, kubetest.AgentOptions{
		Nodes:       []string{node},
		Images:      map[string]string{image: root},
		Entrypoints: map[string][]string{image: {"/signet"}},
		Chroot:      true,
	})
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(kubeconfig, env.Kubeconfig(kubetest.AdminUser), 0o600))

	// The reader's checkout, with deploy/base as shipped.
	checkout := t.TempDir()
	require.NoError(t, os.CopyFS(filepath.Join(checkout, "deploy", "base"), os.DirFS("base")))

	logs := func() string {
		// At cleanup, when the test's context has ended.
		pods, err := env.Client.CoreV1().Pods(systemNS).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return err.Error()
		}
		var b strings.Builder
		for _, p := range pods.Items {
			fmt.Fprintf(&b, "pod %s: %s %+v\n%s\n", p.Name, p.Status.Phase, p.Status.ContainerStatuses, a.Logs(systemNS, p.Name, "reconciler"))
		}
		return b.String()
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("reconciler pods:\n%s", logs())
		}
	})

	out := runBlock(t, checkout, pathDir, kubeconfig, blocks[0])
	keyID := strings.TrimSpace(strings.SplitN(out, "\n", 2)[0])
	pub, err := os.ReadFile(filepath.Join(checkout, "reconciler.pub"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(checkout, "trust-policy.yaml"), []byte(trustPolicy(t, keyID, string(pub))), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(checkout, "git-token"), []byte(token+"\n"), 0o600))
	runBlock(t, checkout, pathDir, kubeconfig, strings.ReplaceAll(blocks[1], quickstartGitURL, url))

	var dep *appsv1.Deployment
	dep, err = env.Client.AppsV1().Deployments(systemNS).Get(ctx, "signet-reconciler", metav1.GetOptions{})
	require.NoError(t, err)
	available := false
	for _, c := range dep.Status.Conditions {
		available = available || c.Type == appsv1.DeploymentAvailable && c.Status == corev1.ConditionTrue
	}
	require.True(t, available, "Deployment conditions %+v", dep.Status.Conditions)
	pod := readyPod(t, env)
	assert.Equal(t, node, pod.Spec.NodeName)

	t.Run("the reconciler acts as its ServiceAccount", func(t *testing.T) {
		lease, err := env.Client.CoordinationV1().Leases(systemNS).Get(ctx, serviceAccount, metav1.GetOptions{})
		require.NoError(t, err, "the leader Lease the reconciler takes before it is ready")
		require.NotNil(t, lease.Spec.HolderIdentity)
		assert.NotEmpty(t, *lease.Spec.HolderIdentity)
		// Its one credential is the projected token (no kubeconfig in
		// config.yaml); the manager is its client's user agent.
		require.NotEmpty(t, lease.ManagedFields)
		assert.Equal(t, "signet-reconciler", lease.ManagedFields[0].Manager, "who wrote the Lease")
	})

	// The Service as the API server stores it selects the running, Ready
	// pod and its target port is the pod's metrics port. (The
	// EndpointSlice controller would list the pod, but the agent's pod IP
	// is loopback, which an EndpointSlice refuses.)
	t.Run("the metrics Service selects the pod", func(t *testing.T) {
		svc, err := env.Client.CoreV1().Services(systemNS).Get(ctx, "signet-reconciler-metrics", metav1.GetOptions{})
		require.NoError(t, err)
		require.NotEmpty(t, svc.Spec.Selector)
		assert.True(t, labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(pod.Labels)),
			"Service selector %v, pod labels %v", svc.Spec.Selector, pod.Labels)
		require.Len(t, svc.Spec.Ports, 1)
		var port int32
		for _, p := range pod.Spec.Containers[0].Ports {
			if p.Name == svc.Spec.Ports[0].TargetPort.StrVal {
				port = p.ContainerPort
			}
		}
		require.NotZero(t, port, "targetPort %s names no port of the pod", svc.Spec.Ports[0].TargetPort.String())
		resp, err := http.Get("http://" + net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(int(port))) + "/metrics")
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		assert.Contains(t, string(body), "signet_build_info", "the pod's metrics port serves signet's /metrics")
	})

	t.Run("no pod starts without the trust policy", func(t *testing.T) {
		require.NoError(t, env.Client.CoreV1().ConfigMaps(systemNS).Delete(ctx, "signet-trust-policy", metav1.DeleteOptions{}))
		require.NoError(t, env.Client.CoreV1().Pods(systemNS).Delete(ctx, pod.Name, metav1.DeleteOptions{}))
		var next *corev1.Pod
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			pods, err := env.Client.CoreV1().Pods(systemNS).List(ctx, metav1.ListOptions{})
			require.NoError(c, err)
			next = nil
			for i, p := range pods.Items {
				if p.Name != pod.Name && p.DeletionTimestamp == nil {
					next = &pods.Items[i]
				}
			}
			require.NotNil(c, next, "the Deployment made no new pod")
			require.Len(c, next.Status.ContainerStatuses, 1)
			w := next.Status.ContainerStatuses[0].State.Waiting
			require.NotNil(c, w, "container state %+v", next.Status.ContainerStatuses[0].State)
			assert.Equal(c, "ContainerCreating", w.Reason)
			assert.Contains(c, w.Message, `configmap "signet-trust-policy"`)
		}, 60*time.Second, 200*time.Millisecond)
		assert.Equal(t, corev1.PodPending, next.Status.Phase)
		assert.Empty(t, a.Logs(systemNS, next.Name, "reconciler"), "the reconciler ran without its trust policy")

		// As the quickstart creates it, from the reader's file.
		runBlock(t, checkout, pathDir, kubeconfig, "kubectl -n signet-system create configmap signet-trust-policy --from-file=trust-policy.yaml=trust-policy.yaml\n"+
			"kubectl -n signet-system rollout status deployment/signet-reconciler --timeout=5m\n")
		assert.Equal(t, next.Name, readyPod(t, env).Name)
	})
}

// readyPod returns the one Ready pod of the reconciler's Deployment.
func readyPod(t *testing.T, env *kubetest.Env) *corev1.Pod {
	t.Helper()
	var ready *corev1.Pod
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		pods, err := env.Client.CoreV1().Pods(systemNS).List(t.Context(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=signet-reconciler"})
		require.NoError(c, err)
		ready = nil
		for i, p := range pods.Items {
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue && p.DeletionTimestamp == nil {
					ready = &pods.Items[i]
				}
			}
		}
		assert.NotNil(c, ready, "no Ready pod")
	}, 60*time.Second, 200*time.Millisecond)
	return ready
}
