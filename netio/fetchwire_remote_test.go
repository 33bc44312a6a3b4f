package netio

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/engine"
)

// Copy-below records, remote parts (as the last partition, so a non-flex
// response ends in them) and file ranges in one response, every version.
func TestFetchWireRemoteAndCopied(t *testing.T) {
	l := wireLog(t, 24)
	all := wireRead(t, l, 0, 1<<20)
	small := wireRead(t, l, 20, 1500)
	var raw []byte
	for _, fr := range small.Ranges {
		buf := make([]byte, fr.Len)
		if _, err := fr.File.ReadAt(buf, fr.Pos); err != nil {
			t.Fatal(err)
		}
		raw = append(raw, buf...)
	}
	// Remote parts: the same bytes cut in three (like chunk slices).
	a, b := len(raw)/3, 2*len(raw)/3
	rr := engine.RemoteRead{Parts: [][]byte{raw[:a:a], raw[a:b:b], raw[b:]}, Bytes: int64(len(raw)), FirstOffset: small.FirstOffset, NextOffset: small.NextOffset}
	want := fmt.Sprint(wireRecords(t, raw))
	wantAll := fmt.Sprint(wireRecords(t, wireBytes(t, func() []part {
		var ps []part
		for _, fr := range all.Ranges {
			ps = append(ps, part{f: fr})
		}
		return ps
	}())))
	for v := int16(4); v <= 17; v++ {
		for _, below := range []int64{0, small.Bytes + 1} {
			topics := []fetchTopicResult{{name: "t", id: [16]byte{1}, parts: []fetchPartResult{
				{partition: 0, hw: 72, lso: 72, chunk: small},
				{partition: 1, hw: 72, lso: 72, chunk: all},
				{partition: 2, hw: 72, lso: 72, remote: rr},
			}}}
			r := &request{key: 1, version: v, corr: 42, flexible: v >= 12}
			parts, _ := encodeFetch(r, 0, 0, topics, below, nil)
			for i, p := range parts {
				if p.f.File == nil && p.b == nil && p.f.Len != 0 {
					t.Fatalf("v%d: part %d left a placeholder", v, i)
				}
			}
			body := wireCheckFrame(t, wireBytes(t, parts), v)
			resp := kmsg.NewPtrFetchResponse()
			resp.SetVersion(v)
			if err := resp.ReadFrom(body); err != nil {
				t.Fatalf("v%d below %d: %v", v, below, err)
			}
			ps := resp.Topics[0].Partitions
			if got := fmt.Sprint(wireRecords(t, ps[0].RecordBatches)); got != want {
				t.Fatalf("v%d: copied partition %s", v, got)
			}
			if got := fmt.Sprint(wireRecords(t, ps[1].RecordBatches)); got != wantAll {
				t.Fatalf("v%d: file partition", v)
			}
			if got := fmt.Sprint(wireRecords(t, ps[2].RecordBatches)); got != want {
				t.Fatalf("v%d: remote partition %s", v, got)
			}
		}
	}
}
