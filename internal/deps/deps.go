//go:build deps

// Package deps pins the project's dependencies before their first use.
package deps

import (
	_ "github.com/fluxcd/pkg/apis/meta"
	_ "github.com/go-git/go-git/v5"
	_ "github.com/gowebpki/jcs"
	_ "github.com/hiddeco/sshsig"
	_ "github.com/opencontainers/go-digest"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/sigstore/sigstore/pkg/signature/dsse"
	_ "github.com/spf13/cobra"
	_ "github.com/stretchr/testify/require"
	_ "go.yaml.in/yaml/v3"
	_ "golang.org/x/crypto/ssh"
	_ "k8s.io/apimachinery/pkg/apis/meta/v1"
	_ "k8s.io/client-go/kubernetes"
	_ "sigs.k8s.io/kustomize/api/krusty"
	_ "sigs.k8s.io/kustomize/kyaml/filesys"
)
