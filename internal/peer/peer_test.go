package peer

import (
	"bytes"
	"testing"
)

// FuzzDecodeRemoteLog: the remote log field of an AlterPartition entry
// (network bytes) never panics; what decodes has a positive version and
// encodes back to the same bytes.
func FuzzDecodeRemoteLog(f *testing.F) {
	f.Add(EncodeRemoteLog(1, []byte(`{"segments":[]}`)))
	f.Add(EncodeRemoteLog(1<<40, nil))
	f.Add([]byte{0, 0, 0})
	f.Add(EncodeRemoteLog(-1, []byte("x")))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, m, err := DecodeRemoteLog(b)
		if err != nil {
			return
		}
		if v <= 0 {
			t.Fatalf("version %d decoded", v)
		}
		if !bytes.Equal(EncodeRemoteLog(v, m), b) {
			t.Fatal("does not encode back")
		}
	})
}
