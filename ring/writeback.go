package ring

// WritebackStarter is a Backend that can start the kernel's writeback of a
// file range without its caller waiting for it: the hybrid and io_uring
// backends, which hand it to their ring as a request nobody waits for.
type WritebackStarter interface {
	// StartWriteback asks for the writeback of [off, off+n) of fd; see
	// the package function StartWriteback. Like Run, it must only be
	// called by the backend's owner.
	StartWriteback(fd int, off, n int64) error
	// DropCache asks for the clean page cache of [off, off+n) of fd to
	// be dropped; see the package function DropCache. Owner only.
	DropCache(fd int, off, n int64) error
}

// StartWriteback asks the kernel to start writing fd's dirty page cache in
// [off, off+n) back to disk and does not wait for those writes
// (sync_file_range with SYNC_FILE_RANGE_WRITE on Linux; nothing elsewhere).
// It is a hint that keeps dirty data small, not a durability promise.
//
// Through a WritebackStarter (b's ring) the caller does not even wait for
// the kernel to issue the writes, which can take hundreds of microseconds
// and, behind a busy disk, milliseconds: a kernel worker does that. With
// any other backend, or a nil b, the system call runs here. The error is
// that of this call or of an earlier hint that failed since the last one
// reported: a hint's failure is only ever worth a log line.
func StartWriteback(b Backend, fd int, off, n int64) error {
	if w, ok := b.(WritebackStarter); ok {
		return w.StartWriteback(fd, off, n)
	}
	return syncFileRange(fd, off, n)
}

// DropCache asks the kernel to drop fd's page cache in [off, off+n)
// (posix_fadvise POSIX_FADV_DONTNEED on Linux; nothing elsewhere) and, like
// StartWriteback, does not make its caller wait when b has a ring. Only
// clean pages go: dirty ones, and those still being written back, stay, so
// no data is lost and a read of a dropped range reads the file again.
//
// It is what keeps the page cache a writer churns through small: pages
// freed behind the tail are the ones the next appends take, instead of
// fresh pages that on some hosts (a VM whose free memory the hypervisor
// reclaims) cost several times the copy itself. The error is as
// StartWriteback's: only ever worth a log line.
func DropCache(b Backend, fd int, off, n int64) error {
	if w, ok := b.(WritebackStarter); ok {
		return w.DropCache(fd, off, n)
	}
	return dropCache(fd, off, n)
}
