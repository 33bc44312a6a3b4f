// Package s3test is for tests only: an in-process S3-compatible object
// store (gofakes3 in memory) on a loopback HTTP listener, with a switch
// that makes it fail every request (an outage) and a listing of what it
// holds.
package s3test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/ringlog/ringlog/tiered"
)

// Bucket is the bucket every Server has.
const Bucket = "ringlog-test"

// Credentials a Server accepts (gofakes3 accepts any).
const (
	AccessKey = "test-access"
	SecretKey = "test-secret"
)

// Server is a running in-process object store.
type Server struct {
	// URL is its endpoint.
	URL     string
	backend *s3mem.Backend
	down    atomic.Bool
	putWait atomic.Int64 // nanoseconds each PUT waits before it is served
	puts    atomic.Int64 // PUTs being served
	// Requests counts the requests it got (failed ones too).
	Requests atomic.Int64
	srv      *httptest.Server
}

// Start starts a store with Bucket, closed at the test's cleanup.
func Start(t testing.TB) *Server {
	t.Helper()
	s := &Server{backend: s3mem.New()}
	if err := s.backend.CreateBucket(Bucket); err != nil {
		t.Fatal(err)
	}
	fake := gofakes3.New(s.backend, gofakes3.WithAutoBucket(false))
	h := fake.Server()
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.Requests.Add(1)
		if r.Method == http.MethodPut {
			s.puts.Add(1)
			defer s.puts.Add(-1)
			if d := time.Duration(s.putWait.Load()); d > 0 {
				time.Sleep(d)
			}
		}
		if s.down.Load() {
			http.Error(w, "<Error><Code>ServiceUnavailable</Code><Message>down for the test</Message></Error>", http.StatusServiceUnavailable)
			return
		}
		h.ServeHTTP(w, r)
	}))
	s.URL = s.srv.URL
	t.Cleanup(s.srv.Close)
	return s
}

// SetPutDelay makes each PUT wait d before it is served (a slow store).
func (s *Server) SetPutDelay(d time.Duration) { s.putWait.Store(int64(d)) }

// PutsInFlight is how many PUTs it is serving now: with SetPutDelay, a
// test can act while an upload is under way.
func (s *Server) PutsInFlight() int64 { return s.puts.Load() }

// SetDown makes every request fail with 503 (true) or be served again.
func (s *Server) SetDown(down bool) { s.down.Store(down) }

// Store returns a client of the store.
func (s *Server) Store(t testing.TB) *tiered.S3 {
	t.Helper()
	st, err := tiered.NewS3(tiered.S3Config{Endpoint: s.URL, Bucket: Bucket, AccessKey: AccessKey, SecretKey: SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// Keys lists the objects the store holds, sorted.
func (s *Server) Keys(t testing.TB) []string {
	t.Helper()
	list, err := s.backend.ListBucket(Bucket, nil, gofakes3.ListBucketPage{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, c := range list.Contents {
		out = append(out, c.Key)
	}
	sort.Strings(out)
	return out
}

// Object returns the bytes of key.
func (s *Server) Object(t testing.TB, key string) []byte {
	t.Helper()
	obj, err := s.backend.GetObject(Bucket, key, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Contents.Close()
	b, err := io.ReadAll(obj.Contents)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Replace overwrites key with b (a store that changed or damaged it).
func (s *Server) Replace(t testing.TB, key string, b []byte) {
	t.Helper()
	if _, err := s.backend.PutObject(Bucket, key, map[string]string{}, bytes.NewReader(b), int64(len(b)), nil); err != nil {
		t.Fatal(err)
	}
}
