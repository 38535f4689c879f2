//go:build unix

package webhook

import (
	"io/fs"
	"syscall"
)

// fileIdentity is what changes when a file is replaced or written even if its size and
// modification time are put back: its inode and its status change time.
func fileIdentity(info fs.FileInfo) (uint64, int64) {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0
	}
	return uint64(st.Ino), int64(st.Ctim.Sec)*1e9 + int64(st.Ctim.Nsec) //nolint:unconvert // int32 fields on some platforms
}
