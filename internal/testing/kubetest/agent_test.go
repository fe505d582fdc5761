package kubetest

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"signet.dev/signet/internal/procutil"
)

const testImage = "registry.invalid/signet-check@sha256:0000000000000000000000000000000000000000000000000000000000000000"

// imageDir makes a directory standing for testImage's root filesystem.
func imageDir(t *testing.T) string {
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "payload"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "payload", "data.txt"), []byte("hello-from-image"), 0o644))
	return dir
}

// shPod is a pod pinned to node whose one container runs sh -c script with
// args.
func shPod(name, node, script string, args ...string) *corev1.Pod {
	p := pinnedPod(name, node)
	p.Spec.Containers[0].Image = testImage
	p.Spec.Containers[0].Command = append([]string{"sh", "-c", script, "sh"}, args...)
	return p
}

func waitPod(t *testing.T, env *Env, name string, within time.Duration, cond func(c *assert.CollectT, p *corev1.Pod)) *corev1.Pod {
	t.Helper()
	var out *corev1.Pod
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		p, err := env.Client.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
		require.NoError(c, err)
		cond(c, p)
		out = p
	}, within, 100*time.Millisecond)
	return out
}

func waitGone(t *testing.T, env *Env, name string, within time.Duration) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, err := env.Client.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
		assert.True(c, apierrors.IsNotFound(err), "pod %s still there (%v)", name, err)
	}, within, 100*time.Millisecond)
}

var pidLine = regexp.MustCompile(`pid=(\d+)`)

// pidOf waits for "pid=N" in the container's log.
func pidOf(t *testing.T, a *Agent, pod string) int {
	t.Helper()
	var pid int
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		m := pidLine.FindStringSubmatch(a.Logs("default", pod, "check"))
		require.NotNil(c, m)
		pid, _ = strconv.Atoi(m[1])
	}, 30*time.Second, 50*time.Millisecond)
	return pid
}

func terminated(c *assert.CollectT, s []corev1.ContainerStatus) *corev1.ContainerStateTerminated {
	require.Len(c, s, 1)
	require.NotNil(c, s[0].State.Terminated)
	return s[0].State.Terminated
}

// TestAgent runs pods through the agent on simulated GPU nodes against the
// real control plane.
func TestAgent(t *testing.T) {
	env := Start(t)
	ctx := t.Context()
	cs := env.Client
	env.CreateNode(ctx, NodeOptions{Name: "gpu-1", GPUs: 8})
	env.CreateNode(ctx, NodeOptions{Name: "gpu-2", GPUs: 8})
	a := env.StartAgent(t, AgentOptions{
		Nodes:     []string{"gpu-1", "gpu-2"},
		Images:    map[string]string{testImage: imageDir(t)},
		Misbehave: MisbehaveByName(map[string]Misbehaviour{"lost": LosePod, "stuck": NeverTerminate}),
	})

	t.Run("init container, volumes and termination message", func(t *testing.T) {
		_, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "script"},
			Data:       map[string]string{"input.txt": "from-configmap"},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		p := shPod("fails", "gpu-1",
			`echo "node=$NODE"; printf '%s|%s' "$(cat "$1")" "$(cat "$2")" > "$3"; exit 1`,
			"/work/data.txt", "/cfg/in/input.txt", "/dev/termination-log")
		p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "NODE", ValueFrom: &corev1.EnvVarSource{
			FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"},
		}}}
		p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "work", MountPath: "/work"}, {Name: "cfg", MountPath: "/cfg/in"}}
		p.Spec.InitContainers = []corev1.Container{{
			Name: "copy", Image: testImage,
			Command:      []string{"cp", "/payload/data.txt", "/work/data.txt"},
			VolumeMounts: []corev1.VolumeMount{{Name: "work", MountPath: "/work"}},
		}}
		p.Spec.Volumes = []corev1.Volume{
			{Name: "work", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: "script"},
			}}},
		}
		_, err = cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{})
		require.NoError(t, err)
		got := waitPod(t, env, "fails", 60*time.Second, func(c *assert.CollectT, p *corev1.Pod) {
			require.Equal(c, corev1.PodFailed, p.Status.Phase)
		})
		assert.Equal(t, PodIP, got.Status.PodIP)
		assert.NotNil(t, got.Status.StartTime)
		require.Len(t, got.Status.InitContainerStatuses, 1)
		init := got.Status.InitContainerStatuses[0].State.Terminated
		require.NotNil(t, init)
		assert.Equal(t, int32(0), init.ExitCode)
		assert.Equal(t, "Completed", init.Reason)
		require.Len(t, got.Status.ContainerStatuses, 1)
		main := got.Status.ContainerStatuses[0].State.Terminated
		require.NotNil(t, main)
		assert.Equal(t, int32(1), main.ExitCode)
		assert.Equal(t, "Error", main.Reason)
		assert.Equal(t, "hello-from-image|from-configmap", main.Message)
		assert.NotEmpty(t, got.Status.ContainerStatuses[0].ContainerID)
		assert.False(t, main.FinishedAt.Before(&main.StartedAt))
		assert.Equal(t, "node=gpu-1\n", a.Logs("default", "fails", "check"))
	})

	t.Run("pods/log through the API server", func(t *testing.T) {
		p := shPod("logs", "gpu-2", `printf 'one\ntwo\nthree\n'; echo four >&2`)
		_, err := cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{})
		require.NoError(t, err)
		waitPod(t, env, "logs", 60*time.Second, func(c *assert.CollectT, p *corev1.Pod) {
			require.Equal(c, corev1.PodSucceeded, p.Status.Phase)
		})
		read := func(o corev1.PodLogOptions) (string, error) {
			o.Container = "check"
			out, err := cs.CoreV1().Pods("default").GetLogs("logs", &o).DoRaw(ctx)
			return string(out), err
		}
		got, err := read(corev1.PodLogOptions{})
		require.NoError(t, err)
		assert.Equal(t, "one\ntwo\nthree\nfour\n", got)
		got, err = read(corev1.PodLogOptions{TailLines: new(int64(2))})
		require.NoError(t, err)
		assert.Equal(t, "three\nfour\n", got)
		got, err = read(corev1.PodLogOptions{TailLines: new(int64(3)), LimitBytes: new(int64(6))})
		require.NoError(t, err)
		assert.Equal(t, "two\nth", got)
		_, err = read(corev1.PodLogOptions{Follow: true})
		require.Error(t, err, "follow is not simulated: refused, not answered as if it were")
		// Another container's log: the kubelet says it never started.
		o := corev1.PodLogOptions{Container: "sidecar"}
		_, err = cs.CoreV1().Pods("default").GetLogs("logs", &o).DoRaw(ctx)
		require.Error(t, err)
	})

	t.Run("readiness probe and projected service-account volume", func(t *testing.T) {
		var healthy atomic.Bool
		var probes atomic.Int64
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/ready" {
				http.NotFound(w, r)
				return
			}
			probes.Add(1)
			if !healthy.Load() {
				http.Error(w, "not yet", http.StatusServiceUnavailable)
			}
		}))
		defer srv.Close()
		_, portText, err := net.SplitHostPort(srv.Listener.Addr().String())
		require.NoError(t, err)
		port, err := strconv.Atoi(portText)
		require.NoError(t, err)
		p := shPod("probed", "gpu-1", `test -s "$1" && echo "ns=$(cat "$2") api=$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT"; exec sleep infinity`,
			"/sa/token", "/sa/namespace")
		p.Spec.ServiceAccountName = "default" // made by the controller-manager
		c := &p.Spec.Containers[0]
		c.Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: int32(port)}}
		c.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromString("http")}}}
		c.VolumeMounts = []corev1.VolumeMount{{Name: "sa", MountPath: "/sa"}}
		p.Spec.Volumes = []corev1.Volume{{Name: "sa", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}}},
		}}}}}
		_, err = cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{})
		require.NoError(t, err)
		// Running and probed, failing: not ready.
		require.Eventually(t, func() bool { return probes.Load() >= 3 }, 30*time.Second, 50*time.Millisecond)
		waitPod(t, env, "probed", 30*time.Second, func(c *assert.CollectT, p *corev1.Pod) {
			assert.Equal(c, corev1.PodRunning, p.Status.Phase)
			require.Len(c, p.Status.ContainerStatuses, 1)
			assert.NotNil(c, p.Status.ContainerStatuses[0].State.Running)
			assert.False(c, p.Status.ContainerStatuses[0].Ready, "ready while its readiness probe fails")
		})
		u, err := url.Parse(env.Host())
		require.NoError(t, err)
		assert.Equal(t, "ns=default api="+u.Host+"\n", a.Logs("default", "probed", "check"))
		healthy.Store(true)
		waitPod(t, env, "probed", 30*time.Second, func(c *assert.CollectT, p *corev1.Pod) {
			require.Len(c, p.Status.ContainerStatuses, 1)
			assert.True(c, p.Status.ContainerStatuses[0].Ready)
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodReady {
					assert.Equal(c, corev1.ConditionTrue, cond.Status)
				}
			}
		})
		require.NoError(t, cs.CoreV1().Pods("default").Delete(ctx, "probed", metav1.DeleteOptions{}))
		waitGone(t, env, "probed", 30*time.Second)
	})

	t.Run("oversized termination message keeps the last 4096 bytes", func(t *testing.T) {
		_, err := cs.CoreV1().Pods("default").Create(ctx, shPod("oversized", "gpu-2",
			`head -c 6144 /dev/zero | tr '\0' a > "$1"; head -c 4096 /dev/zero | tr '\0' b >> "$1"`,
			"/dev/termination-log"), metav1.CreateOptions{})
		require.NoError(t, err)
		waitPod(t, env, "oversized", 60*time.Second, func(c *assert.CollectT, p *corev1.Pod) {
			require.Equal(c, corev1.PodSucceeded, p.Status.Phase)
			term := terminated(c, p.Status.ContainerStatuses)
			assert.Equal(c, "Completed", term.Reason)
			assert.Equal(c, strings.Repeat("b", MaxContainerTerminationMessageLength), term.Message)
		})
	})

	t.Run("activeDeadlineSeconds kills the process group", func(t *testing.T) {
		p := shPod("deadline", "gpu-1", `echo pid=$$; exec sleep 60`)
		p.Spec.ActiveDeadlineSeconds = new(int64)
		*p.Spec.ActiveDeadlineSeconds = 2
		_, err := cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{})
		require.NoError(t, err)
		pid := pidOf(t, a, "deadline")
		begin := time.Now()
		waitPod(t, env, "deadline", 15*time.Second, func(c *assert.CollectT, p *corev1.Pod) {
			require.Equal(c, corev1.PodFailed, p.Status.Phase)
			assert.Equal(c, "DeadlineExceeded", p.Status.Reason)
			assert.Equal(c, DeadlineExceededMessage, p.Status.Message)
		})
		t.Logf("Failed/DeadlineExceeded %v after the process started", time.Since(begin))
		assert.False(t, procutil.Alive(pid), "pid %d still alive", pid)
	})

	t.Run("deleting a running pod kills it and the object goes", func(t *testing.T) {
		_, err := cs.CoreV1().Pods("default").Create(ctx, shPod("deleted", "gpu-2", `echo pid=$$; exec sleep 60`), metav1.CreateOptions{})
		require.NoError(t, err)
		pid := pidOf(t, a, "deleted")
		waitPod(t, env, "deleted", 30*time.Second, func(c *assert.CollectT, p *corev1.Pod) {
			require.Equal(c, corev1.PodRunning, p.Status.Phase)
		})
		require.NoError(t, cs.CoreV1().Pods("default").Delete(ctx, "deleted", metav1.DeleteOptions{}))
		waitGone(t, env, "deleted", 15*time.Second)
		assert.False(t, procutil.Alive(pid), "pid %d still alive", pid)
	})

	t.Run("LosePod makes the pod vanish", func(t *testing.T) {
		_, err := cs.CoreV1().Pods("default").Create(ctx, shPod("lost", "gpu-1", `echo pid=$$; exec sleep 60`), metav1.CreateOptions{})
		require.NoError(t, err)
		pid := pidOf(t, a, "lost")
		waitGone(t, env, "lost", 15*time.Second)
		require.Eventually(t, func() bool { return !procutil.Alive(pid) }, 10*time.Second, 50*time.Millisecond)
	})

	t.Run("NeverTerminate ignores deadline and deletion until force-deleted", func(t *testing.T) {
		p := shPod("stuck", "gpu-2", `exit 0`)
		p.Spec.ActiveDeadlineSeconds = new(int64)
		*p.Spec.ActiveDeadlineSeconds = 1
		_, err := cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{})
		require.NoError(t, err)
		waitPod(t, env, "stuck", 30*time.Second, func(c *assert.CollectT, p *corev1.Pod) {
			require.Equal(c, corev1.PodRunning, p.Status.Phase)
		})
		require.NoError(t, cs.CoreV1().Pods("default").Delete(ctx, "stuck", metav1.DeleteOptions{}))
		time.Sleep(2 * time.Second)
		got, err := cs.CoreV1().Pods("default").Get(ctx, "stuck", metav1.GetOptions{})
		require.NoError(t, err, "the agent never confirms the deletion")
		assert.NotNil(t, got.DeletionTimestamp)
		assert.Equal(t, corev1.PodRunning, got.Status.Phase, "nor reports the deadline")
		zero := int64(0)
		require.NoError(t, cs.CoreV1().Pods("default").Delete(ctx, "stuck", metav1.DeleteOptions{GracePeriodSeconds: &zero}))
		waitGone(t, env, "stuck", 15*time.Second)
	})
}

// mpiJobPods returns the launcher pods and the worker pods (by name) of
// MPIJob job in ns.
func mpiJobPods(t *testing.T, env *Env, ns, job string) (launcher []corev1.Pod, workers map[string]corev1.Pod) {
	t.Helper()
	pods, err := env.Client.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: MPIJobNameLabel + "=" + job})
	require.NoError(t, err)
	workers = map[string]corev1.Pod{}
	for _, p := range pods.Items {
		switch p.Labels[MPIJobRoleLabel] {
		case MPIRoleLauncher:
			launcher = append(launcher, p)
		case MPIRoleWorker:
			workers[p.Name] = p
		}
	}
	return launcher, workers
}
