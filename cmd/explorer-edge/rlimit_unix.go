//go:build unix

package main

import "syscall"

// raiseDescriptorLimit raises the soft RLIMIT_NOFILE to the hard limit
// (Go's runtime does too since Go 1.19; doing it here makes it explicit
// and gives the value) and returns the limit in force.
func raiseDescriptorLimit() (uint64, error) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, err
	}
	if l.Cur >= l.Max {
		return uint64(l.Cur), nil
	}
	raised := syscall.Rlimit{Cur: l.Max, Max: l.Max}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised); err != nil {
		// macOS refuses a hard limit of "unlimited" as the soft one.
		return uint64(l.Cur), err
	}
	return uint64(l.Max), nil
}
