package kubetest

import (
	"context"
	"flag"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	mpioptions "github.com/kubeflow/mpi-operator/cmd/mpi-operator/app/options"
	mpiclientset "github.com/kubeflow/mpi-operator/pkg/client/clientset/versioned"
	mpiinformers "github.com/kubeflow/mpi-operator/pkg/client/informers/externalversions"
	mpicontroller "github.com/kubeflow/mpi-operator/pkg/controller"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
)

// Names and labels of the MPI Operator v2 (github.com/kubeflow/mpi-operator,
// pkg/apis/kubeflow/v2beta1/constants.go and
// pkg/controller/mpi_job_controller.go), for tests that look at what it
// made.
const (
	MPIOperatorName      = "mpi-operator"
	MPIOperatorNameLabel = "training.kubeflow.org/operator-name"
	MPIJobNameLabel      = "training.kubeflow.org/job-name"
	MPIJobRoleLabel      = "training.kubeflow.org/job-role"
	MPIReplicaIndexLabel = "training.kubeflow.org/replica-index"
	MPIRoleLauncher      = "launcher"
	MPIRoleWorker        = "worker"
)

// MPIOperator is the MPI Operator's own controller (MPIOperatorVersion,
// pkg/controller) running in this process: kubetest simulates no part of
// it. What it creates for an MPIJob (the headless Service, the hostfile
// ConfigMap, the SSH key Secret, the worker pods, the launcher batch/v1
// Job) is run by the real scheduler, Job controller and garbage collector,
// and by the Agent playing the kubelet.
type MPIOperator struct {
	wg      sync.WaitGroup
	stop    func()
	stopped atomic.Bool
}

// Stop stops the operator, as an operator that is down: its workers and
// informers end and nothing it made is touched; MPIJobs created or changed
// meanwhile are acted on only by an operator started later
// (StartMPIOperator again, which lists every MPIJob). Stop is idempotent
// and is called in t.Cleanup.
func (o *MPIOperator) Stop() {
	if o.stopped.CompareAndSwap(false, true) {
		o.stop()
	}
}

// MPIOperatorVersion is the release of github.com/kubeflow/mpi-operator
// whose controller StartMPIOperator runs (go.mod pins it).
const MPIOperatorVersion = "v0.8.2"

// klog is process-wide. While at least one operator runs, klog (the
// operators' lines and client-go's alike) writes to the log file of every
// running operator instead of stderr; when the last stops, stderr again.
// (Importing the operator's options package registers klog's flags on
// flag.CommandLine and sets -stderrthreshold=INFO with the legacy threshold
// behaviour off: with -logtostderr, klog's default, that still writes every
// line to stderr, as before.)
var klogSink = &fanout{files: map[io.Writer]bool{}}

type fanout struct {
	mu     sync.Mutex
	files  map[io.Writer]bool
	thresh string
}

func (o *fanout) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for w := range o.files {
		_, _ = w.Write(p)
	}
	return len(p), nil
}

func klogTo(w io.Writer) {
	klogSink.mu.Lock()
	defer klogSink.mu.Unlock()
	klogSink.files[w] = true
	if len(klogSink.files) == 1 {
		// With the threshold left at INFO, klog would copy every line to
		// stderr as well.
		if f := flag.Lookup("stderrthreshold"); f != nil {
			klogSink.thresh = f.Value.String()
			_ = f.Value.Set("FATAL")
		}
		klog.LogToStderr(false)
		klog.SetOutput(klogSink)
	}
}

// klogRelease stops writing klog to w; w may be closed once it returns.
func klogRelease(w io.Writer) {
	klog.Flush()
	klogSink.mu.Lock()
	defer klogSink.mu.Unlock()
	delete(klogSink.files, w)
	if len(klogSink.files) == 0 {
		klog.LogToStderr(true)
		if f := flag.Lookup("stderrthreshold"); f != nil && klogSink.thresh != "" {
			_ = f.Value.Set(klogSink.thresh)
		}
	}
}

// StartMPIOperator runs the MPI Operator's own controller (pkg/controller
// of MPIOperatorVersion) in this process, as its main does after winning
// leader election: shared informers over all namespaces, threadiness 2, no
// gang scheduler, the admin's identity. There is no leader election, no
// health or metrics endpoint and no port: two test packages can each run
// one at once. Start one per Env at a time. The MPIJob CRD must be
// installed (InstallMPIJobCRD). It stops in t.Cleanup, or earlier with
// Stop; its log (klog, with client-go's lines) is a file in e.Dir whose tail
// is printed when the test fails.
func (e *Env) StartMPIOperator(t testing.TB) *MPIOperator {
	t.Helper()
	f, err := os.CreateTemp(e.Dir, "mpi-operator-*.log")
	if err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	logPath := f.Name()
	// Unlike its main, nothing is added to client-go's global scheme
	// (main does so for its leader-election events, and at run time that
	// would race with every client of this process): the controller's
	// events use its own clientset's scheme, which has the MPIJob.
	klogTo(f)

	cfg := rest.CopyConfig(e.Config)
	cfg.UserAgent = "mpi-operator"
	kubeClient, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("kubetest: mpi-operator client: %v", err)
	}
	mpiClient, err := mpiclientset.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("kubetest: mpi-operator client: %v", err)
	}
	opt := mpioptions.NewServerOption()
	opt.Threadiness = 2
	opt.ControllerRateLimit = 10
	opt.ControllerBurst = 100
	opt.QPS, opt.Burst = 200, 400

	ctx, cancel := context.WithCancel(context.Background())
	kf := kubeinformers.NewSharedInformerFactory(kubeClient, 0)
	mf := mpiinformers.NewSharedInformerFactory(mpiClient, 0)
	ctrl, err := mpicontroller.NewMPIJobController(ctx, kubeClient, mpiClient, nil, nil,
		kf.Core().V1().ConfigMaps(),
		kf.Core().V1().Secrets(),
		kf.Core().V1().Services(),
		kf.Batch().V1().Jobs(),
		kf.Core().V1().Pods(),
		kf.Scheduling().V1().PriorityClasses(),
		mf.Kubeflow().V2beta1().MPIJobs(),
		opt)
	if err != nil {
		cancel()
		t.Fatalf("kubetest: mpi-operator controller: %v", err)
	}
	kf.Start(ctx.Done())
	mf.Start(ctx.Done())
	o := &MPIOperator{}
	o.wg.Add(1)
	go func() {
		defer o.wg.Done()
		if err := ctrl.Run(opt.Threadiness, ctx.Done()); err != nil && ctx.Err() == nil {
			e.t.Errorf("kubetest: mpi-operator: %v", err)
		}
	}()
	o.stop = func() {
		cancel()
		o.wg.Wait()
		kf.Shutdown()
		mf.Shutdown()
		klogRelease(f)
		_ = f.Close()
	}
	t.Cleanup(func() {
		o.Stop()
		if t.Failed() {
			t.Logf("kubetest: ---- tail of mpi-operator (%s) ----\n%s", logPath, tailFile(logPath, 4000))
		}
	})
	return o
}

// AddSSHD writes usr/sbin/sshd into the image directory dir (see
// AgentOptions.Images): the sshd an MPI image ships, which MPIJob workers
// run as `/usr/sbin/sshd -De` (the operator's command for a worker that has
// neither command nor args, and signet's rendered one). It idles (sleep)
// until stopped, as a worker's sshd does until the launcher connects;
// nothing connects here.
func AddSSHD(t testing.TB, dir string) {
	t.Helper()
	sbin := filepath.Join(dir, "usr", "sbin")
	if err := os.MkdirAll(sbin, 0o755); err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	writeFile(t, filepath.Join(sbin, "sshd"), []byte("#!/bin/sh\nexec sleep infinity\n"), 0o755)
}
