package kubetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"
)

// MPIJobGVR is the resource of the MPI Operator's v2beta1 MPIJob.
var MPIJobGVR = schema.GroupVersionResource{Group: "kubeflow.org", Version: "v2beta1", Resource: "mpijobs"}

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// Dynamic returns a dynamic client as the admin (system:masters).
func (e *Env) Dynamic() dynamic.Interface {
	e.t.Helper()
	dc, err := dynamic.NewForConfig(e.Config)
	if err != nil {
		e.t.Fatalf("kubetest: dynamic client: %v", err)
	}
	return dc
}

// InstallMPIJobCRD applies, server-side (the CRD is 670 KB, over the
// 256 KiB limit of client-side apply's annotation), the MPIJob
// CustomResourceDefinition the MPI Operator ships,
// manifests/base/kubeflow.org_mpijobs.yaml of the github.com/kubeflow/mpi-operator
// module at the version go.mod requires (MPIOperatorVersion), read from the
// module cache, and returns once it is Established and mpijobs are served.
// It installs only the API: no controller acts on MPIJobs unless
// StartMPIOperator runs one.
func (e *Env) InstallMPIJobCRD(ctx context.Context) {
	e.t.Helper()
	path := filepath.Join(mpiOperatorModuleDir(e.t), "manifests", "base", "kubeflow.org_mpijobs.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		e.t.Fatalf("kubetest: %v", err)
	}
	var meta struct {
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
	}
	if err := yaml.Unmarshal(data, &meta); err != nil || meta.Metadata.Name == "" {
		e.t.Fatalf("kubetest: %s: no metadata.name (%v)", path, err)
	}
	dc := e.Dynamic()
	force := true
	if _, err := dc.Resource(crdGVR).Patch(ctx, meta.Metadata.Name, types.ApplyYAMLPatchType, data,
		metav1.PatchOptions{FieldManager: "kubetest", Force: &force}); err != nil {
		e.t.Fatalf("kubetest: apply %s: %v", path, err)
	}
	e.waitMPIJobCRD(ctx, dc, meta.Metadata.Name)
}

// mpiOperatorModuleDir is the module cache directory of the MPI Operator
// module go.mod requires, as the go command reports it.
func mpiOperatorModuleDir(t testing.TB) string {
	t.Helper()
	mpiModuleDirOnce.Do(func() {
		cmd := exec.Command("go", "list", "-m", "-f", "{{.Version}} {{.Dir}}", mpiOperatorModule)
		cmd.Dir = ModuleRoot()
		out, err := cmd.Output()
		if err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				err = fmt.Errorf("%w: %s", err, bytes.TrimSpace(ee.Stderr))
			}
			mpiModuleDirErr = fmt.Errorf("go list -m %s: %w", mpiOperatorModule, err)
			return
		}
		version, dir, _ := strings.Cut(string(bytes.TrimSpace(out)), " ")
		switch {
		case version != MPIOperatorVersion:
			mpiModuleDirErr = fmt.Errorf("go.mod requires %s %s, kubetest.MPIOperatorVersion is %s", mpiOperatorModule, version, MPIOperatorVersion)
		case dir == "":
			mpiModuleDirErr = fmt.Errorf("go list -m %s: no directory (module not downloaded: go mod download)", mpiOperatorModule)
		}
		mpiModuleDir = dir
	})
	if mpiModuleDirErr != nil {
		t.Fatalf("kubetest: %v", mpiModuleDirErr)
	}
	return mpiModuleDir
}

const mpiOperatorModule = "github.com/kubeflow/mpi-operator"

var (
	mpiModuleDirOnce sync.Once
	mpiModuleDir     string
	mpiModuleDirErr  error
)

func (e *Env) waitMPIJobCRD(ctx context.Context, dc dynamic.Interface, name string) {
	e.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		got, err := dc.Resource(crdGVR).Get(ctx, name, metav1.GetOptions{})
		if err == nil && established(got) {
			// Established: the API server serves the resource; a list
			// proves the handler is installed.
			if _, err = dc.Resource(MPIJobGVR).Namespace("default").List(ctx, metav1.ListOptions{Limit: 1}); err == nil {
				return
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			e.t.Fatalf("kubetest: CRD %s not established: %v", name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func established(crd *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Established" && m["status"] == "True" {
			return true
		}
	}
	return false
}
