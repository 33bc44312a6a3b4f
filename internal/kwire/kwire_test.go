package kwire

import (
	"context"
	"encoding/binary"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// A round trip against a fake broker that answers a flexible CreateTopics
// with a header tag section.
func TestCallRoundTrip(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		var size [4]byte
		if _, err := c.Read(size[:]); err != nil {
			return
		}
		buf := make([]byte, binary.BigEndian.Uint32(size[:]))
		if _, err := c.Read(buf); err != nil {
			return
		}
		corr := binary.BigEndian.Uint32(buf[4:])
		resp := kmsg.NewPtrCreateTopicsResponse()
		resp.Version = 7
		rt := kmsg.NewCreateTopicsResponseTopic()
		rt.Topic, rt.NumPartitions = "t", 6
		resp.Topics = append(resp.Topics, rt)
		out := binary.BigEndian.AppendUint32(make([]byte, 4), corr)
		out = append(out, 0) // header tags
		out = resp.AppendTo(out)
		binary.BigEndian.PutUint32(out, uint32(len(out)-4))
		c.Write(out)
	}()
	req := kmsg.NewPtrCreateTopicsRequest()
	req.Version = 7
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got, err := Call(ctx, ln.Addr().String(), req)
	if err != nil {
		t.Fatal(err)
	}
	ct := got.(*kmsg.CreateTopicsResponse)
	if len(ct.Topics) != 1 || ct.Topics[0].Topic != "t" || ct.Topics[0].NumPartitions != 6 {
		t.Fatalf("got %+v", ct.Topics)
	}
}

func TestParseResponseRefusesBadHeaders(t *testing.T) {
	req := kmsg.NewPtrCreateTopicsRequest()
	req.Version = 7
	for name, b := range map[string][]byte{
		"short":      {0, 0},
		"wrong corr": {0, 0, 0, 2, 0},
		"bad tags":   {0, 0, 0, 1, 0x80},
	} {
		if _, err := ParseResponse(b, req, 1); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func FuzzParseResponse(f *testing.F) {
	resp := kmsg.NewPtrCreateTopicsResponse()
	resp.Version = 7
	resp.Topics = append(resp.Topics, kmsg.NewCreateTopicsResponseTopic())
	seed := append([]byte{0, 0, 0, 1, 0}, resp.AppendTo(nil)...)
	f.Add(seed)
	f.Add([]byte{0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		req := kmsg.NewPtrCreateTopicsRequest()
		req.Version = 7
		ParseResponse(b, req, 1)
	})
}
