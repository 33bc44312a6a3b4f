package netio

import (
	"encoding/binary"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ApiVersions, key 18, versions 0-4.
//
//   - Lists exactly the rows of apiTable: what is implemented, with the
//     version ranges really handled (Produce is advertised from 0, see
//     k00_produce.go).
//   - A request of a newer version than 4 (franz-go opens with 5, sarama and
//     librdkafka with 3) gets the v0-format UNSUPPORTED_VERSION answer with
//     our ranges, so the client retries with a version we serve.
//   - The response header is v0 for every version (no tagged fields), as
//     the protocol requires for ApiVersions.

func (s *Server) apiVersionKeys() []kmsg.ApiVersionsResponseApiKey {
	var out []kmsg.ApiVersionsResponseApiKey
	for _, h := range s.handlers {
		if h != nil && !h.clusterOnly {
			out = append(out, kmsg.ApiVersionsResponseApiKey{ApiKey: h.key, MinVersion: h.advMin, MaxVersion: h.max})
		}
	}
	return out
}

func handleAPIVersions(s *Server, r *request) frameOutcome {
	req := kmsg.NewPtrApiVersionsRequest()
	resp := req.ResponseKind().(*kmsg.ApiVersionsResponse)
	if err := r.decode(req); err != nil {
		// Kafka answers a body it cannot read with INVALID_REQUEST
		// rather than dropping the connection.
		resp.ErrorCode = kerr.InvalidRequest.Code
		r.failed = true
	}
	resp.ApiKeys = s.apiVersionKeys()
	r.respond(resp)
	return frameDone
}

// respondAPIVersionsUnsupported sends the v0-format answer (error code,
// then the key ranges) that every client can read.
func (r *request) respondAPIVersionsUnsupported() {
	buf := make([]byte, 4, 256)
	buf = binary.BigEndian.AppendUint32(buf, uint32(r.corr))
	buf = binary.BigEndian.AppendUint16(buf, uint16(kerr.UnsupportedVersion.Code))
	keys := r.conn.srv.apiVersionKeys()
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(keys)))
	for _, k := range keys {
		buf = binary.BigEndian.AppendUint16(buf, uint16(k.ApiKey))
		buf = binary.BigEndian.AppendUint16(buf, uint16(k.MinVersion))
		buf = binary.BigEndian.AppendUint16(buf, uint16(k.MaxVersion))
	}
	binary.BigEndian.PutUint32(buf, uint32(len(buf)-4))
	r.failed = true
	r.count()
	r.conn.completeBytes(r.resp, buf)
	r.finish()
}
