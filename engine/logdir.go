package engine

import "path/filepath"

// LogDir is the data directory as DescribeLogDirs shows it: its path
// and its file system's size and usable bytes (-1 when unknown).
type LogDir struct {
	Path                    string
	TotalBytes, UsableBytes int64
}

// LogDir describes the engine's data directory.
func (e *Engine) LogDir() LogDir {
	path, err := filepath.Abs(e.cfg.DataDir)
	if err != nil {
		path = e.cfg.DataDir
	}
	d := LogDir{Path: path, TotalBytes: -1, UsableBytes: -1}
	if total, usable, ok := diskSize(e.cfg.DataDir); ok {
		d.TotalBytes, d.UsableBytes = total, usable
	}
	return d
}

// LocalBytes is the size of the partition's log on this broker, and
// false when this broker holds none of it (in cluster mode, a replica
// elsewhere).
func (p *Partition) LocalBytes() (int64, bool) {
	if p.log == nil {
		return 0, false
	}
	return p.log.Size(), true
}
