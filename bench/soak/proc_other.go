//go:build !linux

package main

import "syscall"

// sysProcAttr puts a child in a process group of its own; the soak ends the
// whole group.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
