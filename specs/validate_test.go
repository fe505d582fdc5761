package specs

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	gpuFile   = "profiles/gpu.yaml"
	localFile = "profiles/local.yml"
	reqFile   = "requests/requests.yaml"
)

// TestRules breaks each rule of DESIGN §2 and §3 (and of strict parsing)
// with one edit of a valid repository and expects a finding that names the
// file, the document, the field and the problem.
func TestRules(t *testing.T) {
	otherDigest := "sha256:" + strings.Repeat("ab", 32)
	tests := []struct {
		name  string
		edits []edit
		want  Finding // Message is a substring
	}{
		// strict parsing
		{"unknown field", []edit{{file: gpuFile, old: "  onFailure: stop", new: "  onFailure: stop\n  retries: 3"}},
			Finding{File: gpuFile, Document: 0, Field: "spec.retries", Message: "unknown field"}},
		{"unknown field in check", []edit{{file: gpuFile, old: "      stage: diag", new: "      stage: diag\n      command: [sh]"}},
			Finding{File: gpuFile, Document: 0, Field: "spec.checks[0].command", Message: "unknown field"}},
		{"duplicate key", []edit{{file: gpuFile, old: "  onFailure: stop", new: "  onFailure: stop\n  onFailure: continue"}},
			Finding{File: gpuFile, Document: 0, Field: "spec.onFailure", Message: "duplicate key"}},
		{"anchor", []edit{{file: reqFile, old: "[gpu-node-1, gpu-node-2]", new: "[&n gpu-node-1, gpu-node-2]"}},
			Finding{File: reqFile, Document: 0, Field: "spec.nodes[0]", Message: "anchors are not allowed"}},
		{"alias", []edit{{file: reqFile, old: "  nodes: [gpu-node-1, gpu-node-2]", new: "  nodes: [&n gpu-node-1, *n]"}},
			Finding{File: reqFile, Document: 0, Field: "spec.nodes[1]", Message: "aliases are not allowed"}},
		{"merge key", []edit{{file: reqFile, old: "  name: rack-2", new: "  <<: {name: rack-2}"}},
			Finding{File: reqFile, Document: 1, Field: "metadata", Message: "not a plain string"}},
		{"custom tag", []edit{{file: localFile, old: "  name: cpu-local", new: "  name: !custom cpu-local"}},
			Finding{File: localFile, Document: 0, Field: "metadata.name", Message: "YAML tag !custom is not allowed"}},
		{"string field given a number", []edit{{file: gpuFile, old: "    - name: nccl", new: "    - name: 12"}},
			Finding{File: gpuFile, Document: 0, Field: "spec.checks[1].name", Message: "must be a string"}},
		{"integer field given a string", []edit{{file: gpuFile, old: "    min: 1", new: "    min: \"1\""}},
			Finding{File: gpuFile, Document: 0, Field: "spec.participants.min", Message: "must be a decimal integer"}},
		{"boolean field given yes", []edit{{file: reqFile, old: "  count: 4", new: "  count: 4\n  cancel: yes"}},
			Finding{File: reqFile, Document: 1, Field: "spec.cancel", Message: "must be true or false"}},
		{"list given a string", []edit{{file: reqFile, old: "[gpu-node-1, gpu-node-2]", new: "gpu-node-1"}},
			Finding{File: reqFile, Document: 0, Field: "spec.nodes", Message: "must be a list"}},
		{"bad quantity", []edit{{file: gpuFile, old: "memory: 16Gi", new: "memory: 16GB"}},
			Finding{File: gpuFile, Document: 0, Field: `spec.checks[0].workload.resources.requests.memory`, Message: `"16GB" is not a quantity`}},
		{"deadline without unit", []edit{{file: gpuFile, old: `deadline: "900s"`, new: `deadline: "90"`}},
			Finding{File: gpuFile, Document: 0, Field: "spec.checks[1].deadline", Message: `"90" is not whole seconds ("90s")`}},
		{"deadline as a number", []edit{{file: gpuFile, old: `deadline: "900s"`, new: `deadline: 90`}},
			Finding{File: gpuFile, Document: 0, Field: "spec.checks[1].deadline", Message: `90 is not whole seconds ("90s")`}},
		{"deadline fractional", []edit{{file: gpuFile, old: `deadline: "900s"`, new: `deadline: "1.5s"`}},
			Finding{File: gpuFile, Document: 0, Field: "spec.checks[1].deadline", Message: `"1.5s" is not a whole positive number of seconds`}},
		{"deadline zero", []edit{{file: gpuFile, old: `deadline: "900s"`, new: `deadline: "0s"`}},
			Finding{File: gpuFile, Document: 0, Field: "spec.checks[1].deadline", Message: `"0s" is not positive`}},
		{"deadline negative", []edit{{file: gpuFile, old: `deadline: "900s"`, new: `deadline: "-1s"`}},
			Finding{File: gpuFile, Document: 0, Field: "spec.checks[1].deadline", Message: `"-1s" is not a whole positive number of seconds`}},
		{"deadline in minutes", []edit{{file: gpuFile, old: `deadline: "900s"`, new: `deadline: "1m"`}},
			Finding{File: gpuFile, Document: 0, Field: "spec.checks[1].deadline", Message: `"1m" is not whole seconds ("60s")`}},
		{"deadline too long", []edit{{file: gpuFile, old: `deadline: "900s"`, new: `deadline: "99999999999999999999s"`}},
			Finding{File: gpuFile, Document: 0, Field: "spec.checks[1].deadline", Message: "longer than the longest deadline"}},
		{"deadline missing", []edit{{file: localFile, old: "      deadline: \"60s\"\n", new: ""}},
			Finding{File: localFile, Document: 0, Field: "spec.checks[0].deadline", Message: "is required"}},
		{"apiVersion of another version", []edit{{file: localFile, old: "signet.dev/v1alpha1", new: "signet.dev/v2"}},
			Finding{File: localFile, Document: 0, Field: "apiVersion", Message: `"signet.dev/v2" is not signet.dev/v1alpha1`}},
		{"signet kind with a mistyped group", []edit{{file: localFile, old: "signet.dev/v1alpha1", new: "signet.io/v1alpha1"}},
			Finding{File: localFile, Document: 0, Field: "apiVersion", Message: `"signet.io/v1alpha1" is not signet.dev/v1alpha1`}},
		{"unknown signet kind", []edit{{file: localFile, old: "kind: CertificationProfile", new: "kind: CertificationProfil"}},
			Finding{File: localFile, Document: 0, Field: "kind", Message: `"CertificationProfil" is not a signet kind`}},
		{"YAML syntax error in the second document", []edit{{file: reqFile, old: "  name: rack-2", new: "  name: [rack-2"}},
			Finding{File: reqFile, Document: 1, Field: "", Message: "YAML"}},
		{"spec file over the size bound", []edit{{file: "profiles/big.yaml", new: strings.Repeat("#", MaxSpecFileBytes+1)}},
			Finding{File: "profiles/big.yaml", Document: -1, Field: "", Message: fmt.Sprintf("over the %d-byte limit", MaxSpecFileBytes)}},

		// profiles
		{"name not a DNS label", []edit{{file: localFile, old: "name: cpu-local", new: "name: CPU_local"}},
			Finding{File: localFile, Document: 0, Field: "metadata.name", Message: `"CPU_local" is not a DNS label`}},
		{"bundle path escapes", []edit{{file: gpuFile, old: "path: bundles/gpu", new: "path: ../bundles/gpu"}},
			Finding{File: gpuFile, Document: 0, Field: "spec.bundle.path", Message: "not a clean relative path"}},
		{"bundle path absolute", []edit{{file: gpuFile, old: "path: bundles/gpu", new: "path: /bundles/gpu"}},
			Finding{File: gpuFile, Document: 0, Field: "spec.bundle.path", Message: "not a clean relative path"}},
		{"bundle path missing", []edit{{file: gpuFile, old: "path: bundles/gpu", new: "path: bundles/nope"}},
			Finding{File: gpuFile, Document: 0, Field: "spec.bundle.path", Message: "bundle bundles/nope does not exist"}},
		{"bundle digest uppercase", []edit{{file: localFile, old: "digest: {{LOCAL}}", new: "digest: SHA256:" + strings.Repeat("AB", 32)}},
			Finding{File: localFile, Document: 0, Field: "spec.bundle.digest", Message: "is not a digest of the form sha256:<64 lowercase hex>"}},
		{"bundle digest missing", []edit{{file: localFile, old: "    digest: {{LOCAL}}\n", new: ""}},
			Finding{File: localFile, Document: 0, Field: "spec.bundle.digest", Message: "is required"}},
		{"bundle digest bare hex", []edit{{file: localFile, old: "digest: {{LOCAL}}", new: "digest: " + strings.Repeat("ab", 32)}},
			Finding{File: localFile, Document: 0, Field: "spec.bundle.digest", Message: "is not a digest of the form"}},
		{"bundle pin differs", []edit{{file: localFile, old: "{{LOCAL}}", new: otherDigest}},
			Finding{File: localFile, Document: 0, Field: "spec.bundle.digest", Message: "expected " + otherDigest + ", actual sha256:"}},
		{"bundle bytes changed since the pin", []edit{{file: "bundles/local/cpu.sh", old: "echo cpu", new: "echo CPU"}},
			Finding{File: localFile, Document: 0, Field: "spec.bundle.digest", Message: "does not match its pin: expected sha256:"}},
		{"participants min 0", []edit{{file: gpuFile, old: "    min: 1", new: "    min: 0"}},
			Finding{File: gpuFile, Document: 0, Field: "spec.participants.min", Message: "0 is less than 1"}},
		{"participants min above max", []edit{{file: gpuFile, old: "    min: 1", new: "    min: 9"}},
			Finding{File: gpuFile, Document: 0, Field: "spec.participants", Message: "min 9 is greater than max 8"}},
		{"participants max above 64", []edit{{file: gpuFile, old: "    max: 8", new: "    max: 65"}},
			Finding{File: gpuFile, Document: 0, Field: "spec.participants.max", Message: "65 is more than 64"}},
		{"onFailure unknown", []edit{{file: gpuFile, old: "onFailure: stop", new: "onFailure: abort"}},
			Finding{File: gpuFile, Document: 0, Field: "spec.onFailure", Message: `"abort" is not "continue" or "stop"`}},
		{"no checks", []edit{{file: localFile, old: "  checks:\n    - name: cpu\n      script: cpu.sh\n      backend: local\n      deadline: \"60s\"\n", new: "  checks: []\n"}},
			Finding{File: localFile, Document: 0, Field: "spec.checks", Message: "needs at least one check"}},
		{"duplicate check name", []edit{{file: gpuFile, old: "- name: nccl", new: "- name: dcgm-diag"}},
			Finding{File: gpuFile, Document: 0, Field: "spec.checks[1].name", Message: `"dcgm-diag" is also the name of spec.checks[0]`}},
		{"check name not a DNS label", []edit{{file: gpuFile, old: "- name: nccl", new: "- name: NCCL"}},
			Finding{File: gpuFile, Document: 0, Field: "spec.checks[1].name", Message: "not a DNS label"}},
		{"script escapes the bundle", []edit{{file: gpuFile, old: "script: lib/nccl.sh", new: "script: ../local/cpu.sh"}},
			Finding{File: gpuFile, Document: 0, Field: "spec.checks[1].script", Message: "not a clean relative path inside the bundle"}},
		{"script absolute", []edit{{file: gpuFile, old: "script: run.sh", new: "script: /run.sh"}},
			Finding{File: gpuFile, Document: 0, Field: "spec.checks[0].script", Message: "not a clean relative path inside the bundle"}},
		{"script missing from the bundle", []edit{{file: gpuFile, old: "script: run.sh", new: "script: missing.sh"}},
			Finding{File: gpuFile, Document: 0, Field: "spec.checks[0].script", Message: `"missing.sh" is not a file of bundle bundles/gpu`}},
		{"script names a directory", []edit{{file: gpuFile, old: "script: run.sh", new: "script: lib"}},
			Finding{File: gpuFile, Document: 0, Field: "spec.checks[0].script", Message: `"lib" is not a file of bundle bundles/gpu`}},
		{"backend unknown", []edit{{file: gpuFile, old: "backend: pod", new: "backend: docker"}},
			Finding{File: gpuFile, Document: 0, Field: "spec.checks[0].backend", Message: `"docker" is not local, pod or mpijob`}},
		{"backend missing", []edit{{file: localFile, old: "      backend: local\n", new: ""}},
			Finding{File: localFile, Document: 0, Field: "spec.checks[0].backend", Message: "is required"}},
		{"local check in a cluster profile", []edit{{file: gpuFile, old: "backend: mpijob", new: "backend: local"}},
			Finding{File: gpuFile, Document: 0, Field: "spec.checks", Message: "mixes local checks with pod/mpijob checks"}},
		{"local profile with two participants", []edit{{file: localFile, old: "max: 1", new: "max: 2"}},
			Finding{File: localFile, Document: 0, Field: "spec.participants.max", Message: "a local profile runs on this machine only: max must be 1, got 2"}},
		{"mpijob without GPUs", []edit{{file: gpuFile, old: "gpuCount: 4", new: "gpuCount: 0"}},
			Finding{File: gpuFile, Document: 0, Field: "spec.checks[1].gpuCount", Message: "an mpijob check needs at least 1 GPU per participant, got 0"}},
		{"negative gpuCount", []edit{{file: gpuFile, old: "gpuCount: 8", new: "gpuCount: -1"}},
			Finding{File: gpuFile, Document: 0, Field: "spec.checks[0].gpuCount", Message: "-1 is negative"}},
		{"stage not a DNS label", []edit{{file: gpuFile, old: "stage: diag", new: "stage: Diag_1"}},
			Finding{File: gpuFile, Document: 0, Field: "spec.checks[0].stage", Message: `"Diag_1" is not a DNS label`}},
		{"pod check without workload", []edit{{file: localFile, old: "backend: local", new: "backend: pod"}},
			Finding{File: localFile, Document: 0, Field: "spec.checks[0].workload", Message: "is required for a pod check"}},
		{"local check with a workload", []edit{{file: localFile, old: "      backend: local\n", new: "      backend: local\n      workload:\n        image: " + testImage + "\n"}},
			Finding{File: localFile, Document: 0, Field: "spec.checks[0].workload", Message: "a local check runs as a process on this machine"}},
		{"image by tag", []edit{{file: gpuFile, old: testImage, new: "nvcr.io/nvidia/pytorch:24.01-py3"}},
			Finding{File: gpuFile, Document: 0, Field: "spec.checks[0].workload.image", Message: "not an image reference pinned by digest"}},
		{"image digest truncated", []edit{{file: gpuFile, old: testImage, new: "nvcr.io/nvidia/pytorch@sha256:0123"}},
			Finding{File: gpuFile, Document: 0, Field: "spec.checks[0].workload.image", Message: "is not a digest of the form"}},
		{"image missing", []edit{{file: gpuFile, old: "image: " + testImage + "\n        resources:\n          requests:\n            cpu: \"8\"", new: "resources:\n          requests:\n            cpu: \"8\""}},
			Finding{File: gpuFile, Document: 0, Field: "spec.checks[1].workload.image", Message: "is required"}},
		{"GPUs in resources", []edit{{file: gpuFile, old: "cpu: \"4\"", new: "cpu: \"4\"\n            nvidia.com/gpu: 8"}},
			Finding{File: gpuFile, Document: 0, Field: `spec.checks[0].workload.resources.requests["nvidia.com/gpu"]`, Message: "GPUs are asked for with the check's gpuCount"}},
		{"request above limit", []edit{{file: gpuFile, old: "memory: 32Gi", new: "memory: 8Gi"}},
			Finding{File: gpuFile, Document: 0, Field: "spec.checks[0].workload.resources.requests.memory", Message: "request 16Gi is more than the limit 8Gi"}},
		{"negative request", []edit{{file: gpuFile, old: "cpu: \"8\"", new: "cpu: \"-8\""}},
			Finding{File: gpuFile, Document: 0, Field: "spec.checks[1].workload.resources.requests.cpu", Message: "-8 is negative"}},
		{"bad resource name", []edit{{file: gpuFile, old: "cpu: \"8\"", new: "\"bad name\": \"8\""}},
			Finding{File: gpuFile, Document: 0, Field: `spec.checks[1].workload.resources.requests["bad name"]`, Message: "is not a resource name"}},
		{"capability with CAP_ prefix", []edit{{file: gpuFile, old: "[SYS_ADMIN]", new: "[CAP_SYS_ADMIN]"}},
			Finding{File: gpuFile, Document: 0, Field: "spec.checks[0].workload.securityContext.capabilities[0]", Message: "not a capability name"}},
		{"capability twice", []edit{{file: gpuFile, old: "[SYS_ADMIN]", new: "[SYS_ADMIN, SYS_ADMIN]"}},
			Finding{File: gpuFile, Document: 0, Field: "spec.checks[0].workload.securityContext.capabilities[1]", Message: "listed twice"}},
		{"host path relative", []edit{{file: gpuFile, old: "- path: /dev/infiniband", new: "- path: dev/infiniband"}},
			Finding{File: gpuFile, Document: 0, Field: "spec.checks[0].workload.hostPaths[0].path", Message: `"dev/infiniband" is not a clean absolute path`}},
		{"host path not clean", []edit{{file: gpuFile, old: "- path: /dev/infiniband", new: "- path: /dev/../etc"}},
			Finding{File: gpuFile, Document: 0, Field: "spec.checks[0].workload.hostPaths[0].path", Message: `"/dev/../etc" is not a clean absolute path`}},
		{"mount path not clean", []edit{{file: gpuFile, old: "mountPath: /dev/infiniband", new: "mountPath: /dev/ib/"}},
			Finding{File: gpuFile, Document: 0, Field: "spec.checks[0].workload.hostPaths[0].mountPath", Message: `"/dev/ib/" is not a clean absolute path`}},
		{"topology level without queue", []edit{{file: gpuFile, old: "        queue: gpu-queue\n", new: ""}},
			Finding{File: gpuFile, Document: 0, Field: "spec.checks[0].workload.requiredTopologyLevel", Message: "needs a queue"}},
		{"pod check through a queue with more than 8 participants", []edit{{file: gpuFile, old: "max: 8", new: "max: 9"}},
			Finding{File: gpuFile, Document: 0, Field: "spec.checks[0].workload.queue", Message: "a pod check through a Kueue queue has at most 8 participants (each participant's pod is pinned to its node, so each is its own Kueue pod set, and a Workload holds at most 8); spec.participants.max is 9"}},
		{"queue not a name", []edit{{file: gpuFile, old: "queue: gpu-queue", new: "queue: GPU_queue"}},
			Finding{File: gpuFile, Document: 0, Field: "spec.checks[0].workload.queue", Message: "not a Kueue LocalQueue name"}},
		{"pod bundle too large for a ConfigMap", []edit{{file: "bundles/gpu/blob.bin", new: strings.Repeat("x", MaxConfigMapBundleSize), beforeDigest: true}},
			Finding{File: gpuFile, Document: 0, Field: "spec.bundle.path", Message: "needs a bundle of at most 1048576 bytes to fit a ConfigMap"}},

		// requests
		{"request names a missing profile", []edit{{file: reqFile, old: "profile: gpu-burnin", new: "profile: nope"}},
			Finding{File: reqFile, Document: 0, Field: "spec.profile", Message: `no CertificationProfile "nope"`}},
		{"request without profile", []edit{{file: reqFile, old: "  profile: gpu-burnin\n", new: ""}},
			Finding{File: reqFile, Document: 0, Field: "spec.profile", Message: "is required"}},
		{"request with nodes and selector", []edit{{file: reqFile, old: "[gpu-node-1, gpu-node-2]", new: "[gpu-node-1, gpu-node-2]\n  count: 2"}},
			Finding{File: reqFile, Document: 0, Field: "spec", Message: "never both"}},
		{"request with neither nodes nor selector", []edit{{file: reqFile, old: "  nodes: [localhost]", new: "  release: false"}},
			Finding{File: reqFile, Document: 2, Field: "spec", Message: "names no nodes"}},
		{"duplicate node", []edit{{file: reqFile, old: "[gpu-node-1, gpu-node-2]", new: "[gpu-node-1, gpu-node-1]"}},
			Finding{File: reqFile, Document: 0, Field: "spec.nodes[1]", Message: `"gpu-node-1" is also spec.nodes[0]`}},
		{"node name invalid", []edit{{file: reqFile, old: "[gpu-node-1, gpu-node-2]", new: "[gpu-node-1, GPU_node]"}},
			Finding{File: reqFile, Document: 0, Field: "spec.nodes[1]", Message: `"GPU_node" is not a node name`}},
		{"more nodes than the profile allows", []edit{{file: reqFile, old: "count: 4", new: "count: 9"}},
			Finding{File: reqFile, Document: 1, Field: "spec.count", Message: "asks for 9 nodes; profile gpu-burnin allows 1 to 8"}},
		{"selector without count", []edit{{file: reqFile, old: "  count: 4\n", new: ""}},
			Finding{File: reqFile, Document: 1, Field: "spec.count", Message: "0 is less than 1: a selector needs a count"}},
		{"count without selector", []edit{{file: reqFile, old: "  selector:\n    node.kubernetes.io/instance-type: h100\n", new: ""}},
			Finding{File: reqFile, Document: 1, Field: "spec.selector", Message: "is required with count"}},
		{"selector value invalid", []edit{{file: reqFile, old: "instance-type: h100", new: "instance-type: \"h 100\""}},
			Finding{File: reqFile, Document: 1, Field: `spec.selector["node.kubernetes.io/instance-type"]`, Message: "is not a label value"}},
		{"local request with two nodes", []edit{{file: reqFile, old: "[localhost]", new: "[localhost, other]"}},
			Finding{File: reqFile, Document: 2, Field: "spec.nodes", Message: "profile cpu-local is local: its only participant is this machine"}},
		{"local request by selector", []edit{{file: reqFile, old: "  nodes: [localhost]", new: "  selector: {a: b}\n  count: 1"}},
			Finding{File: reqFile, Document: 2, Field: "spec.selector", Message: "profile cpu-local is local"}},
		{"duplicate request name", []edit{{file: "requests/again.yaml", new: "apiVersion: signet.dev/v1alpha1\nkind: CertificationRequest\nmetadata:\n  name: rack-1\nspec:\n  profile: cpu-local\n  nodes: [localhost]\n"}},
			Finding{File: reqFile, Document: 0, Field: "metadata.name", Message: "CertificationRequest/rack-1 is defined twice: also in requests/again.yaml[doc 0]"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Render(baseRepo(t, tt.edits...), ".")
			require.NoError(t, err)
			require.NotEmpty(t, r.Findings, "the broken rule must be reported")
			assert.True(t, hasFinding(r.Findings, tt.want), "want %v\ngot:\n%s", tt.want, findingLines(r.Findings))
		})
	}
}

func hasFinding(fs []Finding, want Finding) bool {
	for _, f := range fs {
		if f.File == want.File && f.Document == want.Document && f.Field == want.Field && strings.Contains(f.Message, want.Message) {
			return true
		}
	}
	return false
}

func findingLines(fs []Finding) string {
	var b strings.Builder
	for _, f := range fs {
		b.WriteString(f.String() + "\n")
	}
	return b.String()
}

// A profile that does not parse is reported once, in its own file; the
// requests naming it are not also told that it does not exist.
func TestBrokenProfileIsNotReportedAsMissing(t *testing.T) {
	r, err := Render(baseRepo(t, edit{file: gpuFile, old: "  onFailure: stop", new: "  onFailure: stop\n  retries: 3"}), ".")
	require.NoError(t, err)
	assert.Equal(t, []Finding{{File: gpuFile, Document: 0, Line: 15, Column: 3, Field: "spec.retries", Message: "unknown field"}}, r.Findings)
}
