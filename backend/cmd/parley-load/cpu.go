package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTick is the unit of /proc's CPU times: USER_HZ, 100 on every Linux
// this runs on (sysconf(_SC_CLK_TCK) needs cgo).
const clockTick = 10 * time.Millisecond

// cpuTimes is the CPU Parley's process and Postgres's have used so far.
type cpuTimes struct{ parley, postgres time.Duration }

// cpu reads Parley's CPU (user and system) from /proc, and Postgres's: every
// process named postgres (the server's backends and its own), plus the
// postmaster's reaped children (backends that ended). Steadier than a rate
// on a shared machine: what a turn costs, not how fast the machine was.
func (e *env) cpu() cpuTimes {
	var c cpuTimes
	if f := procStat(e.parley.Process.Pid); f != nil {
		c.parley = ticks(f[11]) + ticks(f[12])
	}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		comm, err := os.ReadFile(d + "/comm")
		if err != nil || strings.TrimSpace(string(comm)) != "postgres" {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(d))
		f := procStat(pid)
		if f == nil {
			continue
		}
		c.postgres += ticks(f[11]) + ticks(f[12])
		if parent, err := os.ReadFile("/proc/" + f[1] + "/comm"); err != nil || strings.TrimSpace(string(parent)) != "postgres" {
			c.postgres += ticks(f[13]) + ticks(f[14]) // the postmaster: its reaped backends
		}
	}
	return c
}

// procStat is /proc/<pid>/stat's fields after the command's name (field 3,
// the state, is [0]; utime and stime are [11] and [12]), nil when unreadable.
func procStat(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 15 {
		return nil
	}
	return f
}

func ticks(s string) time.Duration {
	n, _ := strconv.ParseInt(s, 10, 64)
	return time.Duration(n) * clockTick
}

// perRequest is the CPU each of n requests cost between two readings.
func perRequest(before, after cpuTimes, n int) (parley, postgres time.Duration) {
	if n == 0 {
		return 0, 0
	}
	return (after.parley - before.parley) / time.Duration(n), (after.postgres - before.postgres) / time.Duration(n)
}
