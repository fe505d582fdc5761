package reconciler

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestFinding21_11RegistryWholeNames: ceiling registry entries match whole
// components of an explicitly named registry's repository. Before issue 21
// "registry.example.invalid@sha256:…" passed the entry
// "registry.example.invalid" although runtimes pull it from Docker Hub
// (docker.io/library/registry.example.invalid), and so did
// "localhost:5000@sha256:…" for "localhost:5000".
func TestFinding21_11RegistryWholeNames(t *testing.T) {
	const d = "@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	c := Ceiling{Registries: []string{"registry.example.invalid", "localhost:5000", "images.example.invalid/team", "nvidia"}}
	for image, want := range map[string]bool{
		"registry.example.invalid/nccl" + d:           true,
		"registry.example.invalid/a/b:v1" + d:         true,
		"localhost:5000/nccl" + d:                     true,
		"images.example.invalid/team/nccl" + d:        true,
		"images.example.invalid/team" + d:             true,
		"registry.example.invalid" + d:                false, // docker.io/library/registry.example.invalid
		"registry.example.invalid:v1" + d:             false, // the same, tagged
		"localhost:5000" + d:                          false, // docker.io/library/localhost, tag 5000
		"registry.example.invalid.evil.example/x" + d: false,
		"images.example.invalid/teamx/nccl" + d:       false,
		"images.example.invalid/other" + d:            false,
		"nccl" + d:                                    false,
		"nvidia/cuda" + d:                             false, // docker.io/nvidia/cuda: "nvidia" is no registry host
	} {
		assert.Equal(t, want, c.registryAllowed(image), "%s", image)
	}
}
