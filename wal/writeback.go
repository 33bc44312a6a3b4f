package wal

// startWriteback starts the writeback of seg's whole chunks below end that
// were not started yet (owner only). A failure is logged once and
// otherwise ignored: it promises nothing, and a failing disk shows up in
// the fdatasyncs that do.
func (l *Log) startWriteback(seg *segment, end, chunk int64) {
	end -= end % chunk
	if end <= seg.writeback {
		return
	}
	from := seg.writeback
	seg.writeback = end
	if err := l.writeback(seg.f, from, end-from); err != nil && !l.writebackErr {
		l.writebackErr = true
		l.logger.Warn("starting writeback failed; appends go on", "segment", seg.base, "err", err)
	}
}
