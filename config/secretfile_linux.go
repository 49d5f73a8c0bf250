package config

import (
	"os"
	"syscall"
)

// pseudoFilesystems are the kernel's filesystems whose regular files are
// views of the kernel's state, by their statfs magic: a *_file key
// pointed at one (/proc/self/environ, which holds every EDGE_* secret of
// the process) would be read as a secret and shown or sent upstream.
var pseudoFilesystems = map[int64]string{
	0x9fa0:     "procfs",
	0x62656572: "sysfs",
	0x64626720: "debugfs",
	0x74726163: "tracefs",
	0x73636673: "securityfs",
	0x27e0eb:   "cgroupfs",
	0x63677270: "cgroup2fs",
	0xcafe4a11: "bpffs",
	0x62656570: "configfs",
	0xde5e81e4: "efivarfs",
	0x1cd1:     "devpts",
	0x6165676c: "pstorefs",
}

// pseudoFS names the kernel pseudo-filesystem f is on, or "". It asks the
// descriptor opened, so a symlink (or one swapped after a check of the
// path) does not get past.
func pseudoFS(f *os.File) string {
	rc, err := f.SyscallConn()
	if err != nil {
		return ""
	}
	var st syscall.Statfs_t
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = syscall.Fstatfs(int(fd), &st) }); err != nil || serr != nil {
		return ""
	}
	return pseudoFilesystems[int64(st.Type)]
}
