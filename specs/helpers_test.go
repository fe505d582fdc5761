package specs

import (
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"
)

const testImage = "registry.example.com/burn/gpu:1.2@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

const baseGPUProfile = `apiVersion: signet.dev/v1alpha1
kind: CertificationProfile
metadata:
  name: gpu-burnin
  labels:
    team: fleet
spec:
  bundle:
    path: bundles/gpu
    digest: {{GPU}}
  participants:
    min: 1
    max: 8
  onFailure: stop
  checks:
    - name: dcgm-diag
      script: run.sh
      backend: pod
      gpuCount: 8
      deadline: "600s"
      stage: diag
      workload:
        image: ` + testImage + `
        resources:
          requests:
            cpu: "4"
            memory: 16Gi
          limits:
            memory: 32Gi
        securityContext:
          capabilities: [SYS_ADMIN]
        hostPaths:
          - path: /dev/infiniband
            mountPath: /dev/infiniband
        queue: gpu-queue
        requiredTopologyLevel: topology.kubernetes.io/zone
    - name: nccl
      script: lib/nccl.sh
      backend: mpijob
      gpuCount: 4
      deadline: "900s"
      workload:
        image: ` + testImage + `
        resources:
          requests:
            cpu: "8"
            memory: 8Gi
`

const baseLocalProfile = `apiVersion: signet.dev/v1alpha1
kind: CertificationProfile
metadata:
  name: cpu-local
spec:
  bundle:
    path: bundles/local
    digest: {{LOCAL}}
  participants:
    min: 1
    max: 1
  checks:
    - name: cpu
      script: cpu.sh
      backend: local
      deadline: "60s"
`

const baseRequests = `apiVersion: signet.dev/v1alpha1
kind: CertificationRequest
metadata:
  name: rack-1
spec:
  profile: gpu-burnin
  nodes: [gpu-node-1, gpu-node-2]
---
apiVersion: signet.dev/v1alpha1
kind: CertificationRequest
metadata:
  name: rack-2
spec:
  profile: gpu-burnin
  selector:
    node.kubernetes.io/instance-type: h100
  count: 4
---
apiVersion: signet.dev/v1alpha1
kind: CertificationRequest
metadata:
  name: this-machine
spec:
  profile: cpu-local
  nodes: [localhost]
`

// baseRepo returns a valid spec repository: two profiles with their
// bundles, three requests, and a non-signet document that must be ignored.
// edits replace, per file, the first occurrence of old with new, before the
// placeholders {{GPU}} and {{LOCAL}} are replaced with the bundle digests.
func baseRepo(t testing.TB, edits ...edit) fstest.MapFS {
	t.Helper()
	m := fstest.MapFS{
		"bundles/gpu/run.sh":       {Data: []byte("#!/bin/sh\necho gpu\n"), Mode: 0o755},
		"bundles/gpu/lib/nccl.sh":  {Data: []byte("#!/bin/sh\necho nccl\n"), Mode: 0o755},
		"bundles/gpu/values.yaml":  {Data: []byte("not: [valid yaml\n")},
		"bundles/local/cpu.sh":     {Data: []byte("#!/bin/sh\necho cpu\n"), Mode: 0o755},
		"profiles/configmap.yaml":  {Data: []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\ndata:\n  a: &a b\n")},
		"profiles/gpu.yaml":        {Data: []byte(baseGPUProfile)},
		"profiles/local.yml":       {Data: []byte(baseLocalProfile)},
		"requests/requests.yaml":   {Data: []byte(baseRequests)},
		".signet/approvals/x.yaml": {Data: []byte("kind: CertificationProfile\n")},
	}
	for _, e := range edits {
		if e.beforeDigest {
			m[e.file] = &fstest.MapFile{Data: []byte(e.new)}
		}
	}
	gpu, _, err := BundleDigest(m, "bundles/gpu")
	require.NoError(t, err)
	local, _, err := BundleDigest(m, "bundles/local")
	require.NoError(t, err)
	for _, e := range edits {
		if e.beforeDigest {
			continue
		}
		f, ok := m[e.file]
		if !ok {
			m[e.file] = &fstest.MapFile{Data: []byte(e.new)}
			continue
		}
		require.Contains(t, string(f.Data), e.old, "edit of %s", e.file)
		f.Data = []byte(strings.Replace(string(f.Data), e.old, e.new, 1))
	}
	for _, f := range m {
		s := strings.ReplaceAll(string(f.Data), "{{GPU}}", string(gpu))
		f.Data = []byte(strings.ReplaceAll(s, "{{LOCAL}}", string(local)))
	}
	return m
}

// edit replaces old with new in file; a file not in the repository is
// created with new as its contents. An edit beforeDigest writes file
// before the bundle digests are computed, so the pins match it.
type edit struct {
	file, old, new string
	beforeDigest   bool
}
