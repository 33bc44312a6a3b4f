package netio

// Exports for the tests in package netio_test (the ones that start a
// whole broker, which package netio's own tests cannot import).

// E2EBatch builds a v2 record batch (e2eBatch).
var E2EBatch = e2eBatch

// APIRow is one row of apiTable, as the tests see it.
type APIRow struct {
	Key, Min, Max, AdvMin int16
	Name                  string
}

// APITable lists apiTable's rows in order.
func APITable() []APIRow {
	rows := make([]APIRow, len(apiTable))
	for i, h := range apiTable {
		rows[i] = APIRow{Key: h.key, Min: h.min, Max: h.max, AdvMin: h.advMin, Name: h.name}
	}
	return rows
}

// SkipTags is skipTags.
var SkipTags = skipTags

// ValidateRecords is validateRecords.
var ValidateRecords = validateRecords

// ErrCode is errCode.
var ErrCode = errCode

// OpenConns is how many connections the server holds open.
func (s *Server) OpenConns() int64 { return s.conns.Load() }

// EventLoops is the number of gnet event loops the server runs.
func (s *Server) EventLoops() int { return s.cfg.EventLoops }

// UnreadBytes is how many bytes gnet holds for connections the server is
// not reading (the holdUnread count).
func (s *Server) UnreadBytes() int64 { return s.unread.Load() }
