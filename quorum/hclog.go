package quorum

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// hclogAdapter routes hashicorp/raft's hclog output into a slog.Logger:
// levels map one to one (Trace becomes slog Debug-4), the logger name
// becomes a "component" attribute, and messages below min are dropped
// before any formatting.
type hclogAdapter struct {
	l       *slog.Logger
	name    string
	implied []any
	min     hclog.Level
}

func newHclog(l *slog.Logger, min slog.Level) hclog.Logger {
	return &hclogAdapter{l: l, min: hclogLevel(min)}
}

func hclogLevel(l slog.Level) hclog.Level {
	switch {
	case l < slog.LevelDebug:
		return hclog.Trace
	case l < slog.LevelInfo:
		return hclog.Debug
	case l < slog.LevelWarn:
		return hclog.Info
	case l < slog.LevelError:
		return hclog.Warn
	}
	return hclog.Error
}

func slogLevel(l hclog.Level) slog.Level {
	switch l {
	case hclog.Trace:
		return slog.LevelDebug - 4
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	}
	return slog.LevelInfo
}

func (a *hclogAdapter) Log(level hclog.Level, msg string, args ...any) {
	if level == hclog.Off || level < a.min {
		return
	}
	attrs := make([]any, 0, len(a.implied)+len(args)+2)
	if a.name != "" {
		attrs = append(attrs, "component", a.name)
	}
	attrs = append(attrs, a.implied...)
	attrs = append(attrs, args...)
	a.l.Log(context.Background(), slogLevel(level), msg, attrs...)
}

func (a *hclogAdapter) Trace(msg string, args ...any) { a.Log(hclog.Trace, msg, args...) }
func (a *hclogAdapter) Debug(msg string, args ...any) { a.Log(hclog.Debug, msg, args...) }
func (a *hclogAdapter) Info(msg string, args ...any)  { a.Log(hclog.Info, msg, args...) }
func (a *hclogAdapter) Warn(msg string, args ...any)  { a.Log(hclog.Warn, msg, args...) }
func (a *hclogAdapter) Error(msg string, args ...any) { a.Log(hclog.Error, msg, args...) }
func (a *hclogAdapter) IsTrace() bool                 { return a.min <= hclog.Trace }
func (a *hclogAdapter) IsDebug() bool                 { return a.min <= hclog.Debug }
func (a *hclogAdapter) IsInfo() bool                  { return a.min <= hclog.Info }
func (a *hclogAdapter) IsWarn() bool                  { return a.min <= hclog.Warn }
func (a *hclogAdapter) IsError() bool                 { return a.min <= hclog.Error }
func (a *hclogAdapter) ImpliedArgs() []any            { return a.implied }
func (a *hclogAdapter) Name() string                  { return a.name }
func (a *hclogAdapter) GetLevel() hclog.Level         { return a.min }

// SetLevel is ignored: the level is fixed when the node is configured.
func (a *hclogAdapter) SetLevel(hclog.Level) {}

func (a *hclogAdapter) With(args ...any) hclog.Logger {
	c := *a
	c.implied = append(append([]any(nil), a.implied...), args...)
	return &c
}

func (a *hclogAdapter) Named(name string) hclog.Logger {
	c := *a
	if c.name != "" {
		name = c.name + "." + name
	}
	c.name = name
	return &c
}

func (a *hclogAdapter) ResetNamed(name string) hclog.Logger {
	c := *a
	c.name = name
	return &c
}

func (a *hclogAdapter) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(a.StandardWriter(opts), "", 0)
}

func (a *hclogAdapter) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return stdWriter{a}
}

// stdWriter turns lines written to a standard library logger into Info
// messages (or the level of a "[LEVEL]" prefix).
type stdWriter struct{ a *hclogAdapter }

func (w stdWriter) Write(p []byte) (int, error) {
	msg := strings.TrimSpace(string(p))
	level := hclog.Info
	for _, l := range []hclog.Level{hclog.Trace, hclog.Debug, hclog.Info, hclog.Warn, hclog.Error} {
		prefix := fmt.Sprintf("[%s]", strings.ToUpper(l.String()))
		if strings.HasPrefix(msg, prefix) {
			level, msg = l, strings.TrimSpace(strings.TrimPrefix(msg, prefix))
			break
		}
	}
	w.a.Log(level, msg)
	return len(p), nil
}
