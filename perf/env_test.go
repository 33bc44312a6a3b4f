package perf

import "testing"

func TestAPILevel(t *testing.T) {
	served := map[int16]int16{0: 12, 1: 16, 2: 8, 3: 12, 18: 4}
	got := apiLevel(func(k int16) (int16, bool) { v, ok := served[k]; return v, ok })
	want := "Produce v12, Fetch v16, ListOffsets v8, Metadata v12, OffsetCommit -, JoinGroup -, ApiVersions v4"
	if got != want {
		t.Errorf("apiLevel = %q, want %q", got, want)
	}
}
