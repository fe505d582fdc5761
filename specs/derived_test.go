package specs

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseSeconds(t *testing.T) {
	tests := []struct {
		in      string
		want    Seconds
		wantErr string
	}{
		{"600s", 600, ""},
		{"1s", 1, ""},
		{"604800s", 604800, ""},
		{"604801s", 0, "longer than the longest deadline"},
		{"90", 0, `"90" is not whole seconds ("90s")`},
		{"1.5s", 0, "not a whole positive number of seconds"},
		{"0s", 0, "is not positive"},
		{"-1s", 0, "not a whole positive number of seconds"},
		{"1m", 0, `"1m" is not whole seconds ("60s")`},
		{"1h30m", 0, `("5400s")`},
		{" 60s", 0, "not a whole positive number"},
		{"60S", 0, "not a whole positive number"},
		{"", 0, "not a whole positive number"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseSeconds(tt.in)
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
			assert.Equal(t, tt.in, got.String())
			assert.Equal(t, time.Duration(tt.want)*time.Second, got.Duration())
		})
	}
}

func TestRunDeadlineAndFloor(t *testing.T) {
	r, err := Render(baseRepo(t), ".")
	require.NoError(t, err)
	require.Empty(t, r.Findings)
	p := r.Profile("gpu-burnin").Profile
	assert.Equal(t, (600+60+900+60)*time.Second, p.RunDeadline())
	floor := p.Floor()
	got := map[string]string{}
	for k, q := range floor {
		got[k] = q.String()
	}
	// cpu: max(4, 8); memory: max(16Gi request, 8Gi); GPUs: max(8, 4).
	assert.Equal(t, map[string]string{"cpu": "8", "memory": "16Gi", GPUResource: "8"}, got)

	local := r.Profile("cpu-local").Profile
	assert.True(t, local.IsLocal())
	assert.Equal(t, 120*time.Second, local.RunDeadline())
	assert.Empty(t, local.Floor())
}

func TestFloorTakesLimitWhenNoRequest(t *testing.T) {
	r, err := Render(baseRepo(t, edit{file: gpuFile, old: "          limits:\n            memory: 32Gi", new: "          limits:\n            memory: 32Gi\n            ephemeral-storage: 10Gi"}), ".")
	require.NoError(t, err)
	require.Empty(t, r.Findings)
	floor := r.Profile("gpu-burnin").Profile.Floor()
	q := floor["ephemeral-storage"]
	assert.Equal(t, "10Gi", q.String())
}
