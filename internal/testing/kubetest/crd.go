package kubetest

import (
	"context"
	_ "embed"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"
)

// mpiJobCRD is testdata/mpijob-crd.yaml.
//
//go:embed testdata/mpijob-crd.yaml
var mpiJobCRD []byte

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

// InstallMPIJobCRD creates the kubeflow.org/v2beta1 MPIJob
// CustomResourceDefinition of testdata/mpijob-crd.yaml (namespaced, with a
// status subresource and a structural schema of the MPI Operator's v2beta1
// spec; pod templates are preserved unvalidated) and returns once the API
// server reports it Established and serves mpijobs. It installs only the API:
// no controller acts on MPIJobs unless StartMPIOperator runs one. An
// already existing CRD of that name is left as it is.
func (e *Env) InstallMPIJobCRD(ctx context.Context) {
	e.t.Helper()
	var obj map[string]any
	if err := yaml.Unmarshal(mpiJobCRD, &obj); err != nil {
		e.t.Fatalf("kubetest: testdata/mpijob-crd.yaml: %v", err)
	}
	dc := e.Dynamic()
	crd := &unstructured.Unstructured{Object: obj}
	if _, err := dc.Resource(crdGVR).Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		e.t.Fatalf("kubetest: create CRD %s: %v", crd.GetName(), err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		got, err := dc.Resource(crdGVR).Get(ctx, crd.GetName(), metav1.GetOptions{})
		if err == nil && established(got) {
			// Established: the API server serves the resource; a list
			// proves the handler is installed.
			if _, err = dc.Resource(MPIJobGVR).Namespace("default").List(ctx, metav1.ListOptions{Limit: 1}); err == nil {
				return
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			e.t.Fatalf("kubetest: CRD %s not established: %v", crd.GetName(), err)
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
