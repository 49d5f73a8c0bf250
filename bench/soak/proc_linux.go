package main

import "syscall"

// sysProcAttr puts a child in a process group of its own (the soak ends the
// whole group) and has the kernel kill it if the soak dies without cleaning
// up (SIGKILL of the soak, a crash).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
