package disk

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strconv"
)

// bbolt reads the file through a memory map: every page a Get touched
// stays in the process's resident memory (RssFile in /proc/self/status)
// until the kernel needs it back. Those are page cache, clean (bbolt
// writes with pwrite, not through the map), charged to the pod's memory
// but reclaimed before an OOM kill, so they are not memory the process
// holds the way its heap is; process_resident_memory_bytes counts them
// all the same, up to the whole file once every entry was read
// (docs/disk.md, Memory). Resident says how much that is, so that what is
// compared with the memory bound can leave it out.

// Resident returns the bytes of the store's file resident in this
// process's memory map, as Linux's /proc/self/smaps says (the Rss of the
// file's mappings); 0 where there is no such file.
func (s *Store) Resident() int64 {
	path, err := filepath.Abs(s.path)
	if err != nil {
		return 0
	}
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return 0
	}
	defer f.Close()
	return residentOf(f, path)
}

// residentOf sums the Rss lines of the mappings of path in smaps.
func residentOf(smaps *os.File, path string) int64 {
	var total int64
	in := false
	sc := bufio.NewScanner(smaps)
	for sc.Scan() {
		line := sc.Bytes()
		fields := bytes.Fields(line)
		if len(fields) == 0 {
			continue
		}
		// A mapping's header: "start-end perms offset dev inode [path]".
		if bytes.IndexByte(fields[0], '-') > 0 && !bytes.HasSuffix(fields[0], []byte(":")) {
			in = len(fields) >= 6 && string(fields[5]) == path
			continue
		}
		if in && string(fields[0]) == "Rss:" && len(fields) >= 2 {
			if kb, err := strconv.ParseInt(string(fields[1]), 10, 64); err == nil {
				total += kb << 10
			}
		}
	}
	return total
}
