package a

import (
	"os"

	"github.com/ringlog/ringlog/internal/fsutil"
)

func syncs(f *os.File) error {
	f.Sync()               // want `the error of f.Sync is dropped: a failed sync`
	_ = f.Sync()           // want `the error of f.Sync is assigned to _`
	defer f.Sync()         // want `the error of f.Sync is dropped by defer`
	fsutil.SyncDir("d")    // want `the error of fsutil.SyncDir is dropped`
	go fsutil.SyncDir("d") // want `the error of fsutil.SyncDir is dropped by go`
	if err := f.Sync(); err != nil {
		return err
	}
	return fsutil.SyncDir("d")
}

func written(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close() // want `the error of f.Close is dropped by defer: Close of a written file`
	g, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	g.Close() // want `the error of g.Close is dropped: Close of a written file`
	h, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	if _, err := h.Write([]byte("x")); err != nil {
		_ = h.Close() // explicit, on an error path: accepted
		return err
	}
	return h.Close()
}

func readOnly(path string, flag int) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close() // read-only: not reported
	g, err := os.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return err
	}
	g.Close() // read-only: not reported
	h, err := os.OpenFile(path, flag, 0)
	if err != nil {
		return err
	}
	h.Close() // want `the error of h.Close is dropped`
	return nil
}

func literal(path string) {
	f, _ := os.Create(path)
	func() {
		f.Sync() // want `the error of f.Sync is dropped`
	}()
	_ = f.Close()
}

func closures(path string) (err error) {
	var f, ferr = os.Create(path)
	if ferr != nil {
		return ferr
	}
	defer func() {
		f.Close() // want `the error of f.Close is dropped: Close of a written file`
	}()
	g, err := os.Create(path)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := g.Close(); err == nil {
			err = cerr
		}
	}()
	return nil
}
