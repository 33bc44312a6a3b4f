package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3afero"
	"github.com/spf13/afero"

	"github.com/ringlog/ringlog/internal/cli"
)

const devS3Usage = `Usage: ringlog dev-s3 [flags]

Serves an S3-compatible object store (gofakes3, each bucket a directory
under --dir, each object a file) for trying tiered storage on one machine: 'make run-tiered' starts
it next to a broker. Not for production: no authentication (any
credentials are accepted), no replication.
`

const devS3Examples = `
Examples:
  ringlog dev-s3 --addr 127.0.0.1:9000 --dir ./data-s3 --bucket ringlog
  AWS_ACCESS_KEY_ID=dev AWS_SECRET_ACCESS_KEY=dev ringlog serve \
      --remote-storage-endpoint http://127.0.0.1:9000 --remote-storage-bucket ringlog
`

func runDevS3(args []string, stdout, stderr io.Writer) error {
	var addr, dir, bucket string
	fs := cli.NewFlagSet("dev-s3", devS3Usage, devS3Examples, stdout)
	fs.StringVar(&addr, "addr", "127.0.0.1:9000", "listen on this host:port")
	fs.StringVar(&dir, "dir", "./data-s3", "directory of the buckets (a directory each) and their objects")
	fs.StringVar(&bucket, "bucket", "ringlog", "bucket created at start when missing")
	if rest, err := cli.ParseArgs(fs, args); err != nil {
		return err
	} else if len(rest) > 0 {
		return cli.Usagef("dev-s3: unexpected argument %q", rest[0])
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("dev-s3: %w", err)
	}
	root, err := s3afero.NewBasePathFs(afero.NewOsFs(), dir, 0)
	if err != nil {
		return fmt.Errorf("dev-s3: %s: %w", dir, err)
	}
	backend, err := s3afero.MultiBucket(root)
	if err != nil {
		return fmt.Errorf("dev-s3: %s: %w", dir, err)
	}
	if err := backend.CreateBucket(bucket); err != nil && !gofakes3.IsAlreadyExists(err) {
		return fmt.Errorf("dev-s3: create bucket %s: %w", bucket, err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return cli.Usagef("dev-s3: --addr %s: %v", addr, err)
	}
	srv := &http.Server{Handler: gofakes3.New(backend).Server(), ReadHeaderTimeout: 10 * time.Second}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sig)
	fmt.Fprintf(stdout, "ringlog dev-s3 ready endpoint=http://%s bucket=%s dir=%s\n", ln.Addr(), bucket, dir)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("dev-s3: %w", err)
	case <-sig:
		return srv.Close()
	}
}
