package kube

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// TestLauncherChainReadErrorIsNotForgery: a launcher pod whose
// controlling Job cannot be read (the poll was canceled, the API server
// failed) is neither accepted nor called forged: launcherChain returns
// the error, so the poll is retried or the cancel reported. A Job that
// does not exist breaks the chain. The API server is client-go's fake
// clientset with a reactor: the real one cannot be made to fail one read
// on demand (the end-to-end MPIJob cases run on the real control plane).
func TestLauncherChainReadErrorIsNotForgery(t *testing.T) {
	isController := true
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "launcher", Namespace: "checks", OwnerReferences: []metav1.OwnerReference{
		{APIVersion: "batch/v1", Kind: "Job", Name: "launcher-job", UID: "job-uid", Controller: &isController},
	}}}
	for _, tc := range []struct {
		name    string
		err     error
		wantErr error
		wantWhy string
	}{
		{"canceled read", context.Canceled, context.Canceled, ""},
		{"server error", apierrors.NewInternalError(errors.New("etcd unavailable")), nil, ""},
		{"no such Job", apierrors.NewNotFound(schema.GroupResource{Group: "batch", Resource: "jobs"}, "launcher-job"), nil, "names Job launcher-job as its controller, which does not exist"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := fake.NewClientset()
			cs.PrependReactor("get", "jobs", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, tc.err })
			b := &MPIJobBackend{client: cs}
			why, err := b.launcherChain(t.Context(), pod, "mpijob-uid", map[types.UID]string{})
			if tc.wantWhy != "" {
				require.NoError(t, err)
				assert.Equal(t, tc.wantWhy, why, "a Job that does not exist breaks the chain")
				return
			}
			require.Error(t, err, "a Job that could not be read was judged: %q", why)
			assert.Empty(t, why)
			if tc.wantErr != nil {
				assert.ErrorIs(t, err, tc.wantErr)
			}
			assert.Contains(t, err.Error(), "reading Job launcher-job, the controller of launcher pod launcher")
		})
	}
}
