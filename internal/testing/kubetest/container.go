package kubetest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"signet.dev/signet/internal/procutil"
)

// setupVolumes makes every volume's directory; while one cannot be made it
// reports the regular containers waiting ContainerCreating and retries.
// It returns false when ctx ended first.
func (r *podRun) setupVolumes(ctx context.Context) bool {
	for {
		err := r.makeVolumes(ctx)
		if err == nil {
			return true
		}
		for _, st := range r.mainSt {
			r.setState(st, corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating", Message: err.Error()}})
		}
		r.report()
		select {
		case <-ctx.Done():
			return false
		case <-time.After(time.Second):
		}
	}
}

func (r *podRun) makeVolumes(ctx context.Context) error {
	for _, v := range r.pod.Spec.Volumes {
		dir := filepath.Join(r.dir, "volumes", v.Name)
		switch {
		case v.EmptyDir != nil:
			if err := os.MkdirAll(dir, 0o777); err != nil {
				return err
			}
		case v.HostPath != nil:
			dir = v.HostPath.Path
		case v.ConfigMap != nil:
			cm, err := r.a.client.CoreV1().ConfigMaps(r.pod.Namespace).Get(ctx, v.ConfigMap.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) && v.ConfigMap.Optional != nil && *v.ConfigMap.Optional {
				cm = &corev1.ConfigMap{}
			} else if err != nil {
				return fmt.Errorf("volume %q: configmap %q: %w", v.Name, v.ConfigMap.Name, err)
			}
			data := map[string][]byte{}
			for k, s := range cm.Data {
				data[k] = []byte(s)
			}
			for k, b := range cm.BinaryData {
				data[k] = b
			}
			if err := writeVolume(dir, data, v.ConfigMap.Items, v.ConfigMap.DefaultMode); err != nil {
				return fmt.Errorf("volume %q: %w", v.Name, err)
			}
		case v.Secret != nil:
			s, err := r.a.client.CoreV1().Secrets(r.pod.Namespace).Get(ctx, v.Secret.SecretName, metav1.GetOptions{})
			if apierrors.IsNotFound(err) && v.Secret.Optional != nil && *v.Secret.Optional {
				s = &corev1.Secret{}
			} else if err != nil {
				return fmt.Errorf("volume %q: secret %q: %w", v.Name, v.Secret.SecretName, err)
			}
			if err := writeVolume(dir, s.Data, v.Secret.Items, v.Secret.DefaultMode); err != nil {
				return fmt.Errorf("volume %q: %w", v.Name, err)
			}
		case v.Projected != nil:
			if err := r.makeProjected(ctx, dir, v); err != nil {
				return fmt.Errorf("volume %q: %w", v.Name, err)
			}
		default:
			return fmt.Errorf("volume %q: type not supported by the kubetest agent", v.Name)
		}
		r.volumes[v.Name] = dir
	}
	return nil
}

// makeProjected writes a projected volume's sources into dir; see Agent.
func (r *podRun) makeProjected(ctx context.Context, dir string, v corev1.Volume) error {
	core := r.a.client.CoreV1()
	for i, src := range v.Projected.Sources {
		data := map[string][]byte{}
		var items []corev1.KeyToPath
		switch {
		case src.ConfigMap != nil:
			cm, err := core.ConfigMaps(r.pod.Namespace).Get(ctx, src.ConfigMap.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) && src.ConfigMap.Optional != nil && *src.ConfigMap.Optional {
				continue
			} else if err != nil {
				return fmt.Errorf("sources[%d]: configmap %q: %w", i, src.ConfigMap.Name, err)
			}
			for k, s := range cm.Data {
				data[k] = []byte(s)
			}
			for k, b := range cm.BinaryData {
				data[k] = b
			}
			items = src.ConfigMap.Items
		case src.Secret != nil:
			s, err := core.Secrets(r.pod.Namespace).Get(ctx, src.Secret.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) && src.Secret.Optional != nil && *src.Secret.Optional {
				continue
			} else if err != nil {
				return fmt.Errorf("sources[%d]: secret %q: %w", i, src.Secret.Name, err)
			}
			data, items = s.Data, src.Secret.Items
		case src.DownwardAPI != nil:
			for _, it := range src.DownwardAPI.Items {
				if it.FieldRef == nil {
					return fmt.Errorf("sources[%d]: %s: only fieldRef is supported by the kubetest agent", i, it.Path)
				}
				val, err := r.fieldRef(it.FieldRef.FieldPath)
				if err != nil {
					return fmt.Errorf("sources[%d]: %s: %w", i, it.Path, err)
				}
				data[it.Path] = []byte(val)
				items = append(items, corev1.KeyToPath{Key: it.Path, Path: it.Path, Mode: it.Mode})
			}
		case src.ServiceAccountToken != nil:
			sat := src.ServiceAccountToken
			exp := int64(3600)
			if sat.ExpirationSeconds != nil {
				exp = *sat.ExpirationSeconds
			}
			var aud []string
			if sat.Audience != "" {
				aud = []string{sat.Audience}
			}
			sa := r.pod.Spec.ServiceAccountName // required with such a source
			tr, err := core.ServiceAccounts(r.pod.Namespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
				Audiences: aud, ExpirationSeconds: &exp,
				BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: r.pod.Name, UID: r.pod.UID},
			}}, metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("sources[%d]: token of serviceaccount %q: %w", i, sa, err)
			}
			data[sat.Path] = []byte(tr.Status.Token)
			items = []corev1.KeyToPath{{Key: sat.Path, Path: sat.Path}}
		default:
			return fmt.Errorf("sources[%d]: type not supported by the kubetest agent", i)
		}
		if err := writeVolume(dir, data, items, v.Projected.DefaultMode); err != nil {
			return fmt.Errorf("sources[%d]: %w", i, err)
		}
	}
	return os.MkdirAll(dir, 0o755)
}

// fieldRef is the value of a downward API field path; see Agent.
func (r *podRun) fieldRef(path string) (string, error) {
	switch path {
	case "metadata.name":
		return r.pod.Name, nil
	case "metadata.namespace":
		return r.pod.Namespace, nil
	case "metadata.uid":
		return string(r.pod.UID), nil
	case "spec.nodeName":
		return r.pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return r.pod.Spec.ServiceAccountName, nil
	case "status.podIP", "status.hostIP":
		return PodIP, nil
	}
	return "", fmt.Errorf("fieldRef %q is not supported by the kubetest agent", path)
}

// hasServiceAccountToken reports whether the pod mounts a projected
// service-account token.
func (r *podRun) hasServiceAccountToken() bool {
	for _, v := range r.pod.Spec.Volumes {
		if v.Projected == nil {
			continue
		}
		for _, src := range v.Projected.Sources {
			if src.ServiceAccountToken != nil {
				return true
			}
		}
	}
	return false
}

// writeVolume writes data into dir: the items' keys at their paths, or
// every key at its own name, with the item's mode, else defaultMode, else
// 0644.
func writeVolume(dir string, data map[string][]byte, items []corev1.KeyToPath, defaultMode *int32) error {
	mode := os.FileMode(0o644)
	if defaultMode != nil {
		mode = os.FileMode(*defaultMode)
	}
	if len(items) == 0 {
		for k := range data {
			items = append(items, corev1.KeyToPath{Key: k, Path: k})
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, it := range items {
		b, ok := data[it.Key]
		if !ok {
			return fmt.Errorf("key %q not found", it.Key)
		}
		m := mode
		if it.Mode != nil {
			m = os.FileMode(*it.Mode)
		}
		p := filepath.Join(dir, filepath.Clean("/"+it.Path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, b, 0o600); err != nil {
			return err
		}
		if err := os.Chmod(p, m); err != nil {
			return err
		}
	}
	return nil
}

// runContainer runs c, restarting it as the pod's restartPolicy says. ok is
// false when the pod's context ended (deadline, deletion, stop) or the
// container could not be started; code is the last exit code otherwise.
func (r *podRun) runContainer(ctx context.Context, st *ctrState, c corev1.Container, isInit bool) (code int, ok bool) {
	for {
		code, ok = r.runOnce(ctx, st, c, isInit)
		if !ok || ctx.Err() != nil {
			return code, false
		}
		policy := r.pod.Spec.RestartPolicy
		restart := (policy == corev1.RestartPolicyOnFailure || policy == corev1.RestartPolicyAlways) && code != 0 ||
			(policy == corev1.RestartPolicyAlways && !isInit)
		if !restart {
			return code, true
		}
		select {
		case <-ctx.Done():
			return code, false
		case <-time.After(time.Second):
		}
		r.mu.Lock()
		st.restarts++
		r.mu.Unlock()
	}
}

// runOnce starts one instance of c and waits for it; see Agent for what is
// simulated.
func (r *podRun) runOnce(ctx context.Context, st *ctrState, c corev1.Container, isInit bool) (int, bool) {
	fail := func(reason string, err error) (int, bool) {
		r.setState(st, corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: err.Error()}})
		r.report()
		<-ctx.Done()
		return 0, false
	}
	root, haveRoot := r.a.opts.Images[c.Image]
	if r.a.opts.Images != nil && !haveRoot {
		return fail("ErrImagePull", fmt.Errorf("image %q is not in the agent's AgentOptions.Images", c.Image))
	}
	r.mu.Lock()
	restarts := st.restarts
	r.mu.Unlock()
	ctrDir := filepath.Join(r.dir, "containers", fmt.Sprintf("%s-%d", c.Name, restarts))
	if err := os.MkdirAll(ctrDir, 0o755); err != nil {
		return fail("RunContainerError", err)
	}
	termPath := c.TerminationMessagePath
	if termPath == "" {
		termPath = corev1.TerminationMessagePathDefault
	}
	termFile := filepath.Join(ctrDir, "termination-log")
	if err := os.WriteFile(termFile, nil, 0o666); err != nil {
		return fail("RunContainerError", err)
	}
	chroot := r.a.opts.Chroot && haveRoot
	mapPath := r.pathMapper(c, termPath, termFile, root)
	if chroot {
		mapPath = func(p string) string { return p }
	}

	env, err := r.env(c, mapPath)
	if err != nil {
		return fail("CreateContainerConfigError", err)
	}
	wd := root
	if c.WorkingDir != "" {
		wd = mapPath(c.WorkingDir)
		if wd == c.WorkingDir {
			wd = filepath.Join(ctrDir, "workdir", c.WorkingDir)
		}
	}
	if wd == "" {
		wd = r.dir
	}
	if err := os.MkdirAll(wd, 0o755); err != nil {
		return fail("RunContainerError", err)
	}
	var argv []string
	switch {
	case r.misbehave == NeverTerminate && !isInit:
		argv = []string{"sh", "-c", "trap '' TERM INT HUP QUIT; while :; do sleep 1; done"}
	case len(c.Command) == 0 && len(r.a.opts.Entrypoints[c.Image]) == 0:
		argv = []string{"sleep", "infinity"}
	default:
		cmdline := c.Command
		if len(cmdline) == 0 {
			cmdline = r.a.opts.Entrypoints[c.Image]
		}
		for _, s := range append(slices.Clone(cmdline), c.Args...) {
			argv = append(argv, mapPath(s))
		}
	}
	if chroot {
		if argv, err = r.chrootArgv(c, root, argv); err != nil {
			return fail("RunContainerError", err)
		}
	}
	logs := r.a.logTail(r.pod.Namespace, r.pod.Name, c.Name)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env, cmd.Dir = env, wd
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.WaitDelay = time.Second
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	id := fmt.Sprintf("kubetest://%s/%s/%d", r.pod.UID, c.Name, restarts)
	if err := cmd.Start(); err != nil {
		now := metav1.Now()
		r.mu.Lock()
		st.id = id
		st.state = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: 128, Reason: "StartError", Message: err.Error(), StartedAt: now, FinishedAt: now, ContainerID: id,
		}}
		r.mu.Unlock()
		r.report()
		return 128, true
	}
	startedAt := metav1.Now()
	pgid := cmd.Process.Pid
	r.mu.Lock()
	st.id = id
	st.state = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: startedAt}}
	st.probed, st.ready = !isInit && c.ReadinessProbe != nil, false
	r.mu.Unlock()
	r.report()
	probing := make(chan struct{}) // closed when the process has ended
	if !isInit && c.ReadinessProbe != nil {
		r.a.wg.Add(1)
		go func() {
			defer r.a.wg.Done()
			r.probeReadiness(probing, st, c)
		}()
	}
	if !isInit && r.misbehave == LosePod {
		r.a.deletePod(r.pod, "LosePod")
	}

	// The exit status is read from cmd.ProcessState.
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case <-waited:
	case <-ctx.Done():
		cause := context.Cause(ctx)
		r.mu.Lock()
		grace := r.graceKill
		r.mu.Unlock()
		if errors.Is(cause, errPodGone) || errors.Is(cause, errAgentStopped) {
			grace = 0
			_ = procutil.SignalGroup(pgid, syscall.SIGKILL)
		}
		_, _, _ = procutil.StopGroup(pgid, time.Time{}, grace)
		<-waited
	}
	r.mu.Lock()
	close(probing)
	r.mu.Unlock()
	// The container ends with its main process: nothing of its group stays.
	_ = procutil.SignalGroup(pgid, syscall.SIGKILL)
	code := exitCode(cmd)
	reason := "Completed"
	if code != 0 {
		reason = "Error"
	}
	msg := r.terminationMessage(termFile, logs, c, code)
	r.mu.Lock()
	st.ready = false
	st.state = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode: int32(code), Reason: reason, Message: msg,
		StartedAt: startedAt, FinishedAt: metav1.Now(), ContainerID: id,
	}}
	r.mu.Unlock()
	if ctx.Err() != nil {
		return code, false
	}
	r.report()
	return code, true
}

// chrootScript mounts, in the new mount namespace, /proc, /dev and each
// "source mountPath" pair below the root ($1), then execs chroot into it.
const chrootScript = `set -e
root=$1; shift
mount --rbind /proc "$root/proc"
mount --rbind /dev "$root/dev"
while [ "$1" != -- ]; do mount --bind "$1" "$root$2"; shift 2; done
shift
exec chroot "$root" "$@"`

// chrootArgv wraps argv so that it runs as AgentOptions.Chroot says: it
// creates the mount points below root and returns the unshare command
// line.
func (r *podRun) chrootArgv(c corev1.Container, root string, argv []string) ([]string, error) {
	out := []string{"unshare", "--user", "--map-root-user", "--mount", "--propagation", "private", "--", "sh", "-c", chrootScript, "sh", root}
	for _, d := range []string{"proc", "dev"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return nil, err
		}
	}
	mounts := slices.Clone(c.VolumeMounts)
	// Parents before children, so that a child is mounted on top.
	sort.SliceStable(mounts, func(i, j int) bool {
		return strings.Count(filepath.Clean(mounts[i].MountPath), "/") < strings.Count(filepath.Clean(mounts[j].MountPath), "/")
	})
	for _, m := range mounts {
		dir, ok := r.volumes[m.Name]
		if !ok {
			return nil, fmt.Errorf("volumeMount %q: no volume of that name", m.Name)
		}
		src := filepath.Join(dir, filepath.Clean("/"+m.SubPath))
		mp := filepath.Clean("/" + m.MountPath)
		fi, err := os.Stat(src)
		if err != nil {
			return nil, fmt.Errorf("volumeMount %q: %w", m.Name, err)
		}
		target := filepath.Join(root, mp)
		if fi.IsDir() {
			err = os.MkdirAll(target, 0o755)
		} else if err = os.MkdirAll(filepath.Dir(target), 0o755); err == nil {
			var f *os.File
			if f, err = os.OpenFile(target, os.O_CREATE|os.O_RDONLY, 0o644); err == nil {
				err = f.Close()
			}
		}
		if err != nil {
			return nil, fmt.Errorf("volumeMount %q: mount point: %w", m.Name, err)
		}
		out = append(out, src, mp)
	}
	return append(append(out, "--"), argv...), nil
}

// exitCode is the container's exit code: 128+signal when killed.
func exitCode(cmd *exec.Cmd) int {
	ps := cmd.ProcessState
	if ps == nil {
		return 128
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	if c := ps.ExitCode(); c >= 0 {
		return c
	}
	return 128
}

// terminationMessage is the kubelet's message of a terminated container:
// the last MaxContainerTerminationMessageLength bytes of the file; with
// FallbackToLogsOnError, an empty file and a non-zero exit, the log's last
// MaxContainerTerminationMessageLogLines lines within its last
// MaxContainerTerminationMessageLogLength bytes. (The per-pod budget is
// applied when the status is built.)
func (r *podRun) terminationMessage(termFile string, logs *procutil.Tail, c corev1.Container, code int) string {
	var data []byte
	if f, err := os.Open(termFile); err == nil {
		if fi, err := f.Stat(); err == nil && fi.Size() > 0 {
			n := min(fi.Size(), MaxContainerTerminationMessageLength)
			data = make([]byte, n)
			_, _ = f.ReadAt(data, fi.Size()-n)
		}
		f.Close()
	}
	if len(data) > 0 || c.TerminationMessagePolicy != corev1.TerminationMessageFallbackToLogsOnError || code == 0 {
		return string(data)
	}
	b := logs.Bytes()
	if len(b) > MaxContainerTerminationMessageLogLength {
		b = b[len(b)-MaxContainerTerminationMessageLogLength:]
	}
	lines := strings.SplitAfter(string(b), "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	if len(lines) > MaxContainerTerminationMessageLogLines {
		lines = lines[len(lines)-MaxContainerTerminationMessageLogLines:]
	}
	return strings.Join(lines, "")
}

// pathMapper returns the rewrite of absolute paths documented on Agent.
func (r *podRun) pathMapper(c corev1.Container, termPath, termFile, root string) func(string) string {
	mounts := slices.Clone(c.VolumeMounts)
	sort.SliceStable(mounts, func(i, j int) bool { return len(mounts[i].MountPath) > len(mounts[j].MountPath) })
	return func(p string) string {
		if !filepath.IsAbs(p) {
			return p
		}
		clean := filepath.Clean(p)
		for _, m := range mounts {
			mp := filepath.Clean(m.MountPath)
			rest, ok := strings.CutPrefix(clean, mp)
			if !ok || (rest != "" && !strings.HasPrefix(rest, "/") && mp != "/") {
				continue
			}
			if dir, ok := r.volumes[m.Name]; ok {
				return filepath.Join(dir, filepath.Clean("/"+m.SubPath), rest)
			}
		}
		if clean == filepath.Clean(termPath) {
			return termFile
		}
		if root != "" {
			if _, err := os.Lstat(filepath.Join(root, clean)); err == nil {
				return filepath.Join(root, clean)
			}
		}
		return p
	}
}

// env is the container's environment; see Agent.
func (r *podRun) env(c corev1.Container, mapPath func(string) string) ([]string, error) {
	if len(c.EnvFrom) > 0 {
		return nil, errors.New("envFrom is not supported by the kubetest agent")
	}
	host := r.pod.Spec.Hostname
	if host == "" {
		host = r.pod.Name
	}
	vars := map[string]string{"PATH": os.Getenv("PATH"), "HOSTNAME": host}
	order := []string{"PATH", "HOSTNAME"}
	if r.hasServiceAccountToken() {
		u, err := url.Parse(r.a.e.host)
		if err != nil {
			return nil, err
		}
		vars["KUBERNETES_SERVICE_HOST"], vars["KUBERNETES_SERVICE_PORT"] = u.Hostname(), u.Port()
		order = append(order, "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")
	}
	for _, ev := range c.Env {
		v := ev.Value
		if ev.ValueFrom != nil {
			f := ev.ValueFrom.FieldRef
			if f == nil {
				return nil, fmt.Errorf("env %s: only valueFrom.fieldRef is supported by the kubetest agent", ev.Name)
			}
			var err error
			if v, err = r.fieldRef(f.FieldPath); err != nil {
				return nil, fmt.Errorf("env %s: %w", ev.Name, err)
			}
		}
		if _, ok := vars[ev.Name]; !ok {
			order = append(order, ev.Name)
		}
		vars[ev.Name] = mapPath(v)
	}
	out := make([]string, 0, len(order))
	for _, k := range order {
		out = append(out, k+"="+vars[k])
	}
	return out, nil
}
