package kubetest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/util/retry"
)

// GPUResource is the extended resource of NVIDIA's device plugin.
const GPUResource corev1.ResourceName = "nvidia.com/gpu"

// NotReadyTaintKey is the taint admission (TaintNodesByCondition) puts on
// every new Node until its kubelet reports Ready.
const NotReadyTaintKey = "node.kubernetes.io/not-ready"

// NodeOptions describes a simulated node.
type NodeOptions struct {
	Name string
	// GPUs is the node's nvidia.com/gpu capacity and allocatable.
	GPUs int64
	// Labels are added to kubernetes.io/hostname (= Name) and
	// kubernetes.io/os (= linux).
	Labels map[string]string
	// SystemUUID and BootID of status.nodeInfo; random when empty.
	SystemUUID, BootID string
	// KeepNotReady leaves the node.kubernetes.io/not-ready taint in place.
	KeepNotReady bool
}

// CreateNode creates a Node through the API as a kubelet registering it
// would, and returns it as stored. It simulates exactly this and nothing
// more: the kubelet's registration (a Node named Name with the hostname and
// os labels), one status report (capacity and allocatable of 8 cpu, 64Gi
// memory, 100Gi ephemeral-storage, 110 pods and GPUs nvidia.com/gpu as a
// device plugin would advertise them; nodeInfo with SystemUUID, BootID, a
// kubelet version and linux/amd64; a Ready=True condition with the current
// heartbeat time; an InternalIP 127.0.0.1 and Hostname address, and the port of the
// kubelet API that serves the Agents' logs as kubeletEndpoint), and — unless
// KeepNotReady — the node lifecycle controller's removal of the
// node.kubernetes.io/not-ready:NoSchedule taint (see LiftNotReadyTaint). No
// heartbeat follows unless Options.NodeLifecycle: the node lifecycle
// controller is then running, and the node's Lease and Ready heartbeat are
// renewed as a kubelet renews them (heartbeats); otherwise the controller
// is disabled, so nothing marks the node NotReady later. No kubelet runs:
// pods bound to the node stay Pending unless a test agent plays the kubelet.
func (e *Env) CreateNode(ctx context.Context, o NodeOptions) *corev1.Node {
	e.t.Helper()
	if o.Name == "" {
		e.t.Fatalf("kubetest: CreateNode: no name")
	}
	if o.SystemUUID == "" {
		o.SystemUUID = string(uuid.NewUUID())
	}
	if o.BootID == "" {
		o.BootID = string(uuid.NewUUID())
	}
	labels := map[string]string{
		"kubernetes.io/hostname": o.Name,
		"kubernetes.io/os":       "linux",
		"kubernetes.io/arch":     "amd64",
	}
	for k, v := range o.Labels {
		labels[k] = v
	}
	nodes := e.Client.CoreV1().Nodes()
	if _, err := nodes.Create(ctx, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: o.Name, Labels: labels},
	}, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("kubetest: create node %s: %v", o.Name, err)
	}
	res := corev1.ResourceList{
		corev1.ResourceCPU:              resource.MustParse("8"),
		corev1.ResourceMemory:           resource.MustParse("64Gi"),
		corev1.ResourceEphemeralStorage: resource.MustParse("100Gi"),
		corev1.ResourcePods:             resource.MustParse("110"),
		GPUResource:                     *resource.NewQuantity(o.GPUs, resource.DecimalSI),
	}
	now := metav1.NewTime(time.Now())
	var out *corev1.Node
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := nodes.Get(ctx, o.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Status.Capacity = res.DeepCopy()
		n.Status.Allocatable = res.DeepCopy()
		n.Status.NodeInfo = corev1.NodeSystemInfo{
			MachineID:               o.SystemUUID,
			SystemUUID:              o.SystemUUID,
			BootID:                  o.BootID,
			KernelVersion:           "simulated",
			OSImage:                 "simulated by signet kubetest",
			ContainerRuntimeVersion: "simulated://0",
			KubeletVersion:          "v1.34.2",
			KubeProxyVersion:        "v1.34.2",
			OperatingSystem:         "linux",
			Architecture:            "amd64",
		}
		n.Status.Addresses = []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: "127.0.0.1"},
			{Type: corev1.NodeHostName, Address: o.Name},
		}
		n.Status.DaemonEndpoints.KubeletEndpoint.Port = int32(e.kubelet.port)
		n.Status.Conditions = []corev1.NodeCondition{{
			Type:               corev1.NodeReady,
			Status:             corev1.ConditionTrue,
			Reason:             "KubeletReady",
			Message:            "simulated by signet kubetest",
			LastHeartbeatTime:  now,
			LastTransitionTime: now,
		}}
		out, err = nodes.UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		e.t.Fatalf("kubetest: status of node %s: %v", o.Name, err)
	}
	if e.beats != nil {
		e.beats.add(o.Name)
	}
	if !o.KeepNotReady {
		out = e.LiftNotReadyTaint(ctx, o.Name)
	}
	return out
}

// heartbeatInterval is how often a simulated kubelet reports: the
// kubelet's default nodeLeaseRenewInterval is 10 s, its status report
// every 10 s (nodeStatusUpdateFrequency); the lifecycle controller's grace
// period is 50 s.
const heartbeatInterval = 5 * time.Second

// heartbeats plays, with Options.NodeLifecycle, the part of the kubelet
// that the node lifecycle controller watches, and nothing else: for every
// node made by CreateNode it renews the Lease kube-node-lease/<node>
// (holderIdentity the node, leaseDurationSeconds 40) and refreshes the
// Ready condition's lastHeartbeatTime, every heartbeatInterval until the
// environment stops.
type heartbeats struct {
	e      *Env
	mu     sync.Mutex
	nodes  []string
	cancel context.CancelFunc
	done   chan struct{}
}

func startHeartbeats(e *Env) *heartbeats {
	ctx, cancel := context.WithCancel(context.Background())
	h := &heartbeats{e: e, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(h.done)
		tick := time.NewTicker(heartbeatInterval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			h.mu.Lock()
			nodes := slices.Clone(h.nodes)
			h.mu.Unlock()
			for _, n := range nodes {
				if err := h.beat(ctx, n); err != nil && ctx.Err() == nil {
					e.t.Logf("kubetest: heartbeat of node %s: %v", n, err)
				}
			}
		}
	}()
	e.t.Cleanup(func() {
		cancel()
		<-h.done
	})
	return h
}

func (h *heartbeats) add(node string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.nodes = append(h.nodes, node)
	// The first beat at once: the Lease exists before the controller looks.
	if err := h.beat(context.Background(), node); err != nil {
		h.e.t.Logf("kubetest: heartbeat of node %s: %v", node, err)
	}
}

// beat renews node's Lease and its Ready condition's heartbeat.
func (h *heartbeats) beat(ctx context.Context, node string) error {
	now := metav1.NewMicroTime(time.Now())
	leases := h.e.Client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	l, err := leases.Get(ctx, node, metav1.GetOptions{})
	dur := int32(40)
	switch {
	case apierrors.IsNotFound(err):
		_, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: node, Namespace: corev1.NamespaceNodeLease},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: &node, LeaseDurationSeconds: &dur, RenewTime: &now},
		}, metav1.CreateOptions{})
	case err == nil:
		l.Spec.RenewTime = &now
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("lease: %w", err)
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := h.e.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for i := range n.Status.Conditions {
			if n.Status.Conditions[i].Type == corev1.NodeReady {
				n.Status.Conditions[i].LastHeartbeatTime = metav1.Now()
			}
		}
		_, err = h.e.Client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})
}

// LiftNotReadyTaint removes every node.kubernetes.io/not-ready taint of the
// named node, as the node lifecycle controller does once the node's kubelet
// reports Ready; it simulates only that removal (the controller itself is
// disabled here) and leaves every other taint as it is. It returns the node
// as stored.
func (e *Env) LiftNotReadyTaint(ctx context.Context, name string) *corev1.Node {
	e.t.Helper()
	nodes := e.Client.CoreV1().Nodes()
	var out *corev1.Node
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := nodes.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		kept := n.Spec.Taints[:0]
		for _, tn := range n.Spec.Taints {
			if tn.Key != NotReadyTaintKey {
				kept = append(kept, tn)
			}
		}
		if len(kept) == len(n.Spec.Taints) {
			out = n
			return nil
		}
		n.Spec.Taints = kept
		out, err = nodes.Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		e.t.Fatalf("kubetest: lift %s taint of node %s: %v", NotReadyTaintKey, name, err)
	}
	return out
}
