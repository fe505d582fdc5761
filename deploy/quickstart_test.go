package deploy_test

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"signet.dev/signet/reconciler"
	"signet.dev/signet/specs"
)

// quickstartMarker precedes, on its own line, every fenced shell block of
// docs/deploy.md that the quickstart runs.
const quickstartMarker = "<!-- quickstart -->"

// quickstartBlocks returns the bodies of docs/deploy.md's quickstart
// blocks, in order, exactly as written.
func quickstartBlocks(t *testing.T) []string {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "docs", "deploy.md"))
	require.NoError(t, err)
	defer f.Close()
	var blocks []string
	var cur *strings.Builder
	marked := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case cur != nil && line == "```":
			blocks = append(blocks, cur.String())
			cur = nil
		case cur != nil:
			cur.WriteString(line + "\n")
		case line == quickstartMarker:
			marked = true
		case marked && line == "```sh":
			cur, marked = &strings.Builder{}, false
		case marked && line != "":
			require.Failf(t, "docs/deploy.md", "%s is not followed by a ```sh block but by %q", quickstartMarker, line)
		}
	}
	require.NoError(t, sc.Err())
	require.Nil(t, cur, "docs/deploy.md: a quickstart block is not closed")
	require.Len(t, blocks, 2, "docs/deploy.md: the quickstart's blocks (key; secrets and apply)")
	return blocks
}

// heredoc returns the body of the first `cat > file <<'EOF'` in block.
func heredoc(t *testing.T, block, file string) string {
	t.Helper()
	m := regexp.MustCompile(`(?s)cat > ` + regexp.QuoteMeta(file) + ` <<'EOF'\n(.*?)\nEOF\n`).FindStringSubmatch(block)
	require.NotNil(t, m, "no heredoc writing %s in the quickstart", file)
	return m[1] + "\n"
}

// images returns the signet image of a render in its three places: the
// Deployment's container, config.yaml's kubernetes.signetImage and the
// checks policy's signetImage parameter.
func images(t *testing.T, objs []*unstructured.Unstructured) (deployment, config, ceiling string) {
	t.Helper()
	var dep appsv1.Deployment
	decode(t, find(t, objs, "Deployment", systemNS, "signet-reconciler"), &dep)
	require.Len(t, dep.Spec.Template.Spec.Containers, 1)
	cm := find(t, objs, "ConfigMap", systemNS, "signet-config")
	data, _, _ := unstructured.NestedString(cm.Object, "data", "config.yaml")
	require.Equal(t, 1, strings.Count(data, "signetImage: "),
		"config.yaml: image.yaml replaces what follows the one \"signetImage: \"")
	file := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(file, []byte(data), 0o600))
	cfg, err := reconciler.LoadConfig(file)
	require.NoError(t, err, "the rendered config.yaml")
	var params corev1.ConfigMap
	decode(t, find(t, objs, "ConfigMap", systemNS, ceilingParams), &params)
	return dep.Spec.Template.Spec.Containers[0].Image, cfg.Kubernetes.SignetImage, params.Data["signetImage"]
}

func renderDir(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	require.NoError(t, err, "kustomize build %s", dir)
	var out []*unstructured.Unstructured
	for _, r := range res.Resources() {
		// Through JSON, so that numbers are int64 as client-go expects.
		b, err := r.MarshalJSON()
		require.NoError(t, err)
		u := &unstructured.Unstructured{}
		require.NoError(t, u.UnmarshalJSON(b))
		out = append(out, u)
	}
	return out
}

// TestShippedImageNamedOnce: the signet image is named once, by kustomize
// `images:`, and the Deployment, config.yaml's kubernetes.signetImage and
// the checks policy's parameter name the same digest-pinned image, for the
// base as shipped and for the quickstart's overlay (written from
// docs/deploy.md verbatim) with another image. Were one of them left
// behind, the check pods' install step would run another binary than the
// reconciler's, or the API server would refuse every check pod.
func TestShippedImageNamedOnce(t *testing.T) {
	t.Run("base", func(t *testing.T) {
		d, c, p := images(t, render(t))
		_, err := specs.ParsePinnedImage(d)
		require.NoError(t, err, "the Deployment's image is not digest-pinned")
		assert.Equal(t, d, c, "config.yaml kubernetes.signetImage")
		assert.Equal(t, d, p, "checks-policy.yaml signetImage")
	})
	t.Run("quickstart overlay", func(t *testing.T) {
		block := quickstartBlocks(t)[1]
		root := t.TempDir()
		require.NoError(t, os.CopyFS(filepath.Join(root, "deploy", "base"), os.DirFS("base")))
		overlay := filepath.Join(root, "signet-overlay")
		require.NoError(t, os.MkdirAll(overlay, 0o755))
		require.Contains(t, block, "cp deploy/base/image.yaml signet-overlay/\n")
		b, err := os.ReadFile(filepath.Join("base", "image.yaml"))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(overlay, "image.yaml"), b, 0o644))
		kust := heredoc(t, block, "signet-overlay/kustomization.yaml")
		require.NoError(t, os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kust), 0o644))
		want := docImage(t, kust)
		d, c, p := images(t, renderDir(t, overlay))
		assert.Equal(t, want, d, "the Deployment's image")
		assert.Equal(t, want, c, "config.yaml kubernetes.signetImage")
		assert.Equal(t, want, p, "checks-policy.yaml signetImage")
	})
}

// docImage is the image the quickstart's overlay names: newName@digest.
func docImage(t *testing.T, kustomization string) string {
	t.Helper()
	name := regexp.MustCompile(`(?m)^  newName: (\S+)$`).FindStringSubmatch(kustomization)
	digest := regexp.MustCompile(`(?m)^  digest: (sha256:[0-9a-f]{64})$`).FindStringSubmatch(kustomization)
	require.NotNil(t, name, "the quickstart overlay's newName")
	require.NotNil(t, digest, "the quickstart overlay's digest")
	return name[1] + "@" + digest[1]
}

// TestShippedTrustPolicyRequired: the trust policy's volume is not
// optional (the reconciler cannot start without it) and the config's
// trustPolicy lies on it.
func TestShippedTrustPolicyRequired(t *testing.T) {
	objs := render(t)
	var dep appsv1.Deployment
	decode(t, find(t, objs, "Deployment", systemNS, "signet-reconciler"), &dep)
	var vol *corev1.Volume
	for i, v := range dep.Spec.Template.Spec.Volumes {
		if v.ConfigMap != nil && v.ConfigMap.Name == "signet-trust-policy" {
			vol = &dep.Spec.Template.Spec.Volumes[i]
		}
	}
	require.NotNil(t, vol, "no volume of ConfigMap signet-trust-policy")
	assert.False(t, vol.ConfigMap.Optional != nil && *vol.ConfigMap.Optional, "volume %q: optional: true", vol.Name)
	cm := find(t, objs, "ConfigMap", systemNS, "signet-config")
	data, _, _ := unstructured.NestedString(cm.Object, "data", "config.yaml")
	file := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(file, []byte(data), 0o600))
	cfg, err := reconciler.LoadConfig(file)
	require.NoError(t, err)
	var mounted bool
	for _, m := range dep.Spec.Template.Spec.Containers[0].VolumeMounts {
		mounted = mounted || m.Name == vol.Name && filepath.Dir(cfg.TrustPolicy) == m.MountPath
	}
	assert.True(t, mounted, "trustPolicy %s is not on volume %q", cfg.TrustPolicy, vol.Name)
}

// metricsService checks that the Service selects the reconciler's pod and
// reaches its container port `metrics`, and returns it.
func metricsService(t *testing.T, objs []*unstructured.Unstructured) *corev1.Service {
	t.Helper()
	var svc corev1.Service
	decode(t, find(t, objs, "Service", systemNS, "signet-reconciler-metrics"), &svc)
	var dep appsv1.Deployment
	decode(t, find(t, objs, "Deployment", systemNS, "signet-reconciler"), &dep)
	require.NotEmpty(t, svc.Spec.Selector)
	assert.True(t, labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(dep.Spec.Template.Labels)),
		"Service selector %v does not select the reconciler's pod %v", svc.Spec.Selector, dep.Spec.Template.Labels)
	require.Len(t, svc.Spec.Ports, 1)
	var named bool
	for _, p := range dep.Spec.Template.Spec.Containers[0].Ports {
		named = named || p.Name == svc.Spec.Ports[0].TargetPort.String()
	}
	assert.True(t, named, "Service targetPort %s is no container port", svc.Spec.Ports[0].TargetPort.String())
	assert.Equal(t, "metrics", svc.Spec.Ports[0].TargetPort.String())
	return &svc
}

// serviceMonitor is the part of monitoring.coreos.com/v1 ServiceMonitor
// that says what is scraped.
type serviceMonitor struct {
	Spec struct {
		Selector          metav1.LabelSelector `json:"selector"`
		NamespaceSelector struct {
			MatchNames []string `json:"matchNames"`
		} `json:"namespaceSelector"`
		Endpoints []struct {
			Port string `json:"port"`
		} `json:"endpoints"`
	} `json:"spec"`
}
