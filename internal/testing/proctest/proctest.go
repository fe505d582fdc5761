// Package proctest reads what the kernel says about the test process.
package proctest

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// PeakRSS is this process's peak resident set size in bytes (VmHWM of
// /proc/self/status).
func PeakRSS() (uint64, error) {
	f, err := statusFields("VmHWM")
	if err != nil {
		return 0, err
	}
	return f["VmHWM"], nil
}

// statusFields reads the named fields (in kB) of /proc/self/status, in
// bytes.
func statusFields(names ...string) (map[string]uint64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]uint64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		for _, n := range names {
			if k == n {
				kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				if err != nil {
					return nil, fmt.Errorf("/proc/self/status: %s: %w", k, err)
				}
				out[k] = kb << 10
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	for _, n := range names {
		if _, ok := out[n]; !ok {
			return nil, fmt.Errorf("/proc/self/status: no %s", n)
		}
	}
	return out, nil
}

// RSSPeaks are the largest anonymous and file-backed resident sizes a
// Sampler saw, in bytes. Anonymous memory is the process's own (heap,
// stacks); file-backed is mapped files' pages (packs read through mmap),
// which the kernel can drop and read again under memory pressure.
type RSSPeaks struct {
	Anon, File uint64
}

// Sampler reads RssAnon and RssFile of this process every interval until
// stopped: VmHWM has no such split.
type Sampler struct {
	stop chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	peak RSSPeaks
	err  error
}

// StartSampler starts sampling every interval.
func StartSampler(interval time.Duration) *Sampler {
	s := &Sampler{stop: make(chan struct{})}
	s.sample()
	s.wg.Go(func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
				s.sample()
			}
		}
	})
	return s
}

func (s *Sampler) sample() {
	f, err := statusFields("RssAnon", "RssFile")
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.err = err
		return
	}
	s.peak.Anon = max(s.peak.Anon, f["RssAnon"])
	s.peak.File = max(s.peak.File, f["RssFile"])
}

// Stop takes a last sample, stops and returns the peaks.
func (s *Sampler) Stop() (RSSPeaks, error) {
	close(s.stop)
	s.wg.Wait()
	s.sample()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peak, s.err
}

// Mapping is what /proc/self/smaps says of this process's mappings of
// one file, summed over them.
type Mapping struct {
	// Count is the number of mappings of the file.
	Count int
	// RSSKB is their resident size, in kB.
	RSSKB int
	// Flags are the VmFlags every mapping of the file has (e.g. "rr":
	// MADV_RANDOM).
	Flags []string
}

// Mapped reads /proc/self/smaps for the mappings of file p (Linux).
func Mapped(p string) (Mapping, error) {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return Mapping{}, err
	}
	defer f.Close()
	var m Mapping
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		switch {
		case len(fields) >= 5 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":"):
			in = len(fields) >= 6 && fields[5] == p
			if in {
				m.Count++
			}
		case in && len(fields) == 3 && fields[0] == "Rss:":
			kb, err := strconv.Atoi(fields[1])
			if err != nil {
				return Mapping{}, fmt.Errorf("/proc/self/smaps: %q: %w", sc.Text(), err)
			}
			m.RSSKB += kb
		case in && fields[0] == "VmFlags:":
			if m.Count == 1 {
				m.Flags = fields[1:]
			} else {
				m.Flags = slices.DeleteFunc(m.Flags, func(f string) bool { return !slices.Contains(fields[1:], f) })
			}
		}
	}
	return m, sc.Err()
}
