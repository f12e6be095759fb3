package main

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// Machine describes where the figures were taken.
type Machine struct {
	CPUs     int     `json:"cpus"`
	CPUModel string  `json:"cpu_model"`
	MemGiB   float64 `json:"mem_gib"`
	Kernel   string  `json:"kernel"`
	Disk     string  `json:"disk"` // filesystem and device of the work directory
	Go       string  `json:"go"`
	// FsyncUS is the median of a 4 KiB append + fdatasync on the work
	// directory's filesystem: the floor under any durable commit there.
	FsyncUS    float64 `json:"fsync_us"`
	FsyncP99US float64 `json:"fsync_p99_us"`
	Load1      float64 `json:"load1"` // load average when the run started
}

func describeMachine(dir string) Machine {
	m := Machine{CPUs: runtime.NumCPU(), Go: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	m.MemGiB = float64(statusKiB("/proc/meminfo", "MemTotal:")) / (1 << 20)
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		f := strings.Fields(string(b))
		if len(f) > 0 {
			m.Load1 = parseFloat(f[0])
		}
	}
	m.Disk = diskOf(dir)
	return m
}

// diskOf names the filesystem type and device that hold dir (from /proc/mounts:
// the longest mount point that contains it).
func diskOf(dir string) string {
	b, err := os.ReadFile("/proc/mounts")
	if err != nil {
		return ""
	}
	best, desc := "", ""
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		mp := f[1]
		if (dir == mp || strings.HasPrefix(dir, strings.TrimSuffix(mp, "/")+"/")) && len(mp) > len(best) {
			best, desc = mp, f[2]+" on "+f[0]
		}
	}
	if dev := strings.TrimPrefix(desc[strings.LastIndex(desc, " ")+1:], "/dev/"); dev != "" {
		if rot, err := os.ReadFile(filepath.Join("/sys/block", dev, "queue/rotational")); err == nil {
			if strings.TrimSpace(string(rot)) == "0" {
				desc += " (non-rotational)"
			} else {
				desc += " (reports rotational)"
			}
		}
	}
	return desc
}

// rawFsync returns the median and p99 time of n 4 KiB appends each followed by fdatasync.
func rawFsync(dir string, n int) (p50, p99 float64, err error) {
	f, err := os.CreateTemp(dir, "fsync-*")
	if err != nil {
		return 0, 0, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	block := make([]byte, 4096)
	ds := make([]time.Duration, 0, n)
	for range n {
		t := time.Now()
		if _, err := f.Write(block); err != nil {
			return 0, 0, err
		}
		if err := syscall.Fdatasync(int(f.Fd())); err != nil {
			return 0, 0, err
		}
		ds = append(ds, time.Since(t))
	}
	return usQ(ds, 0.5), usQ(ds, 0.99), nil
}
