package proxy

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/valyala/fasthttp"

	"explorer-edge/config"
)

// NewServer is the public fasthttp server with the hardening of
// server.*: timeouts that cut off slow clients, bounded headers and
// connections, no request bodies (every route is a GET), and requests it
// cannot read answered with envelopes. Serve it on p.Listener(ln,
// PublicListener(cfg)) (or GatherListener(ln)): its write buffer is sized
// for gatherConn.
func (p *Proxy) NewServer(cfg config.Server) *fasthttp.Server {
	return &fasthttp.Server{
		Handler:            p.Handle,
		Name:               "explorer-edge",
		ReadTimeout:        cfg.ReadTimeout,
		WriteTimeout:       cfg.WriteTimeout,
		IdleTimeout:        cfg.IdleTimeout,
		ErrorHandler:       p.unreadable(errHeadersTooLarge(cfg.MaxHeaderBytes)),
		ReadBufferSize:     cfg.MaxHeaderBytes, // bounds request line + headers
		WriteBufferSize:    writeChunk,         // the body bypasses it: gatherConn
		MaxRequestBodySize: maxBodyBytes,
		// The listener caps connections (Listener, server.max_conns) and
		// refuses with an envelope; fasthttp's own cap, which answers in
		// plain text, is a backstop above it: a closed connection frees
		// the listener's slot a moment before fasthttp's worker.
		Concurrency:       cfg.MaxConns + concurrencySlack,
		ReduceMemoryUsage: false,
		// Case of header names is kept as the edge sets them; saves work
		// on every request.
		DisableHeaderNamesNormalizing: false,
		NoDefaultContentType:          true,
		CloseOnShutdown:               true,
		TCPKeepalive:                  true,
		Logger:                        connLogger{p.log},
	}
}

// connLogger takes fasthttp's log lines. Those about one client breaking
// the protocol (a body too large, a malformed request line, a timeout) are
// the client's doing and go to the debug level; anything else (max_conns
// reached, accept failing) is the operator's business and goes to warn.
type connLogger struct{ log *slog.Logger }

func (l connLogger) Printf(format string, args ...any) {
	level := slog.LevelWarn
	if strings.HasPrefix(format, "error when serving connection") {
		level = slog.LevelDebug
	}
	if !l.log.Enabled(context.Background(), level) {
		return
	}
	l.log.Log(context.Background(), level, "fasthttp", "msg", fmt.Sprintf(format, args...))
}
