// Package deploy holds no code: it is the home of deploy/base, the kustomize
// base that runs the signet reconciler in a cluster (docs/deploy.md), and of
// the test that applies that base to a real kube-apiserver and checks, as the
// reconciler's own ServiceAccount, what it may and may not do.
package deploy
