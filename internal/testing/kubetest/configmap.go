package kubetest

import (
	"context"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// OwnConfigMap creates namespace ns (when missing) and an empty ConfigMap
// name in it, and grants user exactly get and update of that one object,
// as deploy/base grants the reconciler its evidence-tip ConfigMap. It
// returns once the API server's authorizer allows both verbs: its RBAC
// cache learns a new binding from a watch, a few milliseconds (seconds,
// under load) after the write.
func (e *Env) OwnConfigMap(t testing.TB, ns, name, user string) {
	t.Helper()
	ctx := t.Context()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("kubetest: ConfigMap %s/%s for %s: %v", ns, name, user, err)
		}
	}
	_, err := e.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		must(err)
	}
	_, err = e.Client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	must(err)
	role := "own-" + name
	_, err = e.Client.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: role},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{name}, Verbs: []string{"get", "update"}}},
	}, metav1.CreateOptions{})
	must(err)
	_, err = e.Client.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role},
		Subjects:   []rbacv1.Subject{{Kind: "User", Name: user}},
	}, metav1.CreateOptions{})
	must(err)
	for _, verb := range []string{"get", "update"} {
		must(e.waitAllowed(ctx, authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Resource: "configmaps", Name: name}, user))
	}
}

// waitAllowed polls a SubjectAccessReview, answered by the same authorizer
// that serves user's requests, until it allows attrs.
func (e *Env) waitAllowed(ctx context.Context, attrs authorizationv1.ResourceAttributes, user string) error {
	return wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		r, err := e.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{User: user, ResourceAttributes: &attrs},
		}, metav1.CreateOptions{})
		if err != nil {
			return false, err
		}
		return r.Status.Allowed, nil
	})
}
