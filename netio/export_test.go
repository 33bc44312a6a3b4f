package netio

import "sort"

// Exports for the tests in package netio_test (the ones that start a
// whole broker, which package netio's own tests cannot import).

// E2EBatch builds a v2 record batch (e2eBatch).
var E2EBatch = e2eBatch

// APIRow is one row of apiTable, as the tests see it.
type APIRow struct {
	Key, Min, Max, AdvMin int16
	Name                  string
}

// APITable lists the rows a single-node Kafka listener without SASL or
// an authorizer serves (apiTable, txnAPITable and shareAPITable), by key, as ApiVersions
// lists them.
func APITable() []APIRow {
	var rows []APIRow
	for _, t := range [][]apiHandler{apiTable, txnAPITable, shareAPITable} {
		for _, h := range t {
			rows = append(rows, APIRow{Key: h.key, Min: h.min, Max: h.max, AdvMin: h.advMin, Name: h.name})
		}
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Key < rows[j].Key })
	return rows
}

// SkipTags is skipTags.
var SkipTags = skipTags

// ValidateRecords is validateRecords.
var ValidateRecords = validateRecords

// ErrCode is errCode.
var ErrCode = errCode

// ParkedFetches is how many long-poll fetches wait for data now.
func (s *Server) ParkedFetches() int64 { return s.parkedFetches.Load() }

// OpenConns is how many connections the server holds open.
func (s *Server) OpenConns() int64 { return s.conns.Load() }

// EventLoops is the number of gnet event loops the server runs.
func (s *Server) EventLoops() int { return s.cfg.EventLoops }

// UnreadBytes is how many bytes gnet holds for connections the server is
// not reading (the holdUnread count).
func (s *Server) UnreadBytes() int64 { return s.unread.Load() }

// HandshakingConns is how many connections a TLS listener holds in their
// TLS handshake (0 for a plaintext listener).
func (s *Server) HandshakingConns() int64 {
	if s.tls == nil {
		return 0
	}
	return s.tls.handshaking.Load()
}

// UnauthenticatedConns is how many connections count against the
// listener's Security.MaxUnauthenticatedConns now.
func (s *Server) UnauthenticatedConns() int64 { return s.unauthed.Load() }

// OverflowChunk is the unit of what a connection that is not read is
// charged (overflow.go): its unread bytes rounded up to whole chunks.
const OverflowChunk = overflowChunk
