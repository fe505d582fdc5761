package local

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"signet.dev/signet/evidence"
)

// fakeMachine returns a snapshotter reading files under a temp dir, with
// nvidia-smi replaced by smi (a shell body) or absent when smi is empty.
func fakeMachine(t *testing.T, smi string) snapshotter {
	t.Helper()
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), mode))
		return p
	}
	s := snapshotter{
		machineIDPaths: []string{filepath.Join(dir, "etc-machine-id"), write("dbus-machine-id", "0123456789abcdef0123456789abcdef\n", 0o444)},
		bootIDPath:     write("boot_id", "2597f64f-1d59-42eb-bc1d-f560f7289d47\n", 0o444),
		productUUID:    write("product_uuid", "4c4c4544-0042-3510-8052-b4c04f4e4e31\n", 0o444),
		cpuOnlinePath:  write("online", "0-3,8,10-11\n", 0o444),
		meminfoPath:    write("meminfo", "MemFree:  1 kB\nMemTotal:       2113929216 kB\n", 0o444),
		nvidiaSMI:      filepath.Join(dir, "absent-nvidia-smi"),
		hostname:       func() (string, error) { return "gpu-node-7", nil },
	}
	if smi != "" {
		s.nvidiaSMI = write("nvidia-smi", "#!/bin/sh\n"+smi+"\n", 0o755)
	}
	return s
}

func TestSnapshot(t *testing.T) {
	var uts unix.Utsname
	require.NoError(t, unix.Uname(&uts))
	kernel := unix.ByteSliceToString(uts.Release[:])
	base := evidence.NodeSnapshot{
		Cluster: "lab", Run: "run-1", Name: "gpu-node-7",
		UID:        "0123456789abcdef0123456789abcdef",
		SystemUUID: "4c4c4544-0042-3510-8052-b4c04f4e4e31",
		BootID:     "2597f64f-1d59-42eb-bc1d-f560f7289d47",
		Kernel:     kernel,
		Capacity:   map[string]string{"cpu": "7", "memory": "2113929216Ki"},
	}
	withGPU := func(n, product, driver string) *evidence.NodeSnapshot {
		s := base
		s.Capacity = map[string]string{"cpu": "7", "memory": "2113929216Ki", "nvidia.com/gpu": n}
		s.GPUProduct, s.GPUDriver = product, driver
		return &s
	}
	tests := []struct {
		name    string
		smi     string
		mod     func(s *snapshotter)
		want    *evidence.NodeSnapshot
		wantErr string
	}{
		{name: "no nvidia-smi: no GPU fields", want: &base},
		{name: "eight GPUs", smi: `i=0; while [ $i -lt 8 ]; do echo "NVIDIA H200, 570.133.20"; i=$((i+1)); done`,
			want: withGPU("8", "NVIDIA H200", "570.133.20")},
		{name: "mixed GPUs", smi: `echo "NVIDIA H100 80GB HBM3, 550.54"; echo "NVIDIA A100-SXM4-80GB, 550.54"`,
			want: withGPU("2", "NVIDIA H100 80GB HBM3,NVIDIA A100-SXM4-80GB", "550.54")},
		{name: "nvidia-smi without GPUs", smi: `exit 0`, want: &base},
		{name: "nvidia-smi fails", smi: `echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver" >&2; exit 9`,
			wantErr: "couldn't communicate with the NVIDIA driver"},
		{name: "nvidia-smi garbage", smi: `echo "no comma here"`, wantErr: `line "no comma here" is not "name, driver_version"`},
		{name: "first machine id wins", mod: func(s *snapshotter) {
			require.NoError(t, os.WriteFile(s.machineIDPaths[0], []byte("ffffffffffffffffffffffffffffffff\n"), 0o444))
		}, want: func() *evidence.NodeSnapshot { s := base; s.UID = "ffffffffffffffffffffffffffffffff"; return &s }()},
		{name: "no machine id", mod: func(s *snapshotter) { s.machineIDPaths = s.machineIDPaths[:1] }, wantErr: "no machine id"},
		{name: "empty machine id", mod: func(s *snapshotter) {
			require.NoError(t, os.WriteFile(s.machineIDPaths[0], []byte("\n"), 0o444))
		}, wantErr: `"" is not one id`},
		{name: "no boot id", mod: func(s *snapshotter) { s.bootIDPath += ".absent" }, wantErr: "boot_id.absent"},
		{name: "no product uuid is fine", mod: func(s *snapshotter) { s.productUUID += ".absent" },
			want: func() *evidence.NodeSnapshot { s := base; s.SystemUUID = ""; return &s }()},
		{name: "bad cpu list", mod: func(s *snapshotter) {
			require.NoError(t, os.WriteFile(s.cpuOnlinePath, []byte("3-1\n"), 0o444))
		}, wantErr: "is not a CPU list"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := fakeMachine(t, tt.smi)
			if tt.mod != nil {
				tt.mod(&s)
			}
			got, err := s.snapshot(t.Context(), "lab", "run-1")
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.wantErr)
				assert.True(t, strings.HasPrefix(err.Error(), "node snapshot: "), err.Error())
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

// TestSnapshotThisMachine takes the real snapshot of the machine the test
// runs on.
func TestSnapshotThisMachine(t *testing.T) {
	got, err := Snapshot(t.Context(), "lab", "run-1")
	require.NoError(t, err)
	host, err := os.Hostname()
	require.NoError(t, err)
	assert.Equal(t, host, got.Name)
	id, err := readID("/etc/machine-id")
	if err != nil {
		id, err = readID("/var/lib/dbus/machine-id")
	}
	require.NoError(t, err)
	assert.Equal(t, id, got.UID)
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	require.NoError(t, err)
	assert.Equal(t, strings.TrimSpace(string(boot)), got.BootID)
	assert.NotEmpty(t, got.Kernel)
	assert.NotEmpty(t, got.Capacity["cpu"])
	assert.Regexp(t, `^[1-9][0-9]*Ki$`, got.Capacity["memory"])
	if _, ok := got.Capacity["nvidia.com/gpu"]; ok {
		assert.NotEmpty(t, got.GPUProduct)
		assert.NotEmpty(t, got.GPUDriver)
		t.Logf("GPUs: %s × %s, driver %s", got.Capacity["nvidia.com/gpu"], got.GPUProduct, got.GPUDriver)
	}
}
