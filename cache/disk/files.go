package disk

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// The directory is treated as hostile: whoever can write to it could plant
// disk.db or a mark as a symlink to a file elsewhere, which the edge (root,
// in many containers) would grow or truncate. So the directory must be the
// edge's own, not writable by group or others (CheckDir), and every file in
// it is opened without following a symlink and must be a regular file
// (openNoFollow).

// CheckDir says what is wrong with dir as the disk tier's directory, nil if
// nothing: it must be a directory, owned by the running user or root, not
// writable by group or others (a sticky /tmp-like one neither), and a file
// must be creatable in it (a probe file is created and removed).
// config.Validate (-check-config, every start and reload) checks the same.
func CheckDir(dir string) error {
	if dir == "" {
		return errors.New("disk cache: no directory given")
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("disk cache: %s is not a writable directory: %w", dir, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("disk cache: %s is not a writable directory: not a directory", dir)
	}
	if err := privateDir(dir, fi); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".probe-*")
	if err != nil {
		return fmt.Errorf("disk cache: %s is not a writable directory: %w", dir, err)
	}
	f.Close()
	return os.Remove(f.Name())
}

// privateDir refuses a directory others could plant files in.
func privateDir(dir string, fi fs.FileInfo) error {
	if m := fi.Mode(); m.Perm()&0o022 != 0 {
		return fmt.Errorf("disk cache: %s is writable by group or others (mode %s): another user could plant disk.db or its marks there; chmod go-w it, or use a directory of the edge's own", dir, m)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != 0 && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("disk cache: %s is owned by uid %d, neither the edge's (%d) nor root's: its owner could plant disk.db or its marks there", dir, st.Uid, os.Geteuid())
	}
	return nil
}

// errNotRegular: a file of the store's is a symlink, a directory or a
// device, which the store never made.
var errNotRegular = errors.New("not a regular file (a symlink, a directory or a device is never the store's): refused")

// openNoFollow opens name as os.OpenFile does, but never through a
// symlink (O_NOFOLLOW: a symlink is an error, ELOOP), and only a regular
// file. bbolt opens disk.db through it (bbolt.Options.OpenFile).
func openNoFollow(name string, flag int, perm os.FileMode) (*os.File, error) {
	f, err := os.OpenFile(name, flag|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, perm)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, fmt.Errorf("%s: %w", name, errNotRegular)
		}
		return nil, err
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("%s: %w", name, errNotRegular)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// exists says whether name is there, not following a symlink (a mark
// planted as a symlink is there too: it starts the file empty, which is
// safe).
func exists(name string) bool {
	_, err := os.Lstat(name)
	return err == nil
}

// removeFile removes name (not what a symlink points to); one that is not
// there is removed already.
func removeFile(name string) error {
	if err := os.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// The purges mark (disk.db.purges) says whether a purge is outstanding: a
// Delete whose commit failed, which only this process knows to hide. It is
// opened at Open, while the directory is writable, and held: marking it is
// then a write through a descriptor already open, which a directory made
// read-only or immutable since (chmod, chattr +i) does not stop, where
// creating a mark file then would fail. Empty: every purge is in the file.
// Not empty: the next Open starts an empty file. Only a volume remounted
// read-only (or a full one) defeats it: then nothing can be written
// anywhere on it, the purge's answer and log say so, and the node retries
// until the store closes (docs/disk.md).
const purgesMark = "disk.db.purges"

// openMarks opens the purges mark, starting the file empty when it (or a
// corrupt mark, or the unpurged mark of an older build) says so. A file
// that must start empty and cannot be removed is an error: the store is
// not opened (the node serves without it) rather than serve what a purge
// selected.
func (s *Store) openMarks(dir string) error {
	f, err := openNoFollow(filepath.Join(dir, purgesMark), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("disk cache: purges mark: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("disk cache: purges mark: %w", err)
	}
	var why string
	switch {
	case fi.Size() > 0:
		why = "a purge was not in the file when the last process stopped"
	case exists(filepath.Join(dir, legacyUnpurgedMark)):
		why = "a purge could not be written to the file"
	case exists(filepath.Join(dir, brokenMark)):
		why = "the file was found corrupt"
	}
	if why != "" {
		s.log.Warn("disk cache: "+why+"; starting empty", "path", s.path)
		if err := removeFile(s.path); err != nil {
			f.Close()
			return fmt.Errorf("disk cache: %s, and the file cannot be removed: %w", why, err)
		}
		removeFile(filepath.Join(dir, legacyUnpurgedMark))
		removeFile(filepath.Join(dir, brokenMark))
	}
	if fi.Size() > 0 {
		if err := truncateSync(f); err != nil {
			f.Close()
			return fmt.Errorf("disk cache: purges mark: %w", err)
		}
	}
	s.marks = f
	return nil
}

func truncateSync(f *os.File) error {
	if err := f.Truncate(0); err != nil {
		return err
	}
	return f.Sync()
}

// markUnpurged marks a purge outstanding (on) or takes the mark away once
// a commit removed what every failed Delete selects. wmu is held.
func (s *Store) markUnpurged(on bool) error {
	if !on {
		return truncateSync(s.marks)
	}
	if _, err := s.marks.WriteAt([]byte{'1'}, 0); err != nil {
		return err
	}
	return s.marks.Sync()
}

// Distrust marks dir so that the next Open starts an empty file, for a
// node that runs without its disk tier (Open failed): the purges it
// applies meanwhile do not reach the file. Best effort: the error says it
// could not be marked.
func Distrust(dir string) error {
	if err := CheckDir(dir); err != nil {
		return err
	}
	f, err := openNoFollow(filepath.Join(dir, purgesMark), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte{'1'}, 0); err != nil {
		return err
	}
	return f.Sync()
}
