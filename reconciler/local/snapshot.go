package local

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"signet.dev/signet/evidence"
)

// nvidiaSMITimeout bounds the nvidia-smi query.
const nvidiaSMITimeout = 30 * time.Second

// snapshotter reads the machine's identity; its fields are the paths it
// reads, so that tests may point them elsewhere.
type snapshotter struct {
	machineIDPaths []string
	bootIDPath     string
	productUUID    string
	cpuOnlinePath  string
	meminfoPath    string
	nvidiaSMI      string // command name or path; looked up in PATH
	hostname       func() (string, error)
}

var system = snapshotter{
	machineIDPaths: []string{"/etc/machine-id", "/var/lib/dbus/machine-id"},
	bootIDPath:     "/proc/sys/kernel/random/boot_id",
	productUUID:    "/sys/class/dmi/id/product_uuid",
	cpuOnlinePath:  "/sys/devices/system/cpu/online",
	meminfoPath:    "/proc/meminfo",
	nvidiaSMI:      "nvidia-smi",
	hostname:       os.Hostname,
}

// Snapshot returns this machine's identity for the evidence of run on
// cluster: Name is the hostname, UID the machine id (/etc/machine-id, else
// /var/lib/dbus/machine-id), SystemUUID the DMI product UUID when readable,
// BootID the kernel's boot id, Kernel the uname release, Capacity the
// online CPUs ("cpu"), MemTotal ("memory", in Ki) and, when nvidia-smi is
// in PATH, the GPU count ("nvidia.com/gpu") with GPUProduct and GPUDriver
// (comma-joined distinct values when the GPUs differ). No nvidia-smi means
// no GPU fields; an nvidia-smi that fails is an error, as is a missing
// hostname, machine id or boot id.
func Snapshot(ctx context.Context, cluster, run string) (*evidence.NodeSnapshot, error) {
	return system.snapshot(ctx, cluster, run)
}

func (s snapshotter) snapshot(ctx context.Context, cluster, run string) (*evidence.NodeSnapshot, error) {
	host, err := s.hostname()
	if err != nil {
		return nil, fmt.Errorf("node snapshot: hostname: %w", err)
	}
	snap := &evidence.NodeSnapshot{Cluster: cluster, Run: run, Name: host, Capacity: map[string]string{}}
	for _, p := range s.machineIDPaths {
		if id, err := readID(p); err == nil {
			snap.UID = id
			break
		} else if !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("node snapshot: %w", err)
		}
	}
	if snap.UID == "" {
		return nil, fmt.Errorf("node snapshot: no machine id in %s", strings.Join(s.machineIDPaths, " or "))
	}
	if snap.BootID, err = readID(s.bootIDPath); err != nil {
		return nil, fmt.Errorf("node snapshot: %w", err)
	}
	if id, err := readID(s.productUUID); err == nil {
		snap.SystemUUID = id
	}
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		return nil, fmt.Errorf("node snapshot: uname: %w", err)
	}
	snap.Kernel = unix.ByteSliceToString(uts.Release[:])
	cpus, err := onlineCPUs(s.cpuOnlinePath)
	if err != nil {
		return nil, fmt.Errorf("node snapshot: %w", err)
	}
	snap.Capacity["cpu"] = strconv.Itoa(cpus)
	mem, err := memTotalKi(s.meminfoPath)
	if err != nil {
		return nil, fmt.Errorf("node snapshot: %w", err)
	}
	snap.Capacity["memory"] = strconv.FormatUint(mem, 10) + "Ki"
	if err := s.gpus(ctx, snap); err != nil {
		return nil, fmt.Errorf("node snapshot: %w", err)
	}
	return snap, nil
}

// readID returns the trimmed first line of path, refusing an empty one.
func readID(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	id := strings.TrimSpace(string(b))
	if id == "" || strings.ContainsAny(id, "\n\r\t ") {
		return "", fmt.Errorf("%s: %q is not one id", path, id)
	}
	return id, nil
}

// onlineCPUs counts the CPUs listed in a sysfs cpu list ("0-3,8,10-11").
func onlineCPUs(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	n := 0
	for r := range strings.SplitSeq(strings.TrimSpace(string(b)), ",") {
		lo, hi, isRange := strings.Cut(r, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return 0, fmt.Errorf("%s: %q is not a CPU list", path, b)
		}
		z := a
		if isRange {
			if z, err = strconv.Atoi(hi); err != nil || z < a {
				return 0, fmt.Errorf("%s: %q is not a CPU list", path, b)
			}
		}
		n += z - a + 1
	}
	return n, nil
}

// memTotalKi returns MemTotal from a meminfo file, in KiB.
func memTotalKi(path string) (uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("%s: MemTotal %q is not \"<n> kB\"", path, rest)
		}
		return strconv.ParseUint(f[0], 10, 64)
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("%s: no MemTotal", path)
}

// gpus fills the GPU fields from nvidia-smi when it is in PATH.
func (s snapshotter) gpus(ctx context.Context, snap *evidence.NodeSnapshot) error {
	smi, err := exec.LookPath(s.nvidiaSMI)
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, nvidiaSMITimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, smi, "--query-gpu=name,driver_version", "--format=csv,noheader")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", smi, err, bytes.TrimSpace(stderr.Bytes()))
	}
	var names, drivers []string
	n := 0
	for line := range strings.Lines(string(out)) {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		name, driver, ok := strings.Cut(line, ",")
		name, driver = strings.TrimSpace(name), strings.TrimSpace(driver)
		if !ok || name == "" || driver == "" || strings.Contains(driver, ",") {
			return fmt.Errorf("%s: line %q is not \"name, driver_version\"", smi, line)
		}
		n++
		names = appendNew(names, name)
		drivers = appendNew(drivers, driver)
	}
	if n == 0 {
		return nil
	}
	snap.Capacity["nvidia.com/gpu"] = strconv.Itoa(n)
	snap.GPUProduct = strings.Join(names, ",")
	snap.GPUDriver = strings.Join(drivers, ",")
	return nil
}

func appendNew(s []string, v string) []string {
	for _, x := range s {
		if x == v {
			return s
		}
	}
	return append(s, v)
}
