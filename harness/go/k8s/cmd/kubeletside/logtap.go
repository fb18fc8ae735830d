package main

import (
	"slices"

	"github.com/go-logr/logr"
)

// tapSink forwards everything to the klog sink and additionally reports
// messages to a callback regardless of verbosity. The DRA manager announces
// the completion of its start-up ResourceSlice wipe only through its logger;
// tests need that moment so that slices they publish are not wiped behind
// their back.
type tapSink struct {
	inner logr.LogSink
	names []string
	tap   func(names []string, msg string, kv []any)
}

var (
	_ logr.LogSink          = (*tapSink)(nil)
	_ logr.CallDepthLogSink = (*tapSink)(nil)
)

func (s *tapSink) Init(info logr.RuntimeInfo) { s.inner.Init(info) }

// Enabled is always true so that the tap sees V(3) messages; Info filters
// again before forwarding to klog.
func (s *tapSink) Enabled(int) bool { return true }

func (s *tapSink) Info(level int, msg string, kv ...any) {
	s.tap(s.names, msg, kv)
	if s.inner.Enabled(level) {
		s.inner.Info(level, msg, kv...)
	}
}

func (s *tapSink) Error(err error, msg string, kv ...any) { s.inner.Error(err, msg, kv...) }

func (s *tapSink) WithValues(kv ...any) logr.LogSink {
	return &tapSink{inner: s.inner.WithValues(kv...), names: s.names, tap: s.tap}
}

func (s *tapSink) WithName(name string) logr.LogSink {
	return &tapSink{inner: s.inner.WithName(name), names: append(slices.Clone(s.names), name), tap: s.tap}
}

func (s *tapSink) WithCallDepth(depth int) logr.LogSink {
	inner := s.inner
	if cd, ok := inner.(logr.CallDepthLogSink); ok {
		inner = cd.WithCallDepth(depth)
	}
	return &tapSink{inner: inner, names: s.names, tap: s.tap}
}
