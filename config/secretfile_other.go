//go:build !linux

package config

import "os"

// pseudoFS is the Linux check of the filesystem a secret's file is on;
// elsewhere the path's check (kernelPath) stands alone.
func pseudoFS(*os.File) string { return "" }
