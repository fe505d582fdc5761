package kube

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"signet.dev/signet/evidence"
	"signet.dev/signet/internal/testing/kubetest"
	"signet.dev/signet/reconciler/backend"
	"signet.dev/signet/specs"
)

const (
	testWorkloadImage = "registry.example/gpu-check@sha256:1111111111111111111111111111111111111111111111111111111111111111"
	testSignetImage   = "registry.example/signet@sha256:2222222222222222222222222222222222222222222222222222222222222222"
)

// testCheckRun is a pod check of run on nodes, with script.
func testCheckRun(run string, script string, nodes ...evidence.Participant) *backend.CheckRun {
	return &backend.CheckRun{
		Cluster: "test", Run: run, Index: 1,
		Check: specs.Check{
			Name: "nccl", Script: "checks/nccl.sh", Backend: specs.BackendPod, GPUCount: 2, Deadline: 600,
			Workload: &specs.Workload{Image: testWorkloadImage},
		},
		Script: []byte(script), ScriptDigest: specs.DigestOf([]byte(script)),
		Nonce: "nonce-1", Deadline: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC),
		Participants: nodes,
	}
}

func twoNodes() []evidence.Participant {
	return []evidence.Participant{{Index: 0, Node: "gpu-a", UID: "uid-a"}, {Index: 1, Node: "gpu-b", UID: "uid-b"}}
}

func TestDescribe(t *testing.T) {
	b := NewPodBackend(nil, PodOptions{Namespace: "signet-checks", SignetImage: testSignetImage})
	c := testCheckRun("run-1", "#!/bin/sh\nexit 0\n", twoNodes()...)
	names, d1, err := b.Describe(c)
	require.NoError(t, err)
	assert.Equal(t, []string{"configmap/signet-run-1-01", "pod/signet-run-1-01-p0", "pod/signet-run-1-01-p1"}, names)

	_, again, err := b.Describe(c)
	require.NoError(t, err)
	assert.Equal(t, d1, again, "rendering is deterministic")

	for _, tt := range []struct {
		name   string
		change func(c *backend.CheckRun)
	}{
		{"script", func(c *backend.CheckRun) {
			c.Script = []byte("#!/bin/sh\nexit 1\n")
			c.ScriptDigest = specs.DigestOf(c.Script)
		}},
		{"nonce", func(c *backend.CheckRun) { c.Nonce = "nonce-2" }},
		{"deadline", func(c *backend.CheckRun) { c.Deadline = c.Deadline.Add(time.Second) }},
		{"node", func(c *backend.CheckRun) { c.Participants[1].Node = "gpu-c" }},
		{"host network", func(c *backend.CheckRun) { c.Check.Workload.HostNetwork = true }},
	} {
		t.Run(tt.name+" changes the digest", func(t *testing.T) {
			c := testCheckRun("run-1", "#!/bin/sh\nexit 0\n", twoNodes()...)
			tt.change(c)
			_, d2, err := b.Describe(c)
			require.NoError(t, err)
			assert.NotEqual(t, d1, d2)
		})
	}

	t.Run("digest is over exactly what is created", func(t *testing.T) {
		r, err := render(c, "signet-checks", testSignetImage)
		require.NoError(t, err)
		d, err := r.digest()
		require.NoError(t, err)
		assert.Equal(t, d1, d)
	})

	t.Run("without a workload image", func(t *testing.T) {
		c := testCheckRun("run-1", "x", twoNodes()...)
		c.Check.Workload = nil
		_, _, err := b.Describe(c)
		assert.ErrorContains(t, err, "no workload image")
	})
}

func TestNames(t *testing.T) {
	long := strings.Repeat("a", 40) + "-" + strings.Repeat("b", 22) // 63 bytes
	require.Len(t, long, 63)
	other := strings.Repeat("a", 40) + "-" + strings.Repeat("b", 21) + "c"
	for _, run := range []string{"r", "run-1", long, other} {
		for _, p := range []int{0, 63} {
			n := podName(run, 12, p)
			assert.Empty(t, validation.IsDNS1123Label(n), "pod name %q is a DNS label", n)
		}
		assert.Empty(t, validation.IsDNS1123Label(checkBaseName(run, 3)))
	}
	assert.Equal(t, "signet-run-1-07-p3", podName("run-1", 7, 3))
	assert.Equal(t, podName(long, 1, 0), podName(long, 1, 0), "stable")
	assert.NotEqual(t, podName(long, 1, 0), podName(other, 1, 0), "the hash keeps shortened names apart")
	assert.NotEqual(t, podName(long, 1, 0), podName(long, 2, 0))
}

func TestRenderedPod(t *testing.T) {
	uid := int64(1000)
	nonRoot := true
	c := testCheckRun("run-1", "#!/bin/sh\nexit 0\n", twoNodes()...)
	c.Check.Stage = "warm"
	c.Check.Workload = &specs.Workload{
		Image: testWorkloadImage,
		Resources: specs.WorkloadResources{
			Requests: map[string]resource.Quantity{"cpu": resource.MustParse("2"), "memory": resource.MustParse("8Gi")},
			Limits:   map[string]resource.Quantity{"memory": resource.MustParse("8Gi")},
		},
		SecurityContext: &specs.WorkloadSecurity{Capabilities: []string{"IPC_LOCK", "SYS_PTRACE"}, RunAsUser: &uid, RunAsNonRoot: &nonRoot},
		HostNetwork:     true,
		HostPaths:       []specs.HostPathMount{{Path: "/usr/lib/nvidia", MountPath: "/nvidia"}},
	}
	r, err := render(c, "ns", testSignetImage)
	require.NoError(t, err)

	cm := r.ConfigMap
	assert.Equal(t, "signet-run-1-01", cm.Name)
	assert.Equal(t, "ns", cm.Namespace)
	require.NotNil(t, cm.Immutable)
	assert.True(t, *cm.Immutable)
	assert.Equal(t, map[string]string{"nccl.sh": string(c.Script)}, cm.Data)
	assert.Empty(t, cm.OwnerReferences)
	wantLabels := map[string]string{RunLabel: "run-1", ClusterLabel: "test", CheckIndexLabel: "1", ManagedByLabel: ManagedBy}
	assert.Equal(t, wantLabels, cm.Labels)

	require.Len(t, r.Pods, 2)
	pod := r.Pods[1]
	spec := pod.Spec
	assert.Equal(t, "signet-run-1-01-p1", pod.Name)
	for k, v := range wantLabels {
		assert.Equal(t, v, pod.Labels[k], k)
	}
	assert.Equal(t, "1", pod.Labels[ParticipantLabel])
	assert.Empty(t, pod.OwnerReferences)
	assert.Equal(t, corev1.RestartPolicyNever, spec.RestartPolicy)
	assert.Equal(t, int64(600), *spec.ActiveDeadlineSeconds)
	assert.Equal(t, "2030-01-02T03:04:05Z", pod.Annotations[DeadlineAnnotation])
	assert.False(t, *spec.AutomountServiceAccountToken, "no service-account token")
	assert.False(t, *spec.EnableServiceLinks)
	assert.True(t, spec.HostNetwork)
	assert.Equal(t, []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{
		Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"gpu-b"},
	}}}}, spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms)
	assert.Nil(t, spec.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution)
	assert.ElementsMatch(t, []corev1.Toleration{
		{Key: ReservationTaintKey, Operator: corev1.TolerationOpEqual, Value: "run-1", Effect: corev1.TaintEffectNoSchedule},
		{Key: UnschedulableTaintKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
	}, spec.Tolerations)

	require.Len(t, spec.InitContainers, 1)
	init := spec.InitContainers[0]
	assert.Equal(t, testSignetImage, init.Image)
	assert.Equal(t, []string{"/signet", "install", "/signet-bin/signet"}, init.Command)
	assert.False(t, *init.SecurityContext.AllowPrivilegeEscalation)
	assert.True(t, *init.SecurityContext.RunAsNonRoot)
	assert.Empty(t, init.Resources.Limits[GPUResource], "the installer gets no GPU")

	require.Len(t, spec.Containers, 1)
	ctr := spec.Containers[0]
	assert.Equal(t, testWorkloadImage, ctr.Image)
	assert.Equal(t, []string{"/signet-bin/signet", "exec", "--script", "/signet-script/nccl.sh", "--digest", string(c.ScriptDigest),
		"--work-dir", "/signet-work", "--termination-log", "/dev/termination-log"}, ctr.Command)
	assert.Empty(t, ctr.Args)
	assert.Equal(t, corev1.TerminationMessageReadFile, ctr.TerminationMessagePolicy)
	assert.Equal(t, "/dev/termination-log", ctr.TerminationMessagePath)
	var env []string
	for _, e := range ctr.Env {
		assert.Nil(t, e.ValueFrom)
		env = append(env, e.Name+"="+e.Value)
	}
	assert.Equal(t, []string{
		"SIGNET_CHECK_INDEX=1", "SIGNET_CHECK_NAME=nccl", "SIGNET_GPU_COUNT=2", "SIGNET_NONCE=nonce-1",
		"SIGNET_PARTICIPANTS=2", "SIGNET_PARTICIPANT_INDEX=1", "SIGNET_RUN_ID=run-1", "SIGNET_STAGE_NAME=warm",
	}, env, "DESIGN §4's variables, sorted, without SIGNET_RESULT_FILE")
	assert.Empty(t, ctr.EnvFrom)

	two := resource.MustParse("2")
	assert.True(t, two.Equal(ctr.Resources.Requests[GPUResource]), "GPU request = gpuCount")
	assert.True(t, two.Equal(ctr.Resources.Limits[GPUResource]), "GPU limit = gpuCount")
	assert.True(t, resource.MustParse("8Gi").Equal(ctr.Resources.Requests["memory"]))
	assert.True(t, resource.MustParse("2").Equal(ctr.Resources.Requests["cpu"]))
	assert.True(t, resource.MustParse("8Gi").Equal(ctr.Resources.Limits["memory"]))

	sc := ctr.SecurityContext
	assert.False(t, *sc.Privileged)
	assert.False(t, *sc.AllowPrivilegeEscalation)
	assert.Equal(t, []corev1.Capability{"ALL"}, sc.Capabilities.Drop)
	assert.Equal(t, []corev1.Capability{"IPC_LOCK", "SYS_PTRACE"}, sc.Capabilities.Add)
	assert.Equal(t, int64(1000), *sc.RunAsUser)
	assert.True(t, *sc.RunAsNonRoot)

	mounts := map[string]corev1.VolumeMount{}
	for _, m := range ctr.VolumeMounts {
		mounts[m.MountPath] = m
	}
	assert.True(t, mounts["/nvidia"].ReadOnly, "host paths are read-only")
	assert.True(t, mounts["/signet-script"].ReadOnly)
	assert.True(t, mounts["/signet-bin"].ReadOnly)
	vols := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		vols[v.Name] = v
	}
	require.NotNil(t, vols[mounts["/nvidia"].Name].HostPath)
	assert.Equal(t, "/usr/lib/nvidia", vols[mounts["/nvidia"].Name].HostPath.Path)
	require.NotNil(t, vols[scriptVolume].ConfigMap)
	assert.Equal(t, cm.Name, vols[scriptVolume].ConfigMap.Name)
	assert.Len(t, spec.Volumes, 4, "bin, script, work and one host path; nothing else")

	for _, k := range []string{KueueQueueLabel, KueuePodGroupLabel} {
		assert.NotContains(t, pod.Labels, k, "no Kueue label without a queue")
	}
	for _, k := range []string{KueuePodGroupTotalCount, KueueRequiredTopology, KueueRetriableInGroup} {
		assert.NotContains(t, pod.Annotations, k, "no Kueue annotation without a queue")
	}

	t.Run("privileged", func(t *testing.T) {
		c := testCheckRun("run-1", "x", twoNodes()...)
		c.Check.Workload.SecurityContext = &specs.WorkloadSecurity{Privileged: true}
		r, err := render(c, "ns", testSignetImage)
		require.NoError(t, err)
		sc := r.Pods[0].Spec.Containers[0].SecurityContext
		assert.True(t, *sc.Privileged)
		assert.True(t, *sc.AllowPrivilegeEscalation)
		assert.Nil(t, sc.RunAsUser)
		assert.Nil(t, sc.RunAsNonRoot)
	})
	t.Run("no security context asked", func(t *testing.T) {
		c := testCheckRun("run-1", "x", twoNodes()...)
		c.Check.GPUCount = 0
		r, err := render(c, "ns", testSignetImage)
		require.NoError(t, err)
		ctr := r.Pods[0].Spec.Containers[0]
		assert.False(t, *ctr.SecurityContext.Privileged)
		assert.False(t, *ctr.SecurityContext.AllowPrivilegeEscalation)
		assert.Equal(t, []corev1.Capability{"ALL"}, ctr.SecurityContext.Capabilities.Drop)
		assert.Empty(t, ctr.SecurityContext.Capabilities.Add)
		assert.False(t, r.Pods[0].Spec.HostNetwork)
		assert.NotContains(t, ctr.Resources.Limits, corev1.ResourceName(GPUResource))
	})
	t.Run("binary script goes to binaryData", func(t *testing.T) {
		c := testCheckRun("run-1", "#!/bin/sh\n\xff\n", twoNodes()...)
		r, err := render(c, "ns", testSignetImage)
		require.NoError(t, err)
		assert.Empty(t, r.ConfigMap.Data)
		assert.Equal(t, c.Script, r.ConfigMap.BinaryData["nccl.sh"])
	})
}

func TestRenderedKueue(t *testing.T) {
	for _, tt := range []struct {
		name, queue, level string
	}{
		{"queue", "gpu-queue", ""},
		{"queue and topology", "gpu-queue", "cloud.provider.com/topology-block"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := testCheckRun("run-1", "x", twoNodes()...)
			c.Check.Workload.Queue, c.Check.Workload.RequiredTopologyLevel = tt.queue, tt.level
			r, err := render(c, "ns", testSignetImage)
			require.NoError(t, err)
			for _, p := range r.Pods {
				assert.Equal(t, tt.queue, p.Labels[KueueQueueLabel])
				assert.Equal(t, "false", p.Annotations[KueueRetriableInGroup], "signet never replaces a pod of the group")
				assert.Equal(t, "signet-run-1-01", p.Labels[KueuePodGroupLabel], "one pod group per check")
				assert.Equal(t, "2", p.Annotations[KueuePodGroupTotalCount])
				if tt.level == "" {
					assert.NotContains(t, p.Annotations, KueueRequiredTopology)
				} else {
					assert.Equal(t, tt.level, p.Annotations[KueueRequiredTopology])
				}
			}
			assert.NotContains(t, r.ConfigMap.Labels, KueueQueueLabel, "the ConfigMap is not a Kueue workload")
		})
	}
}

func TestResultFromTermination(t *testing.T) {
	for _, tt := range []struct {
		name   string
		in     corev1.ContainerStateTerminated
		term   specs.Termination
		result string
	}{
		{"pass", corev1.ContainerStateTerminated{ExitCode: 0, Message: passResult, Reason: "Completed"},
			specs.Termination{Started: true, Exited: true, ExitCode: 0}, passResult},
		{"no message", corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error"},
			specs.Termination{Started: true, Exited: true, ExitCode: 1}, ""},
		{"refusal", corev1.ContainerStateTerminated{ExitCode: 0, Message: RefusalPrefix + "no result: x\n"},
			specs.Termination{Started: true, Exited: true, ExitCode: 0, ResultRefused: RefusalPrefix + "no result: x"}, ""},
		{"signal", corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled"},
			specs.Termination{Started: true, Signal: "SIGKILL"}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			term, result, _ := resultFromTermination(&tt.in)
			assert.Equal(t, tt.term, term)
			if tt.result == "" {
				assert.Nil(t, result)
			} else {
				assert.Equal(t, tt.result, string(result))
			}
		})
	}
}

// e2e: the pod backend against a real control plane, with the test agent
// playing the kubelet and the signet binary built from this tree standing
// for the signet image.

var (
	buildOnce   sync.Once
	signetImage string
	buildErr    error
)

// signetImageDir builds ./cmd/signet once into a directory standing for
// the signet image's root filesystem (the binary at /signet).
func signetImageDir(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "signet-image-")
		if err != nil {
			buildErr = err
			return
		}
		// Built as `make build` builds it, so the build cache serves both.
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, "signet"), "signet.dev/signet/cmd/signet")
		begin := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/signet: %v\n%s", err, out)
			return
		}
		t.Logf("built the signet image's binary in %v", time.Since(begin).Round(time.Millisecond))
		signetImage = dir
	})
	require.NoError(t, buildErr)
	return signetImage
}

func TestMain(m *testing.M) {
	code := m.Run()
	if signetImage != "" {
		os.RemoveAll(signetImage)
	}
	os.Exit(code)
}

// resultScript writes a result with verdict for its exit code and exits
// with it: Pass and 0 unless FAIL_NODE names the pod's participant index.
const resultScript = `#!/bin/sh
verdict=Pass code=0
if [ "$SIGNET_PARTICIPANT_INDEX" = "${FAIL_INDEX:-none}" ]; then verdict=Fail code=1; fi
echo "participant $SIGNET_PARTICIPANT_INDEX of $SIGNET_PARTICIPANTS: $verdict"
printf '{"run":"%s","check":"%s","nonce":"%s","verdict":"%s","summary":"participant %s"}' \
  "$SIGNET_RUN_ID" "$SIGNET_CHECK_NAME" "$SIGNET_NONCE" "$verdict" "$SIGNET_PARTICIPANT_INDEX" > "$SIGNET_RESULT_FILE"
exit $code
`

type e2e struct {
	env   *kubetest.Env
	agent *kubetest.Agent
	nodes []evidence.Participant
	b     *PodBackend
}

func startE2E(t *testing.T, misbehave map[string]kubetest.Misbehaviour) *e2e {
	t.Helper()
	img := signetImageDir(t)
	env := kubetest.Start(t)
	ctx := t.Context()
	var parts []evidence.Participant
	for i, name := range []string{"gpu-a", "gpu-b"} {
		n := env.CreateNode(ctx, kubetest.NodeOptions{Name: name, GPUs: 8})
		parts = append(parts, evidence.Participant{Index: i, Node: name, UID: string(n.UID)})
	}
	agent := env.StartAgent(t, kubetest.AgentOptions{
		Images: map[string]string{
			testSignetImage: img,
			// The workload image is this machine's root filesystem: the
			// scripts use its /bin/sh.
			testWorkloadImage: "/",
		},
		Misbehave: kubetest.MisbehaveByName(misbehave),
	})
	// Node UIDs come from a Fleet's cache, as the reconciler wires it.
	fleet := testFleet(env)
	require.True(t, fleet.StartCache(t.Context(), 30*time.Second))
	b := NewPodBackend(env.Client, PodOptions{Namespace: "default", SignetImage: testSignetImage, PollInterval: 200 * time.Millisecond, CleanupTimeout: time.Minute,
		NodeUIDs: fleet.CachedNodeUID})
	return &e2e{env: env, agent: agent, nodes: parts, b: b}
}

func (e *e2e) checkRun(run, script string, deadline time.Duration) *backend.CheckRun {
	c := testCheckRun(run, script, e.nodes...)
	c.Check.GPUCount = 1
	c.Check.Deadline = specs.Seconds(deadline / time.Second)
	c.Deadline = time.Now().Add(deadline)
	return c
}

func (e *e2e) countPods(t *testing.T, c *backend.CheckRun) int {
	t.Helper()
	l, err := e.env.Client.CoreV1().Pods("default").List(t.Context(), metav1.ListOptions{LabelSelector: checkSelector(c)})
	require.NoError(t, err)
	return len(l.Items)
}

func (e *e2e) cleanup(t *testing.T, c *backend.CheckRun) {
	t.Helper()
	require.NoError(t, e.b.Cleanup(t.Context(), c))
	assert.Zero(t, e.countPods(t, c), "no pod left")
	_, err := e.env.Client.CoreV1().ConfigMaps("default").Get(t.Context(), checkBaseName(c.Run, c.Index), metav1.GetOptions{})
	assert.True(t, err != nil && strings.Contains(err.Error(), "not found"), "configmap removed: %v", err)
}

func evaluate(c *backend.CheckRun, p backend.ParticipantReport) specs.Outcome {
	return specs.Evaluate(specs.Expect{Run: c.Run, Check: c.Check.Name, Nonce: c.Nonce}, p.Termination, p.Result)
}

// TestPodBackendE2E runs the backend's cases on one control plane (its
// start-up dominates): pass on two nodes, one node failing, a pod lost
// behind signet's back, the deadline, and adoption.
func TestPodBackendE2E(t *testing.T) {
	e := startE2E(t, map[string]kubetest.Misbehaviour{
		podName("lose", 1, 1):     kubetest.LosePod,
		podName("deadline", 1, 0): kubetest.NeverTerminate,
	})

	// What is kept of a log is its end, whatever the length of the log
	// and of its lines: the kubelet answers the last lines from their
	// first byte, so a window of lines longer than the read bound must be
	// asked for again with fewer lines, not cut at its start.
	t.Run("log tail is the end", func(t *testing.T) {
		const keep = 1024
		for name, script := range map[string]string{
			"short lines": `i=0; while [ $i -lt 20000 ]; do echo "line $i"; i=$((i+1)); done; echo end`,
			"long lines":  `x=$(head -c 2000 /dev/zero | tr '\0' x); i=0; while [ $i -lt 300 ]; do echo "$i $x"; i=$((i+1)); done; echo end`,
			"short log":   `echo "only this"; echo end`,
		} {
			c := e.checkRun("logtail", "#!/bin/sh\n"+script+"\n"+`printf '{"run":"%s","check":"%s","nonce":"%s","verdict":"Pass"}' "$SIGNET_RUN_ID" "$SIGNET_CHECK_NAME" "$SIGNET_NONCE" > "$SIGNET_RESULT_FILE"`, 2*time.Minute)
			c.Participants = c.Participants[:1]
			_, err := e.b.Run(t.Context(), c)
			require.NoError(t, err, name)
			full := e.agent.Logs("default", podName(c.Run, c.Index, 0), checkContainerName)
			require.True(t, strings.HasSuffix(full, "end\n"), "%s: the agent ran the script: %q", name, full[max(0, len(full)-100):])
			got, err := logTail(t.Context(), e.env.Client, "default", podName(c.Run, c.Index, 0), keep)
			require.NoError(t, err, name)
			want := full[max(0, len(full)-keep):]
			assert.Equal(t, want, string(got), "%s: the kept tail must be the log's last %d bytes", name, keep)
			e.cleanup(t, c)
		}
	})

	t.Run("pass", func(t *testing.T) {
		c := e.checkRun("pass", resultScript, 2*time.Minute)
		_, rendered, err := e.b.Describe(c)
		require.NoError(t, err)
		rep, err := e.b.Run(t.Context(), c)
		require.NoError(t, err)
		require.Len(t, rep.Participants, 2)
		for i, p := range rep.Participants {
			assert.Equal(t, e.nodes[i].Node, p.Node)
			assert.Equal(t, e.nodes[i].Node, p.Identity.Node)
			assert.Equal(t, e.nodes[i].UID, p.Identity.NodeUID)
			assert.True(t, strings.HasPrefix(p.Identity.Workload, "pod:default/"+podName("pass", 1, i)+"@"), p.Identity.Workload)
			assert.True(t, p.Termination.Exited)
			assert.Equal(t, 0, p.Termination.ExitCode)
			out := evaluate(c, p)
			assert.Equal(t, specs.VerdictPass, out.Verdict, "%s: %s (termination %+v)", p.Node, out.Reason, p.Termination)
			t.Logf("%s: termination %+v", p.Node, p.Termination)
		}
		assert.False(t, rep.StartedAt.After(rep.EndedAt))
		for i, p := range rep.Participants {
			// The pod's log, read through pods/log from the node's kubelet
			// API, is the participant's stdout; no note says it was not.
			assert.Contains(t, string(p.Stdout), fmt.Sprintf("participant %d of 2: Pass\n", i))
			assert.NotContains(t, p.Termination.Reason, "logs not read")
		}

		// What was created is what Describe digested.
		r, err := render(c, "default", testSignetImage)
		require.NoError(t, err)
		for i, want := range r.Pods {
			got, err := e.env.Client.CoreV1().Pods("default").Get(t.Context(), want.Name, metav1.GetOptions{})
			require.NoError(t, err)
			assert.Equal(t, want.Spec.Containers[0].Command, got.Spec.Containers[0].Command, "pod %d", i)
			assert.Equal(t, want.Spec.Affinity, got.Spec.Affinity)
		}
		d, err := r.digest()
		require.NoError(t, err)
		assert.Equal(t, rendered, d)

		// Run never adopts: a second Run of the same check is refused.
		_, err = e.b.Run(t.Context(), c)
		assert.ErrorContains(t, err, "already exists")

		t.Run("adopt finds the finished check", func(t *testing.T) {
			rep, found, err := e.b.Adopt(t.Context(), c)
			require.NoError(t, err)
			require.True(t, found)
			for _, p := range rep.Participants {
				assert.Equal(t, specs.VerdictPass, evaluate(c, p).Verdict)
			}
		})
		e.cleanup(t, c)
		t.Run("adopt after cleanup finds nothing", func(t *testing.T) {
			_, found, err := e.b.Adopt(t.Context(), c)
			require.NoError(t, err)
			assert.False(t, found)
		})
	})

	t.Run("one node fails", func(t *testing.T) {
		script := strings.Replace(resultScript, "${FAIL_INDEX:-none}", "1", 1)
		c := e.checkRun("fail", script, 2*time.Minute)
		rep, err := e.b.Run(t.Context(), c)
		require.NoError(t, err)
		require.Len(t, rep.Participants, 2)
		assert.Equal(t, specs.VerdictPass, evaluate(c, rep.Participants[0]).Verdict)
		p := rep.Participants[1]
		assert.Equal(t, 1, p.Termination.ExitCode)
		out := evaluate(c, p)
		assert.Equal(t, specs.VerdictFail, out.Verdict, out.Reason)
		e.cleanup(t, c)
	})

	t.Run("pod lost behind signet's back", func(t *testing.T) {
		script := "#!/bin/sh\nsleep 3\n" + strings.TrimPrefix(resultScript, "#!/bin/sh\n")
		c := e.checkRun("lose", script, 2*time.Minute)
		rep, err := e.b.Run(t.Context(), c)
		require.NoError(t, err)
		assert.Equal(t, specs.VerdictPass, evaluate(c, rep.Participants[0]).Verdict)
		p := rep.Participants[1]
		assert.Contains(t, p.Termination.Reason, "pod deleted behind signet's back")
		out := evaluate(c, p)
		assert.Equal(t, specs.VerdictError, out.Verdict)
		assert.Contains(t, out.Reason, "pod deleted behind signet's back")
		assert.Nil(t, p.Result)
		// Never recreated: only the surviving pod is left.
		assert.Equal(t, 1, e.countPods(t, c))
		e.cleanup(t, c)
	})

	t.Run("deadline", func(t *testing.T) {
		// Participant 0 never terminates, participant 1 sleeps past the
		// deadline; the kubelet-side deadline is far away (activeDeadline
		// is the check's whole deadline), so signet's own deadline decides.
		script := "#!/bin/sh\nsleep 60\n"
		c := e.checkRun("deadline", script, 4*time.Second)
		c.Check.Deadline = 600
		begin := time.Now()
		rep, err := e.b.Run(t.Context(), c)
		require.NoError(t, err)
		assert.Less(t, time.Since(begin), 30*time.Second, "Run returns at the check deadline")
		for _, p := range rep.Participants {
			out := evaluate(c, p)
			assert.Equal(t, specs.VerdictError, out.Verdict)
			assert.True(t, p.Termination.DeadlineExceeded, "%s: %+v", p.Node, p.Termination)
			assert.Contains(t, out.Reason, "deadline exceeded")
		}
		assert.Equal(t, 2, e.countPods(t, c), "nothing is deleted at the deadline")

		t.Run("adopt past the deadline reports it without waiting", func(t *testing.T) {
			rep, found, err := e.b.Adopt(t.Context(), c)
			require.NoError(t, err)
			require.True(t, found)
			for _, p := range rep.Participants {
				assert.True(t, p.Termination.DeadlineExceeded)
			}
		})
		// The never-terminating pod needs a forced deletion: the agent
		// never confirms it. Cleanup's foreground deletion of the other
		// goes through.
		force := int64(0)
		err = e.env.Client.CoreV1().Pods("default").Delete(context.Background(), podName("deadline", 1, 0), metav1.DeleteOptions{GracePeriodSeconds: &force})
		require.NoError(t, err)
		e.cleanup(t, c)
	})

	t.Run("node identity differs from the admitted one", func(t *testing.T) {
		c := e.checkRun("identity", resultScript, 2*time.Minute)
		c.Participants = slices.Clone(c.Participants)
		c.Participants[1].UID = "uid-of-a-node-deleted-since"
		rep, err := e.b.Run(t.Context(), c)
		require.NoError(t, err)
		p := rep.Participants[1]
		assert.Equal(t, e.nodes[1].UID, p.Identity.NodeUID, "the UID observed, not the admitted one")
		assert.Contains(t, p.Termination.Reason, "admitted uid uid-of-a-node-deleted-since")
		assert.Equal(t, e.nodes[0].UID, rep.Participants[0].Identity.NodeUID)
		e.cleanup(t, c)
	})

	t.Run("no result is refused, never a pass", func(t *testing.T) {
		c := e.checkRun("noresult", "#!/bin/sh\nexit 0\n", 2*time.Minute)
		rep, err := e.b.Run(t.Context(), c)
		require.NoError(t, err)
		for _, p := range rep.Participants {
			assert.Nil(t, p.Result)
			assert.Equal(t, RefusalPrefix+"no result: the check wrote no result file", p.Termination.ResultRefused)
			out := evaluate(c, p)
			assert.Equal(t, specs.VerdictError, out.Verdict)
			assert.Contains(t, out.Reason, "result refused")
		}
		e.cleanup(t, c)
	})

	t.Run("cancel reports what was observed", func(t *testing.T) {
		c := e.checkRun("cancel", "#!/bin/sh\nsleep 60\n", 2*time.Minute)
		ctx, cancel := context.WithCancel(t.Context())
		go func() {
			time.Sleep(2 * time.Second)
			cancel()
		}()
		rep, err := e.b.Run(ctx, c)
		require.NoError(t, err)
		for _, p := range rep.Participants {
			assert.True(t, p.Termination.Canceled, "%+v", p.Termination)
			assert.Equal(t, specs.VerdictCanceled, evaluate(c, p).Verdict)
		}
		e.cleanup(t, c)
	})
}

// TestPodCleanupFollowsDeletion: Cleanup lists the check's pods once and
// then follows their deletion on a watch, so it ends when the last pod
// goes and not at a poll, and sends no list a poll while a pod takes
// long to go. The pods are created directly with a finalizer of the
// test's (no kubelet here: a real API server with etcd), which keeps
// them through ten poll intervals after Cleanup deleted them.
func TestPodCleanupFollowsDeletion(t *testing.T) {
	env := kubetest.Start(t)
	ctx := t.Context()
	cs, _, reqs := countedClients(t, env)
	b := NewPodBackend(cs, PodOptions{Namespace: "default", SignetImage: testSignetImage, PollInterval: 100 * time.Millisecond, CleanupTimeout: time.Minute})
	c := testCheckRun("cleanup", "#!/bin/sh\nexit 0\n", twoNodes()...)
	const hold = "signet.dev/test-hold"
	for i := range c.Participants {
		_, err := env.Client.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: podName(c.Run, c.Index, i), Labels: objectLabels(c), Finalizers: []string{hold}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "check", Image: testWorkloadImage}}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	_, err := env.Client.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: checkBaseName(c.Run, c.Index), Labels: objectLabels(c)}}, metav1.CreateOptions{})
	require.NoError(t, err)
	reqs.snapshot()

	cleanupHeld(t, func() error { return b.Cleanup(ctx, c) }, b.o.PollInterval, func() {
		for i := range c.Participants {
			_, err := env.Client.CoreV1().Pods("default").Patch(ctx, podName(c.Run, c.Index, i), types.JSONPatchType,
				[]byte(`[{"op":"remove","path":"/metadata/finalizers"}]`), metav1.PatchOptions{})
			require.NoError(t, err)
		}
	})
	counts, _ := reqs.snapshot()
	assert.Regexp(t, `(^|, )list pods=1(,|$)`, counts, "Cleanup listed the pods again while waiting")
	assert.Regexp(t, `(^|, )watch pods=1(,|$)`, counts, "Cleanup did not follow the pods on one watch")
	l, err := env.Client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: checkSelector(c)})
	require.NoError(t, err)
	assert.Empty(t, l.Items)
}

// cleanupHeld runs cleanup while the objects it deletes are held by a
// finalizer: it must not return within ten poll intervals; then release
// lets them go, and it must return without error within 30 s.
func cleanupHeld(t *testing.T, cleanup func() error, poll time.Duration, release func()) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cleanup() }()
	time.Sleep(10 * poll)
	select {
	case err := <-done:
		t.Fatalf("Cleanup returned (%v) while what it deletes was still there", err)
	default:
	}
	release()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("Cleanup did not see what it deletes go")
	}
}
