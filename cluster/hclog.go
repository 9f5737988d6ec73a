package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"slices"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// hclogger hands raft's logs (hclog) to a *slog.Logger. Raft's trace
// level goes to slog's debug. Once closing is closed (the node stops),
// the errors that raft logs on every clean stop go at a lower level; see
// stopLevel.
type hclogger struct {
	l       *slog.Logger
	name    string
	args    []any
	closing <-chan struct{} // nil: never
}

// newHCLogger returns the hclog.Logger of raft over l; closing is closed
// once the node stops (nil: never).
func newHCLogger(l *slog.Logger, closing <-chan struct{}) hclog.Logger {
	return &hclogger{l: l, closing: closing}
}

// Messages that raft logs at error level on a clean stop of a leader:
// the node hands its leadership over before it stops raft (Close).
const (
	// The transport is closed while an RPC of a peer (the new leader's
	// heartbeat or entries) that it had taken waits for raft, which has
	// stopped: raft.ErrTransportShutdown.
	msgDecodeFailed = "failed to decode incoming command"
	// The replication to the peer that took over sees its newer term
	// before this node has stepped down.
	msgNewerTerm = "peer has newer term, stopping replication"
)

// stopLevel returns the level of a record of raft's: level, but for the
// errors that a clean stop causes, once closing is closed: a transport
// shut down under an RPC goes to debug, the new leader's term to info.
// Any other error of raft's keeps its level, on a stop too.
func (h *hclogger) stopLevel(level hclog.Level, msg string, args []any) hclog.Level {
	if level != hclog.Error || h.closing == nil {
		return level
	}
	select {
	case <-h.closing:
	default:
		return level
	}
	switch msg {
	case msgDecodeFailed:
		for i := 0; i+1 < len(args); i += 2 {
			if err, ok := args[i+1].(error); ok && args[i] == "error" && errors.Is(err, raft.ErrTransportShutdown) {
				return hclog.Debug
			}
		}
	case msgNewerTerm:
		return hclog.Info
	}
	return level
}

func slogLevel(level hclog.Level) slog.Level {
	switch level {
	case hclog.Trace, hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	}
	return slog.LevelInfo
}

func (h *hclogger) Log(level hclog.Level, msg string, args ...any) {
	lv := slogLevel(h.stopLevel(level, msg, args))
	if !h.l.Enabled(context.Background(), lv) {
		return
	}
	h.l.Log(context.Background(), lv, msg, formatArgs(args)...)
}

// formatArgs renders raft's hclog.Fmt values, which slog would print as
// their parts.
func formatArgs(args []any) []any {
	var out []any
	for i, a := range args {
		f, ok := a.(hclog.Format)
		if !ok || len(f) == 0 {
			continue
		}
		if format, ok := f[0].(string); ok {
			if out == nil {
				out = slices.Clone(args)
			}
			out[i] = fmt.Sprintf(format, f[1:]...)
		}
	}
	if out == nil {
		return args
	}
	return out
}

func (h *hclogger) Trace(msg string, args ...any) { h.Log(hclog.Trace, msg, args...) }
func (h *hclogger) Debug(msg string, args ...any) { h.Log(hclog.Debug, msg, args...) }
func (h *hclogger) Info(msg string, args ...any)  { h.Log(hclog.Info, msg, args...) }
func (h *hclogger) Warn(msg string, args ...any)  { h.Log(hclog.Warn, msg, args...) }
func (h *hclogger) Error(msg string, args ...any) { h.Log(hclog.Error, msg, args...) }

func (h *hclogger) enabled(level hclog.Level) bool {
	return h.l.Enabled(context.Background(), slogLevel(level))
}

func (h *hclogger) IsTrace() bool { return h.enabled(hclog.Trace) }
func (h *hclogger) IsDebug() bool { return h.enabled(hclog.Debug) }
func (h *hclogger) IsInfo() bool  { return h.enabled(hclog.Info) }
func (h *hclogger) IsWarn() bool  { return h.enabled(hclog.Warn) }
func (h *hclogger) IsError() bool { return h.enabled(hclog.Error) }

func (h *hclogger) ImpliedArgs() []any { return h.args }

func (h *hclogger) With(args ...any) hclog.Logger {
	return &hclogger{l: h.l.With(args...), name: h.name, args: append(append([]any(nil), h.args...), args...),
		closing: h.closing}
}

func (h *hclogger) Name() string { return h.name }

func (h *hclogger) Named(name string) hclog.Logger {
	if h.name != "" {
		name = h.name + "." + name
	}
	return h.ResetNamed(name)
}

func (h *hclogger) ResetNamed(name string) hclog.Logger {
	return &hclogger{l: h.l.With(slog.String(logComponent, name)), name: name, args: h.args, closing: h.closing}
}

// SetLevel does nothing: the slog handler decides.
func (h *hclogger) SetLevel(hclog.Level) {}

func (h *hclogger) GetLevel() hclog.Level {
	for _, lv := range []hclog.Level{hclog.Debug, hclog.Info, hclog.Warn, hclog.Error} {
		if h.enabled(lv) {
			return lv
		}
	}
	return hclog.Off
}

func (h *hclogger) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(h.StandardWriter(opts), "", 0)
}

func (h *hclogger) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return slog.NewLogLogger(h.l.Handler(), slog.LevelInfo).Writer()
}
